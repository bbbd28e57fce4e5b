@testable import Beryl
import XCTest

/// Values notified while their subscription is being written wait for its answer (SubscriptionGate).
final class SubscriptionGateTests: XCTestCase {
    func testValuesOvertakingTheSubscriptionsAnswerWaitForItInOrder() {
        var gate = SubscriptionGate<String>()
        XCTAssertEqual(gate.arrived("before", of: 0x10), "before", "nothing is being written: delivered at once")
        gate.subscribing(0x10)
        XCTAssertNil(gate.arrived("0", of: 0x10))
        XCTAssertNil(gate.arrived("1", of: 0x10))
        XCTAssertEqual(gate.arrived("other", of: 0x20), "other", "another value's subscription is not held up")
        XCTAssertEqual(gate.answered(0x10), ["0", "1"])
        XCTAssertEqual(gate.arrived("2", of: 0x10), "2")
        XCTAssertEqual(gate.answered(0x10), [], "an answer no write is owed changes nothing")
    }

    func testTwoWritesOfOneValueReleaseItsValuesAfterTheLastAnswer() {
        var gate = SubscriptionGate<Int>()
        gate.subscribing(0x10)
        gate.subscribing(0x10)
        XCTAssertNil(gate.arrived(0, of: 0x10))
        XCTAssertEqual(gate.answered(0x10), [])
        XCTAssertNil(gate.arrived(1, of: 0x10))
        XCTAssertEqual(gate.answered(0x10), [0, 1])
    }

    func testALinkGoingDownDropsWhatWasHeld() {
        var gate = SubscriptionGate<Int>()
        gate.subscribing(0x10)
        XCTAssertNil(gate.arrived(0, of: 0x10))
        gate.reset()
        XCTAssertEqual(gate.answered(0x10), [])
        XCTAssertEqual(gate.arrived(1, of: 0x10), 1)
    }
}
