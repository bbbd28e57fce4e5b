import Beryl
import BerylDaemonKit
import BerylIPC
import BerylWire
import BerylSupervisor
import BerylTestSupport
import Dispatch
import Foundation
import XCTest

/// Apps launched from manifests, in the background: a bluetooth-central app's scan goes on slow and coalesced and its
/// discoveries reach it at once; a manifest's alert command runs for a suspended app's notifyOn* events; a relaunch
/// that never re-creates its managers is ended and launched again until one does.
final class BackgroundTests: TwoStacksTestCase {
    var appsDir: String { scratch.root + "/apps" }
    var standInMarker: String { scratch.root + "/stand-in" }
    var peerFile: String { scratch.root + "/peer" }

    override var managerdArguments: [[String]] { [["--apps-dir", appsDir, "--suspend-after", "60", "--restore-grace", "2"], []] }

    private func writeManifest(_ name: String, _ manifest: [String: Any]) throws {
        var manifest = manifest
        manifest["user"] = RestorationTests.appUser
        try JSONSerialization.data(withJSONObject: manifest).write(to: URL(fileURLWithPath: "\(appsDir)/\(name).json"))
        chmod("\(appsDir)/\(name).json", 0o644)
    }

    override func prepare() throws {
        try FileManager.default.createDirectory(atPath: appsDir, withIntermediateDirectories: true)
        let run0 = scratch.root + "/run0"
        let beryl = Executables.path("beryl")
        // `beryl scan` asks for every advertisement; launched, it is this app and has its background rules.
        try writeManifest("scanner", [
            "id": "com.example.scanner", "backgroundModes": ["bluetooth-central"], "wakeBudgetSeconds": 300,
            "launch": ["command": [beryl, "scan", "--service", "180D", "--duplicates", "--timeout", "300", "--json", "--runtime-dir", run0]],
        ])
        // A foreground-only app holding a link, with an alert command that says what it was told and as whom it ran.
        try writeManifest("watch", [
            "id": "com.example.watch",
            "launch": ["command": ["/bin/sh", "-c", "exec \"$0\" connect --peer \"$(cat \"$1\")\" --notify-on connection --notify-on disconnection --timeout 60 --json --runtime-dir \"$2\"",
                                   beryl, peerFile, run0]],
            "alertCommand": ["/bin/sh", "-c", "echo \"alert $BERYL_ALERT for $BERYL_APP_ID as $(id -un): $1\"", "alert"],
        ])
        // The door-lock app, except that while the marker exists it is a stand-in that never makes its managers.
        try writeManifest("stubborn", [
            "id": "com.example.stubborn", "backgroundModes": ["bluetooth-central"],
            "launch": ["command": ["/bin/sh", "-c", "if [ -e \"$0\" ]; then echo '{\"event\":\"standingIn\"}'; exec sleep 600; fi; exec \"$1\" --service 180D --characteristic 2A37",
                                   standInMarker, Executables.path("doorlock")]],
        ])
    }

    override func setUpWithError() throws {
        try super.setUpWithError()
        for directory in [scratch.root, scratch.root + "/run0", scratch.root + "/run0/logs"] { chmod(directory, 0o755) }
    }

    override func tearDown() {
        for app in ["com.example.scanner", "com.example.watch", "com.example.stubborn"] { _ = try? beryl(["app", "quit", app]) }
        super.tearDown()
    }

    private func app(_ id: String) throws -> [String: Any] { try managedApp(id) }

    private func log(_ name: String) -> String { (try? String(contentsOfFile: "\(scratch.root)/run0/logs/\(name).log", encoding: .utf8)) ?? "" }

    /// The JSON-line events an app's log holds (every app here runs with `--json`), after the first `skipping`.
    private func events(_ name: String, skipping: Int = 0) -> [[String: Any]] {
        Array(JSONLines.events(inFile: "\(scratch.root)/run0/logs/\(name).log").dropFirst(skipping))
    }

    private func heard(_ event: String, in name: String, skipping: Int = 0) -> Bool {
        events(name, skipping: skipping).contains { $0["event"] as? String == event }
    }

    private func advertiseHeartRate() throws -> (HeartRatePeripheral, PeripheralManager) {
        let app = HeartRatePeripheral()
        let manager = PeripheralManager(delegate: app, queue: DispatchQueue(label: "peripheral"), appID: "com.test.sensor", socketPath: socket(1))
        XCTAssertNotNil(app.recorder.wait(for: "state poweredOn"))
        manager.startAdvertising(AdvertisingOptions(localName: "Pulse", serviceUUIDs: [BluetoothUUID(0x180D)]))
        XCTAssertNotNil(app.recorder.wait(for: "advertising ok"))
        return (app, manager)
    }

    private func discoveries() -> Int {
        events("app-com.example.scanner").filter { $0["identifier"] is String }.count
    }

    func testABackgroundCentralScansSlowlyWithDuplicatesCoalescedAndHearsAtOnce() throws {
        XCTAssertEqual(try beryl(["app", "launch", "com.example.scanner"]).status, 0)
        XCTAssertEqual(try app("com.example.scanner")["state"] as? String, "background", "a launched app starts in the background")
        XCTAssertTrue(eventually { (try? self.simController(0)["scanning"] as? Bool) == true }, "its scan is on the air in the background")
        // Core Bluetooth's background scan: a long interval, and no duplicates even though the app asked for them.
        let slow = try simController(0)
        XCTAssertEqual(slow["scanIntervalUs"] as? Int, 1_280_000, "\(slow)")
        XCTAssertEqual(slow["scanWindowUs"] as? Int, 30_000, "\(slow)")

        let (_, manager) = try advertiseHeartRate()
        // Delivered at once, not held: the background app is woken by its discovery.
        XCTAssertTrue(eventually(.seconds(20)) { self.discoveries() >= 1 }, log("app-com.example.scanner"))
        usleep(3_000_000)  // a 100 ms advertiser heard for seconds more, in several 30 ms windows
        XCTAssertEqual(discoveries(), 1, "one discovery per peripheral in the background: \(log("app-com.example.scanner"))")
        XCTAssertEqual(try app("com.example.scanner")["queuedEvents"] as? Int, 0, "nothing held for a background central")

        // In the foreground it gets the duplicates it asked for, at the foreground interval.
        XCTAssertEqual(try beryl(["app", "state", "com.example.scanner", "foreground"]).status, 0)
        XCTAssertTrue(eventually(.seconds(10)) { self.discoveries() >= 4 }, log("app-com.example.scanner"))
        let fast = try simController(0)
        XCTAssertLessThan(try XCTUnwrap(fast["scanIntervalUs"] as? Int), 1_280_000, "\(fast)")

        // Back in the background: slow again, and coalesced again (it has heard this peripheral).
        XCTAssertEqual(try beryl(["app", "state", "com.example.scanner", "background"]).status, 0)
        XCTAssertTrue(eventually { (try? self.simController(0)["scanIntervalUs"] as? Int) == 1_280_000 })
        usleep(500_000)
        let settled = discoveries()
        usleep(3_000_000)
        XCTAssertEqual(discoveries(), settled, "no duplicates in the background: \(log("app-com.example.scanner"))")
        withExtendedLifetime(manager) {}
    }

    func testTheManifestsAlertCommandRunsForASuspendedAppAsItsUser() throws {
        let (_, manager) = try advertiseHeartRate()
        let status = try beryl(["status", "--json"], side: 1)
        let object = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(status.out.utf8)) as? [String: Any], status.err)
        let address = try XCTUnwrap((object["controller"] as? [String: Any])?["address"] as? String)
        try Data(address.utf8).write(to: URL(fileURLWithPath: peerFile))
        chmod(peerFile, 0o644)

        XCTAssertEqual(try beryl(["app", "launch", "com.example.watch"]).status, 0)
        XCTAssertTrue(eventually(.seconds(20)) { self.heard("connected", in: "app-com.example.watch") }, log("app-com.example.watch"))
        XCTAssertEqual(try beryl(["app", "state", "com.example.watch", "suspended"]).status, 0)
        XCTAssertEqual(try runTool("beryl", ["sim", "range", "1", "out", "--dir", scratch.root + "/sim"]).status, 0)

        let expected = "alert disconnection for com.example.watch as \(RestorationTests.appUser): com.example.watch: disconnection of"
        XCTAssertTrue(eventually(.seconds(15)) { self.log("alerts-com.example.watch").contains(expected) },
                      "alert command output: \(log("alerts-com.example.watch"))")
        XCTAssertFalse(log("alerts-com.example.watch").contains("alert connection"), "the connection came while it was running")
        XCTAssertFalse(heard("disconnected", in: "app-com.example.watch"), "held while suspended")
        withExtendedLifetime(manager) {}
    }

    var heartRateProfile: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Examples/profiles/heart-rate.json").path
    }

    /// The other stack serves heart rate; the door-lock app (as com.example.stubborn) is launched and takes its notifications.
    private func launchStubbornSubscribedToAHeartRateMonitor() throws {
        try scratch.start("serve", [Executables.path("beryl"), "serve", heartRateProfile, "--runtime-dir", "\(scratch.root)/run1"],
                          socket: "\(scratch.root)/run1/managerd.sock")
        XCTAssertEqual(try beryl(["app", "launch", "com.example.stubborn"]).status, 0)
        XCTAssertTrue(eventually(.seconds(30)) { Self.notified(self.events("app-com.example.stubborn")) }, log("app-com.example.stubborn"))
    }

    /// A notification's value reached the app (not a read's refusal, which didUpdateValueFor also reports).
    private static func notified(_ events: [[String: Any]]) -> Bool {
        events.contains { $0["event"] as? String == "didUpdateValueFor" && ($0["error"] as? String ?? "").isEmpty }
    }

    func testARelaunchThatNeverRestoresIsEndedAndLaunchedAgain() throws {
        try launchStubbornSubscribedToAHeartRateMonitor()

        // From now on a launch is the stand-in. The app dies; the next notification relaunches it.
        _ = FileManager.default.createFile(atPath: standInMarker, contents: nil)
        let pids = try XCTUnwrap(try app("com.example.stubborn")["pids"] as? [Int])
        for pid in pids { kill(Int32(pid), SIGKILL) }
        var failed: [String: Any]?
        XCTAssertTrue(eventually(.seconds(20)) {
            failed = try? self.app("com.example.stubborn")
            return failed?["lastLaunchFailure"] as? String == "didNotRestore"
        }, "the reason travels typed: \(String(describing: failed))")
        XCTAssertEqual(failed?["lastLaunchUnrestored"] as? [String], ["doorlock-central"], "and what was not restored: \(String(describing: failed))")
        let managerdLog = (try? String(contentsOfFile: scratch.paths.logFile("managerd0"), encoding: .utf8)) ?? ""
        // Each stand-in ended is reaped before the next launch, which waits out the backoff: none is launched over one
        // not yet reaped (that skipped the backoff, cleared the error, and left a zombie).
        let relaunches = try XCTUnwrap(try app("com.example.stubborn")["relaunches"] as? [String: Int])
        let ended = try XCTUnwrap(relaunches["endedUnrestored"]), backedOff = try XCTUnwrap(relaunches["backedOff"])
        XCTAssertGreaterThanOrEqual(ended, 1, "the stand-in was ended for not restoring")
        XCTAssertEqual(relaunches["launchedBeforeReaped"], 0, "\(relaunches)\n\(managerdLog)")
        XCTAssertLessThanOrEqual(ended, backedOff + 1, "\(relaunches)\n\(managerdLog)")
        XCTAssertEqual(try app("com.example.stubborn")["preservedCentrals"] as? [String], ["doorlock-central"], "its work is still kept")

        // Launched again (with backoff) until a launch restores: the real app comes back and resumes.
        let standIns = events("app-com.example.stubborn").filter { $0["event"] as? String == "standingIn" }.count
        XCTAssertGreaterThanOrEqual(standIns, 1)
        try FileManager.default.removeItem(atPath: standInMarker)
        XCTAssertTrue(eventually(.seconds(30)) { self.heard("willRestoreState", in: "app-com.example.stubborn") },
                      log("app-com.example.stubborn"))
        XCTAssertTrue(eventually { ((try? self.app("com.example.stubborn")["pids"] as? [Int]) ?? []).count == 1 })
    }

    /// managerd dies under a running app: attd keeps the app's data channel, and the restarted managerd adopts it with
    /// the app's link and subscription (docs/architecture.md, "managerd's restart"), so the app hears no reset; as a
    /// background app its values come through managerd, and flow again once it is back. No second copy is launched.
    func testARunningAppRidesOutAManagerdRestart() throws {
        try launchStubbornSubscribedToAHeartRateMonitor()
        let pids = try XCTUnwrap(try app("com.example.stubborn")["pids"] as? [Int])
        XCTAssertEqual(pids.count, 1)

        let beforeKill = events("app-com.example.stubborn").count
        kill(try XCTUnwrap(scratch.pid(of: "managerd0")), SIGKILL)
        try scratch.start("managerd0", [Executables.path("managerd"), "--runtime-dir", scratch.root + "/run0", "--state-dir", scratch.root + "/state0"]
                          + managerdArguments[0], socket: socket(0))
        let attd = try IPCClient(path: scratch.root + "/run0/attd.sock")
        XCTAssertTrue(eventually(.seconds(15)) { (try? attd.call(.with { $0.getStatus = .init() }).status.dataPlane.adoptedChannels) == 1 },
                      log("app-com.example.stubborn"))
        let adopted = events("app-com.example.stubborn").count
        XCTAssertTrue(eventually(.seconds(15)) { Self.notified(self.events("app-com.example.stubborn", skipping: adopted)) },
                      "values flow again through the new managerd: \(log("app-com.example.stubborn"))")
        let states = events("app-com.example.stubborn", skipping: beforeKill).filter { $0["event"] as? String == "centralManagerDidUpdateState" }
        XCTAssertEqual(states.count, 0, "the app heard no reset: \(states)")
        XCTAssertEqual(try app("com.example.stubborn")["pids"] as? [Int], pids, "the same process, reconnected")
        usleep(3_500_000)  // past managerd's wait for reconnecting apps
        XCTAssertEqual(try app("com.example.stubborn")["pids"] as? [Int], pids, "no second copy was launched")
        XCTAssertFalse(heard("willRestoreState", in: "app-com.example.stubborn"), "nothing to restore: the app never stopped")
    }
}
