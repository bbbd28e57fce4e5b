import BerylTools
import XCTest

final class ProfileValuesTests: XCTestCase {
    func testALongWriteBatchIsAppliedWholeOrNotAtAll() {
        var values = ProfileValues<Int>()
        XCTAssertNil(values.apply([(1, 0, [1, 2, 3]), (1, 3, [4, 5]), (2, 0, [9])]))
        XCTAssertEqual(values[1], [1, 2, 3, 4, 5], "later parts extend the earlier ones")
        XCTAssertEqual(values[2], [9])
        XCTAssertNil(values.apply([(1, 0, [7])]))
        XCTAssertEqual(values[1], [7], "offset 0 replaces")

        // A gap refuses the whole batch, including the part that was fine.
        XCTAssertEqual(values.apply([(2, 0, [8]), (1, 5, [1])]), 0x07)
        XCTAssertEqual(values[2], [9])
        XCTAssertEqual(values.apply([(1, 0, [UInt8](repeating: 0, count: 400)), (1, 400, [UInt8](repeating: 0, count: 113))]), 0x0D)
        XCTAssertEqual(values[1], [7])
        XCTAssertEqual(values[3], [], "never written: empty")
    }
}
