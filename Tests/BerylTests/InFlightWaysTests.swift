@testable import Beryl
import XCTest

/// Pipelined sends leave one way only while none is on its way the other (InFlightWays).
final class InFlightWaysTests: XCTestCase {
    func testSendsKeepToOneWayUntilItDrains() {
        var ways = InFlightWays()
        XCTAssertEqual(ways.next(live: true), .dataChannel)
        ways.sent([1, 2], .dataChannel)
        XCTAssertNil(ways.next(live: false), "the grant was revoked: managerd waits for the data channel to drain")
        ways.answered(1)
        XCTAssertNil(ways.next(live: false))
        ways.answered(2)
        XCTAssertEqual(ways.next(live: false), .managerd)
        ways.sent([3], .managerd)
        XCTAssertEqual(ways.next(live: true), .managerd, "live again: the data channel waits for managerd's answer")
        ways.answered(3)
        XCTAssertEqual(ways.next(live: true), .dataChannel)
    }

    func testResetForgetsWhatWasOnItsWay() {
        var ways = InFlightWays()
        ways.sent([1], .managerd)
        ways.reset()
        XCTAssertEqual(ways.next(live: true), .dataChannel)
    }
}
