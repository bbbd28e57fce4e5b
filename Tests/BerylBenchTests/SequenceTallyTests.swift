import BerylBench
import Foundation
import XCTest

/// The benchmarks' receiver: a value counts once, under its own number; repeats and reorderings are out of order.
final class SequenceTallyTests: XCTestCase {
    private func value(_ sequence: UInt32) -> Data {
        var value = Data(count: 20)
        SequenceTally.stamp(sequence, into: &value)
        return value
    }

    func testRepeatsAndReorderingsAreOutOfOrderAndNotReceived() {
        var tally = SequenceTally()
        let now = ContinuousClock.now
        for sequence: UInt32 in [0, 1, 1, 1, 3, 2, 4] { tally.received(value(sequence), at: now) }
        tally.received(Data([1, 2]), at: now)
        XCTAssertEqual(tally.total, 4, "0, 1, 3 and 4 arrived under their own numbers; 2 counts as lost")
        XCTAssertEqual(tally.outOfOrder, 3, "two repeats of 1, and 2 after 3")
    }
}
