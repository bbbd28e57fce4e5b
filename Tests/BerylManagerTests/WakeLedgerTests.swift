import BerylManager
import XCTest

/// The wake budget in virtual time: what took a relaunched app, a 2 s manifest and a kill to show in a process test.
final class WakeLedgerTests: XCTestCase {
    func testAWakeEndsWhenEverySessionHasHandledWhatItWasGiven() {
        var ledger = WakeLedger()
        XCTAssertEqual(ledger.stamp(session: 1, app: "lock"), 0, "not awake: events carry no number")
        XCTAssertTrue(ledger.begin("lock", at: .milliseconds(10_000), budget: .seconds(2)))
        XCTAssertFalse(ledger.begin("lock", at: .milliseconds(11_000), budget: .seconds(2)), "one wake at a time")
        XCTAssertEqual(ledger.stamp(session: 1, app: "lock"), 1)
        XCTAssertEqual(ledger.stamp(session: 1, app: "lock"), 2)
        XCTAssertEqual(ledger.stamp(session: 2, app: "lock"), 1)
        XCTAssertNil(ledger.idle(session: 1, upTo: 1, app: "lock", sessions: [1, 2], at: .milliseconds(10_500)), "event 2 is still being handled")
        XCTAssertNil(ledger.idle(session: 1, upTo: 2, app: "lock", sessions: [1, 2], at: .milliseconds(10_600)), "session 2 is busy")
        XCTAssertEqual(ledger.idle(session: 2, upTo: 1, app: "lock", sessions: [1, 2], at: .milliseconds(10_700)), .milliseconds(700))
        XCTAssertFalse(ledger.isAwake("lock"))

        // A number never sent counts for no more than what was sent.
        ledger.begin("lock", at: .seconds(20), budget: .seconds(2))
        _ = ledger.stamp(session: 1, app: "lock")
        _ = ledger.stamp(session: 1, app: "lock")
        _ = ledger.stamp(session: 2, app: "lock")
        XCTAssertNil(ledger.idle(session: 2, upTo: 99, app: "lock", sessions: [1, 2], at: .seconds(21)))
        XCTAssertTrue(ledger.isAwake("lock"), "session 1 owes event 4")
    }

    func testASessionThatGoesOwesNothing() {
        var ledger = WakeLedger()
        ledger.begin("lock", at: .zero, budget: .seconds(10))
        _ = ledger.stamp(session: 1, app: "lock")
        _ = ledger.stamp(session: 2, app: "lock")
        XCTAssertNil(ledger.idle(session: 1, upTo: 1, app: "lock", sessions: [1, 2], at: .seconds(1)))
        XCTAssertEqual(ledger.closed(session: 2, app: "lock", remaining: [1], at: .seconds(3)), .seconds(3))
    }

    func testAnAppStillAwakeAtItsDeadlineHasOverrun() {
        var ledger = WakeLedger()
        ledger.begin("slow", at: .seconds(1), budget: .seconds(1))
        ledger.begin("quick", at: .seconds(1), budget: .seconds(5))
        XCTAssertEqual(ledger.nextDeadline, .seconds(2))
        _ = ledger.stamp(session: 7, app: "slow")
        XCTAssertEqual(ledger.overrun(at: .seconds(1.9)), [])
        XCTAssertEqual(ledger.overrun(at: .seconds(2)), ["slow"])
        XCTAssertEqual(ledger.nextDeadline, .seconds(6))
        XCTAssertNil(ledger.idle(session: 7, upTo: 1, app: "slow", sessions: [7], at: .seconds(2.5)), "its wake is over already")
        ledger.end("quick")
        XCTAssertNil(ledger.nextDeadline)
    }
}
