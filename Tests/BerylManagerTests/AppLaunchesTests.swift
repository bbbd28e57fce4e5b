import BerylManager
import Foundation
import XCTest

/// Launching apps for their preserved managers, scripted without processes: the shell's spawns, reaps and exits are
/// inputs with their times, its launches and signals are outputs. Each test names the process test or fault-suite
/// behaviour it stands for.
final class AppLaunchesTests: XCTestCase {
    private typealias Core = ManagerCore<String>
    private let appID = "com.example.doorlock"
    /// managerd started at 100 s; its reconnection grace ends at 103 s.
    private let start = Duration.seconds(100)

    /// A declared, launchable app whose central manager "door" was preserved (read back from its record).
    private func core(launchable: Bool = true) throws -> (Core, PreservedManager) {
        let json = launchable ? #"{"id": "com.example.doorlock", "user": "doorlock", "launch": {"command": ["/usr/bin/doorlock"]}}"#
                              : #"{"id": "com.example.doorlock", "user": "doorlock"}"#
        let manifest = try AppManifestParser.parse(Data(json.utf8), file: "/etc/beryl/apps/doorlock.json",
                                                   lookup: { $0 == "doorlock" ? Account(uid: 1001, gid: 1001) : nil })
        var core = Core(restoreGrace: .seconds(15), startedAt: start)
        core.catalog = AppCatalog([manifest])
        let door = core.restoration.resume(appID: appID, restoreID: "door", role: .central)
        return (core, door)
    }

    /// An event for the absent app is held, and the core is asked to launch it for it.
    private func hold(_ event: String, for manager: PreservedManager, in core: inout Core, at now: Duration) -> [Core.Output] {
        XCTAssertEqual(core.restoration.hold(event, replacing: nil, for: manager.id), appID)
        return core.launchIfWaiting(appID, at: now)
    }

    private func launches(_ outputs: [Core.Output]) -> [AppLaunch] {
        outputs.compactMap { if case .launch(let order) = $0 { order } else { nil } }
    }

    // RestorationTests: an app relaunched for an event gets its restore identifiers as launch options, once.
    func testAnEventForAnAbsentAppLaunchesItOnceNamingItsManagers() throws {
        var (core, door) = try core()
        let now = start + .seconds(5)
        let first = launches(hold("connected", for: door, in: &core, at: now))
        XCTAssertEqual(first.map(\.manifest.id), [appID])
        XCTAssertEqual(first.first?.centrals, ["door"])
        XCTAssertEqual(first.first?.peripherals, [])
        let environment = try XCTUnwrap(first.first).environment(runtimeDir: "/run/beryl")
        XCTAssertEqual(environment["BERYL_LAUNCH_CENTRALS"], "door", "the library reads its launch options from these")
        XCTAssertEqual(environment["BERYL_LAUNCH_PERIPHERALS"], "")
        XCTAssertEqual(environment["BERYL_APP_ID"], appID)
        XCTAssertEqual(environment["BERYL_RUNTIME_DIR"], "/run/beryl")
        XCTAssertNil(environment["LD_PRELOAD"], "nothing of managerd's own environment is passed on")
        XCTAssertEqual(core.launchStarted(appID, pid: 4242, at: now), [.launchesChanged])
        XCTAssertEqual(core.launches.processes[appID], .init(pid: 4242, adopted: false))
        XCTAssertEqual(core.life.state(of: appID, hasSessions: false), .background, "launched for its work, it runs in the background")
        XCTAssertEqual(hold("notified", for: door, in: &core, at: now + .milliseconds(10)), [], "the launch that runs handles it")
        XCTAssertEqual(core.launches.counts[appID], 1)
    }

    // Fault suite, managerd restarted: apps from before it may be reconnecting, so none is launched in the grace.
    func testNoLaunchUntilAppsFromBeforeTheRestartHadTimeToReconnect() throws {
        var (core, door) = try core()
        let early = start + .seconds(1)
        XCTAssertEqual(hold("connected", for: door, in: &core, at: early),
                       [.launchDeferred(appID: appID, until: start + .seconds(3), failure: nil)])
        XCTAssertEqual(core.launches.nextDeadline, start + .seconds(3))
        XCTAssertEqual(hold("notified", for: door, in: &core, at: early), [], "put off once, weighed again when due")
        XCTAssertEqual(core.launchesDue(at: start + .seconds(2)), [])
        XCTAssertEqual(launches(core.launchesDue(at: start + .seconds(3))).map(\.centrals), [["door"]])
        XCTAssertNil(core.launches.nextDeadline)
    }

    // Fault suite, app crash loop: each exit with work still waiting doubles the wait, and says why.
    func testACrashLoopIsLaunchedAgainWithDoublingBackoff() throws {
        var (core, door) = try core()
        var now = start + .seconds(10)
        _ = hold("connected", for: door, in: &core, at: now)
        var waits: [Duration] = []
        for round in 0..<3 {
            _ = core.launchStarted(appID, pid: 5000 + Int32(round), at: now)
            now += .milliseconds(200)
            let outputs = core.launchEnded(appID, exit: "signal 11", at: now)
            guard case .launchDeferred(_, let until, let failure)? = outputs.first else { return XCTFail("no relaunch after exit \(round): \(outputs)") }
            XCTAssertEqual(failure, .exitedWithoutRestoring(exit: "signal 11", restoreIDs: ["door"]))
            XCTAssertEqual(outputs.last, .launchesChanged, "the launched-apps record loses the process")
            waits.append(until - now)
            XCTAssertEqual(core.launchesDue(at: until - .milliseconds(1)), [])
            now = until
            XCTAssertEqual(launches(core.launchesDue(at: now)).count, 1)
        }
        XCTAssertEqual(waits, [.seconds(1), .seconds(2), .seconds(4)])
        XCTAssertEqual(core.launches.relaunch.tally(of: appID).backedOff, 3)
    }

    // RestorationTests' stubborn app: a launch that runs but never restores is ended after the grace, and its
    // zombie holds the launch until it is reaped, so the backoff is not skipped.
    func testALaunchThatDoesNotRestoreIsEndedAndItsExitBacksOff() throws {
        var (core, door) = try core()
        var now = start + .seconds(10)
        _ = hold("connected", for: door, in: &core, at: now)
        _ = core.launchStarted(appID, pid: 6000, at: now)
        XCTAssertEqual(core.launchRunning(appID, at: now + .seconds(15)), [], "within the grace")
        now += .seconds(16)
        XCTAssertEqual(core.launchRunning(appID, at: now),
                       [.terminate(appID: appID, pid: 6000, failure: .didNotRestore(restoreIDs: ["door"], within: .seconds(15)))])
        XCTAssertEqual(hold("notified", for: door, in: &core, at: now), [], "ended but not reaped: still the app's launch")
        let exit = core.launchEnded(appID, exit: "signal 15", at: now + .milliseconds(250))
        XCTAssertEqual(exit.first, .launchDeferred(appID: appID, until: now + .milliseconds(250) + .seconds(1),
                                                  failure: .didNotRestore(restoreIDs: ["door"], within: .seconds(15))))
        let tally = core.launches.relaunch.tally(of: appID)
        XCTAssertEqual(tally, .init(endedUnrestored: 1, backedOff: 1, launchedBeforeReaped: 0))
    }

    // The same on the core's clock, as managerd runs it: the grace's end is a deadline, and the tick after it ends the
    // launch (managerd looked every 250 ms before); a launch that restored leaves no deadline behind.
    func testTheRestoreGraceEndsOnTheCoresClock() throws {
        var (core, door) = try core()
        let now = start + .seconds(10)
        _ = hold("connected", for: door, in: &core, at: now)
        _ = core.launchStarted(appID, pid: 6000, at: now)
        XCTAssertEqual(core.nextDeadline, now + .seconds(15))
        XCTAssertEqual(core.tick(at: now + .seconds(15)), [], "not before the grace is over")
        XCTAssertEqual(core.tick(at: now + .seconds(15) + .milliseconds(1)),
                       [.terminate(appID: appID, pid: 6000, failure: .didNotRestore(restoreIDs: ["door"], within: .seconds(15)))])
        XCTAssertNil(core.nextDeadline, "ended once: the exit, when it comes, puts the next launch off")
        XCTAssertEqual(core.tick(at: now + .seconds(30)), [])

        var (restoring, preserved) = try self.core()
        _ = hold("connected", for: preserved, in: &restoring, at: now)
        _ = restoring.launchStarted(appID, pid: 7000, at: now)
        restoring.sessions[9, default: .init()].appID = appID
        XCTAssertNotNil(restoring.restore(preserved.id, into: 9, name: { _ in "" }))
        XCTAssertNil(restoring.nextDeadline, "restored: no grace to keep")
    }

    // An app whose manager came back live is not launched; one that ends with nothing waiting is simply gone.
    func testAnAppThatRestoredIsNotLaunchedAndItsEndLeavesItNotRunning() throws {
        var (core, door) = try core()
        let now = start + .seconds(10)
        _ = hold("connected", for: door, in: &core, at: now)
        _ = core.launchStarted(appID, pid: 7000, at: now)
        core.sessions[9, default: .init()].appID = appID
        XCTAssertNotNil(core.restore(door.id, into: 9, name: { _ in "" }))
        XCTAssertEqual(core.launchRunning(appID, at: now + .seconds(60)), [], "nothing waits: never overdue")
        XCTAssertEqual(core.launchEnded(appID, exit: "exit 0", at: now + .seconds(61)), [.launchesChanged])
        XCTAssertNil(core.launches.nextDeadline)
        XCTAssertEqual(core.life.state(of: appID, hasSessions: true), .background, "its session lives on")
    }

    func testALaunchThatCannotStartIsTriedAgainAfterTheBackoff() throws {
        var (core, door) = try core()
        let now = start + .seconds(10)
        _ = hold("connected", for: door, in: &core, at: now)
        XCTAssertEqual(core.launchFailed(appID, reason: "No such file or directory", at: now),
                       [.launchDeferred(appID: appID, until: now + .seconds(1), failure: .couldNotStart(reason: "No such file or directory"))])
        XCTAssertEqual(core.launches.counts[appID], 1)
        XCTAssertNil(core.launches.processes[appID])
        XCTAssertEqual(launches(core.launchesDue(at: now + .seconds(1))).count, 1)
    }

    func testAnAppWithoutALaunchCommandIsNeverLaunched() throws {
        var (core, door) = try core(launchable: false)
        XCTAssertEqual(hold("connected", for: door, in: &core, at: start + .seconds(10)), [])
        XCTAssertEqual(core.launchAsked(appID), .failure(.noLaunchCommand(appID: appID)))
        XCTAssertEqual(core.launchAsked("com.example.unknown"), .failure(.noLaunchCommand(appID: "com.example.unknown")))
    }

    // A managerd that crashed left its launch running: the next one adopts it, and it holds the launch until gone.
    func testAnAdoptedLaunchHoldsTheAppUntilItIsSeenGone() throws {
        var (core, door) = try core()
        core.adoptLaunch(appID, pid: 8000)
        core.adoptLaunch("com.example.undeclared", pid: 8001)
        XCTAssertEqual(core.launches.processes, [appID: .init(pid: 8000, adopted: true)], "only declared apps are adopted")
        let now = start + .seconds(10)
        XCTAssertEqual(hold("connected", for: door, in: &core, at: now), [])
        _ = core.launchEnded(appID, exit: "exited", at: now + .milliseconds(250))
        let relaunch = core.launchesDue(at: now + .milliseconds(250) + .seconds(1))
        XCTAssertEqual(launches(relaunch).map(\.centrals), [["door"]])
    }

    // `beryl app launch` twice: the second is refused while the first launch runs (or waits to be reaped), so no
    // process is left unwatched; once reaped, the app may be launched again.
    func testALaunchThatStillRunsIsNotLaunchedASecondTime() throws {
        var (core, _) = try core()
        guard case .success = core.launchAsked(appID) else { return XCTFail("the first launch is taken") }
        _ = core.launchStarted(appID, pid: 9100, at: start)
        XCTAssertEqual(core.launchAsked(appID), .failure(.alreadyRunning(appID: appID, pid: 9100)))
        _ = core.launchEnded(appID, exit: "exit 0", at: start + .seconds(1))
        guard case .success = core.launchAsked(appID) else { return XCTFail("launched again once the first was reaped") }
    }

    // `beryl down`: the launched apps are ended and none is launched again, whatever waits.
    func testStoppingEndsTheLaunchesAndLaunchesNoMore() throws {
        var (core, door) = try core()
        let now = start + .seconds(10)
        _ = hold("connected", for: door, in: &core, at: now)
        _ = core.launchStarted(appID, pid: 9000, at: now)
        XCTAssertEqual(core.stopLaunching(), [9000])
        XCTAssertEqual(core.launchEnded(appID, exit: "signal 15", at: now + .seconds(1)), [.launchesChanged], "no launch is put off")
        XCTAssertEqual(hold("notified", for: door, in: &core, at: now + .seconds(30)), [], "past any backoff, still no launch")
        XCTAssertEqual(core.launchAsked(appID), .failure(.stopping))
        XCTAssertNil(core.launches.nextDeadline)
    }
}
