import BerylManager
import XCTest

/// Core Bluetooth's background execution rules on virtual time: what LifecycleTests and BackgroundTests showed with
/// two stacks, real apps and seconds of waiting, scripted here event by event.
final class AppLifecycleTests: XCTestCase {
    private let lock = AppLifecycle.Rules(modes: [.central], suspendAfter: .seconds(5), wakeBudget: .seconds(10))
    private let foregroundOnly = AppLifecycle.Rules(modes: [], suspendAfter: .seconds(2), wakeBudget: .seconds(10))

    func testAForegroundOnlyAppIsSuspendedAfterItsDelayAndHoldsWhatIsNotMomentary() {
        var life = AppLifecycle(defaultSuspendAfter: .seconds(5))
        XCTAssertEqual(life.hello("notes", session: 1, rules: foregroundOnly, at: .zero), 0)
        XCTAssertEqual(life.state(of: "notes", hasSessions: true), .foreground, "a declared app that connects itself was started by its user")

        let change = life.set("notes", to: .background, rules: foregroundOnly, hasSessions: true, at: .seconds(10))
        XCTAssertEqual(change, .init(previous: .foreground, current: .background, deliversHeld: false))
        XCTAssertEqual(life.nextDeadline, .seconds(12), "the manifest's 2 s, not the default")
        XCTAssertEqual(life.disposition(of: .work, app: "notes", session: 1, rules: foregroundOnly, at: .seconds(11)), .deliver(wake: 0),
                       "still working, and no background mode wakes it")
        XCTAssertEqual(life.expire(at: .seconds(11.9)), [])
        XCTAssertEqual(life.expire(at: .seconds(12)), [.suspended(app: "notes", after: .seconds(2))])
        XCTAssertEqual(life.state(of: "notes", hasSessions: true), .suspended)
        XCTAssertNil(life.nextDeadline)

        XCTAssertEqual(life.disposition(of: .work, app: "notes", session: 1, rules: foregroundOnly, at: .seconds(13)), .hold)
        XCTAssertEqual(life.disposition(of: .news, app: "notes", session: 1, rules: foregroundOnly, at: .seconds(13)), .hold)
        XCTAssertEqual(life.disposition(of: .prompt, app: "notes", session: 1, rules: foregroundOnly, at: .seconds(13)), .drop)

        XCTAssertEqual(life.set("notes", to: .background, rules: foregroundOnly, hasSessions: true, at: .seconds(20)),
                       .init(previous: .suspended, current: .background, deliversHeld: true), "back from suspension: what was held goes out")
        XCTAssertEqual(life.nextDeadline, .seconds(22), "and the delay starts again")
    }

    func testReturningToTheForegroundCancelsTheSuspension() {
        var life = AppLifecycle(defaultSuspendAfter: .seconds(5))
        _ = life.set("web", to: .background, rules: nil, hasSessions: true, at: .seconds(1))
        XCTAssertEqual(life.nextDeadline, .seconds(6), "an app without a manifest is suspended after the default delay")
        XCTAssertEqual(life.set("web", to: .foreground, rules: nil, hasSessions: true, at: .seconds(3)),
                       .init(previous: .background, current: .foreground, deliversHeld: true))
        XCTAssertNil(life.nextDeadline)
        XCTAssertEqual(life.expire(at: .seconds(60)), [])
        XCTAssertEqual(life.state(of: "web", hasSessions: true), .foreground)
    }

    func testAnAppWithABackgroundModeIsNeverSuspendedByTheDelay() {
        var life = AppLifecycle(defaultSuspendAfter: .seconds(5))
        _ = life.set("lock", to: .background, rules: lock, hasSessions: true, at: .zero)
        XCTAssertNil(life.nextDeadline)
        XCTAssertEqual(life.expire(at: .seconds(3_600)), [])
        XCTAssertEqual(life.state(of: "lock", hasSessions: true), .background)
    }

    func testWorkWakesABackgroundAppForItsBudgetAndIdleEndsTheWake() {
        var life = AppLifecycle(defaultSuspendAfter: .seconds(5))
        _ = life.hello("lock", session: 1, rules: lock, at: .zero)
        _ = life.set("lock", to: .background, rules: lock, hasSessions: true, at: .seconds(1))
        XCTAssertEqual(life.disposition(of: .news, app: "lock", session: 1, rules: lock, at: .seconds(2)), .deliver(wake: 0), "news wakes no one")
        XCTAssertFalse(life.isAwake("lock"))

        XCTAssertEqual(life.disposition(of: .work, app: "lock", session: 1, rules: lock, at: .seconds(3)), .deliver(wake: 1))
        XCTAssertEqual(life.takeWakesBegun(), [.init(app: "lock", budget: .seconds(10))])
        XCTAssertEqual(life.disposition(of: .news, app: "lock", session: 1, rules: lock, at: .seconds(4)), .deliver(wake: 2),
                       "during a wake every event is counted, so idle means all of them were handled")
        XCTAssertEqual(life.nextDeadline, .seconds(13))
        XCTAssertNil(life.idle(session: 1, upTo: 1, app: "lock", sessions: [1], at: .seconds(5)))
        XCTAssertEqual(life.idle(session: 1, upTo: 2, app: "lock", sessions: [1], at: .seconds(6)), .seconds(3))
        XCTAssertFalse(life.isAwake("lock"))
        XCTAssertEqual(life.takeWakesBegun(), [])
        XCTAssertEqual(life.expire(at: .seconds(13)), [], "a wake that ended cannot overrun")
        XCTAssertEqual(life.tally(of: "lock"), .init(begun: 1, endedIdle: 1, overran: 0))
    }

    func testAnAppStillBusyAtItsDeadlineHasOverrun() {
        var life = AppLifecycle(defaultSuspendAfter: .seconds(5))
        _ = life.set("lock", to: .background, rules: lock, hasSessions: true, at: .zero)
        _ = life.disposition(of: .prompt, app: "lock", session: 1, rules: lock, at: .seconds(1))
        XCTAssertTrue(life.isAwake("lock"), "someone waits for a pairing answer")
        XCTAssertEqual(life.expire(at: .seconds(10.9)), [])
        XCTAssertEqual(life.expire(at: .seconds(11)), [.overran(app: "lock")])
        XCTAssertFalse(life.isAwake("lock"))
        XCTAssertEqual(life.tally(of: "lock"), .init(begun: 1, endedIdle: 0, overran: 1))
        XCTAssertEqual(life.tally(of: "notes"), .init(), "an app never woken has no wakes")
    }

    func testAnAppThatReportsAStateEndsItsWake() {
        var life = AppLifecycle(defaultSuspendAfter: .seconds(5))
        _ = life.set("lock", to: .background, rules: lock, hasSessions: true, at: .zero)
        _ = life.disposition(of: .work, app: "lock", session: 1, rules: lock, at: .seconds(1))
        _ = life.set("lock", to: .foreground, rules: lock, hasSessions: true, at: .seconds(2))
        XCTAssertFalse(life.isAwake("lock"))
        XCTAssertEqual(life.expire(at: .seconds(60)), [], "in the foreground no budget applies")
    }

    func testALaunchInTheBackgroundIsTheFirstWakeFromItsHello() {
        var life = AppLifecycle(defaultSuspendAfter: .seconds(5))
        life.launched("lock")
        XCTAssertEqual(life.state(of: "lock", hasSessions: false), .background)
        XCTAssertFalse(life.isAwake("lock"), "the budget starts when the app connects, not when it is spawned")
        XCTAssertEqual(life.hello("lock", session: 4, rules: lock, at: .seconds(2)), 1, "the Welcome is the wake's first event")
        XCTAssertEqual(life.nextDeadline, .seconds(12))
        XCTAssertEqual(life.state(of: "lock", hasSessions: true), .background, "a launched app stays in the background")
        XCTAssertEqual(life.hello("lock", session: 5, rules: lock, at: .seconds(3)), 1, "its second manager joins the same wake")
        XCTAssertEqual(life.takeWakesBegun().count, 1)
    }

    func testAnAppThisStackDidNotLaunchIsNotRunningOnceItsLastSessionCloses() {
        var life = AppLifecycle(defaultSuspendAfter: .seconds(5))
        _ = life.hello("lock", session: 1, rules: lock, at: .zero)
        _ = life.set("lock", to: .background, rules: lock, hasSessions: true, at: .zero)
        _ = life.disposition(of: .work, app: "lock", session: 1, rules: lock, at: .seconds(1))
        _ = life.disposition(of: .work, app: "lock", session: 2, rules: lock, at: .seconds(1))
        XCTAssertNil(life.sessionClosed(1, app: "lock", remaining: [2], launchedHere: false, at: .seconds(2)), "session 2 owes its event")
        XCTAssertEqual(life.state(of: "lock", hasSessions: true), .background)
        XCTAssertEqual(life.sessionClosed(2, app: "lock", remaining: [], launchedHere: false, at: .seconds(3)), .seconds(2))
        XCTAssertEqual(life.state(of: "lock", hasSessions: false), .notRunning)
        XCTAssertEqual(life.hello("lock", session: 3, rules: lock, at: .seconds(4)), 0)
        XCTAssertEqual(life.state(of: "lock", hasSessions: true), .foreground, "started again by its user")
    }

    func testALaunchedAppStaysInItsStateUntilItsProcessExits() {
        var life = AppLifecycle(defaultSuspendAfter: .seconds(5))
        life.launched("lock")
        _ = life.hello("lock", session: 1, rules: lock, at: .zero)
        _ = life.sessionClosed(1, app: "lock", remaining: [], launchedHere: true, at: .seconds(1))
        XCTAssertEqual(life.state(of: "lock", hasSessions: false), .background, "its process may make its managers again")
        life.exited("lock")
        XCTAssertEqual(life.state(of: "lock", hasSessions: false), .notRunning)
    }

    func testAnAppWithoutAManifestIsNeverWoken() {
        var life = AppLifecycle(defaultSuspendAfter: .seconds(5))
        _ = life.hello("tool", session: 1, rules: nil, at: .zero)
        XCTAssertEqual(life.state(of: "tool", hasSessions: true), .foreground)
        _ = life.set("tool", to: .background, rules: nil, hasSessions: true, at: .zero)
        XCTAssertEqual(life.disposition(of: .work, app: "tool", session: 1, rules: nil, at: .seconds(1)), .deliver(wake: 0))
        XCTAssertFalse(life.isAwake("tool"))
        XCTAssertEqual(life.disposition(of: .work, app: "", session: 9, rules: nil, at: .seconds(1)), .deliver(wake: 0),
                       "a session that named no app is always in the foreground")
    }
}
