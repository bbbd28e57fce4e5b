import BerylManager
import XCTest

/// The relaunch rules on virtual time: each case is one that managerd's process tests found (BackgroundTests'
/// stubborn stand-in, RestorationTests' relaunch after a managerd restart), scripted here as inputs and times.
final class RelaunchPolicyTests: XCTestCase {
    private let app = "com.example.doorlock-central"
    private func policy() -> RelaunchPolicy { RelaunchPolicy(restoreGrace: .seconds(15), startedAt: .seconds(100)) }

    /// Apps that ran under the managerd before a restart may be reconnecting: none is launched a second copy.
    func testNoLaunchWhileAppsFromBeforeARestartMayReconnect() {
        let relaunch = policy()
        XCTAssertEqual(relaunch.verdict(for: app, at: .seconds(101)), .notBefore(.seconds(103)))
        XCTAssertEqual(relaunch.verdict(for: app, at: .seconds(103)), .launch)
    }

    func testACrashLoopBacksOffDoublingAndSaysWhy() {
        var relaunch = policy()
        var now = Duration.seconds(200)
        var delays: [Duration] = []
        for _ in 0..<4 {
            XCTAssertEqual(relaunch.verdict(for: app, at: now), .launch)
            relaunch.launched(app, at: now)
            XCTAssertNil(relaunch.failure(of: app), "a launch clears the last failure")
            now += .milliseconds(100)
            let delay = try! XCTUnwrap(relaunch.exited(app, exit: "signal 6", waiting: ["doorlock-central"], at: now))
            XCTAssertEqual(relaunch.verdict(for: app, at: now + delay - .milliseconds(1)), .notBefore(now + delay))
            delays.append(delay)
            now += delay
        }
        XCTAssertEqual(delays, [.seconds(1), .seconds(2), .seconds(4), .seconds(8)])
        XCTAssertEqual(relaunch.failure(of: app), .exitedWithoutRestoring(exit: "signal 6", restoreIDs: ["doorlock-central"]))
    }

    /// A stand-in that runs but never restores is ended after the grace; its exit keeps the reason it was ended for
    /// and doubles the backoff as a crash would (it once cleared the error and skipped the backoff).
    func testAStandInThatDoesNotRestoreIsEndedAndBacksOff() {
        var relaunch = policy()
        relaunch.launched(app, at: .seconds(200))
        XCTAssertFalse(relaunch.overdue(app, waiting: ["doorlock-central"], at: .seconds(214)))
        XCTAssertFalse(relaunch.overdue(app, waiting: [], at: .seconds(300)), "nothing waits: nothing is overdue")
        XCTAssertTrue(relaunch.overdue(app, waiting: ["doorlock-central"], at: .seconds(216)))
        XCTAssertFalse(relaunch.overdue(app, waiting: ["doorlock-central"], at: .seconds(217)), "ended once")
        XCTAssertEqual(relaunch.exited(app, exit: "signal 15", waiting: ["doorlock-central"], at: .seconds(217)), .seconds(1))
        XCTAssertEqual(relaunch.failure(of: app), .didNotRestore(restoreIDs: ["doorlock-central"], within: .seconds(15)))
        relaunch.launched(app, at: .seconds(218))
        XCTAssertTrue(relaunch.overdue(app, waiting: ["doorlock-central"], at: .seconds(234)))
        XCTAssertEqual(relaunch.exited(app, exit: "signal 15", waiting: ["doorlock-central"], at: .seconds(234)), .seconds(2),
                       "a stand-in's 16 s of uptime is not a stable run")
        XCTAssertEqual(relaunch.tally(of: app), .init(endedUnrestored: 2, backedOff: 2), "each launch ended was followed by one put off")
    }

    /// The bug the tally exists for: a stand-in ended for not restoring was launched over before its exit was reaped,
    /// skipping the backoff and leaving a zombie.
    func testALaunchOverAnEndedStandInNotYetReapedIsCounted() {
        var relaunch = policy()
        relaunch.launched(app, at: .seconds(200))
        XCTAssertTrue(relaunch.overdue(app, waiting: ["doorlock-central"], at: .seconds(216)))
        relaunch.launched(app, at: .seconds(216))
        XCTAssertEqual(relaunch.tally(of: app), .init(endedUnrestored: 1, backedOff: 0, launchedBeforeReaped: 1))
    }

    func testARunThatLastedOrLeftNothingWaitingStartsTheBackoffOver() {
        var relaunch = policy()
        relaunch.launched(app, at: .seconds(200))
        XCTAssertEqual(relaunch.exited(app, exit: "exit 1", waiting: ["a"], at: .seconds(200)), .seconds(1))
        relaunch.launched(app, at: .seconds(201))
        XCTAssertEqual(relaunch.exited(app, exit: "exit 1", waiting: ["a"], at: .seconds(201)), .seconds(2))
        relaunch.launched(app, at: .seconds(203))
        XCTAssertEqual(relaunch.exited(app, exit: "exit 1", waiting: ["a"], at: .seconds(240)), .seconds(1), "37 s up: stable")
        relaunch.launched(app, at: .seconds(241))
        XCTAssertEqual(relaunch.exited(app, exit: "exit 1", waiting: ["a"], at: .seconds(241)), .seconds(2))
        relaunch.launched(app, at: .seconds(243))
        XCTAssertNil(relaunch.exited(app, exit: "exit 0", waiting: [], at: .seconds(244)), "nothing waits: no relaunch")
        relaunch.launched(app, at: .seconds(250))
        XCTAssertEqual(relaunch.exited(app, exit: "exit 1", waiting: ["a"], at: .seconds(250)), .seconds(1))
    }

    func testALaunchThatCannotStartBacksOffToo() {
        var relaunch = policy()
        XCTAssertEqual(relaunch.launchFailed(app, reason: "no such file", at: .seconds(200)), .seconds(1))
        XCTAssertEqual(relaunch.verdict(for: app, at: .milliseconds(200_500)), .notBefore(.milliseconds(201_000)))
        XCTAssertEqual(relaunch.verdict(for: app, at: .seconds(201)), .launch)
        XCTAssertEqual(relaunch.failure(of: app), .couldNotStart(reason: "no such file"))
        XCTAssertEqual(relaunch.launchFailed(app, reason: "no such file", at: .seconds(201)), .seconds(2))
        XCTAssertEqual(relaunch.tally(of: app), .init(), "a start that failed is neither ended nor an exit")
    }
}
