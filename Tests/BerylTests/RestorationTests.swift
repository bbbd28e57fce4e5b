import Beryl
import BerylCore
import BerylDaemonKit
import BerylManager
import BerylManagerWire
import BerylStore
import BerylSupervisor
import BerylTestSupport
import BerylWire
import Foundation
import XCTest

/// App manifests, `beryl app`, and the restoration chapter's door lock: managerd keeps the app's connection to the
/// lock while the app is not running and relaunches it (from its manifest, as the manifest's user) when there is
/// something to handle.
final class RestorationTests: TwoStacksTestCase {
    var appsDir: String { scratch.root + "/apps" }
    var doorlockLog: String { scratch.root + "/doorlock.log" }
    var sleepyLog: String { scratch.root + "/sleepy.log" }
    var readerLog: String { scratch.root + "/reader.log" }
    static let lockProfile = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Examples/profiles/secure-lock.json").path
    static let appID = "com.example.doorlock"

    /// Apps never run as root: as root, the tests launch them as nobody; otherwise as the user running the tests.
    static var appUser: String { Spawn.unprivilegedUser }

    override var managerdArguments: [[String]] { [["--apps-dir", appsDir], []] }

    override func prepare() throws {
        try FileManager.default.createDirectory(atPath: appsDir, withIntermediateDirectories: true)
        let thermostat: [String: Any] = [
            "id": "com.example.thermostat", "user": Self.appUser, "backgroundModes": ["bluetooth-peripheral"],
            "launch": ["command": [Executables.path("thermostat"), "--restore", "--json"]],
        ]
        try JSONSerialization.data(withJSONObject: thermostat).write(to: URL(fileURLWithPath: appsDir + "/thermostat.json"))
        chmod(appsDir + "/thermostat.json", 0o644)
        // The thermostat under another id, with a 2 s wake budget.
        let brief: [String: Any] = [
            "id": "com.example.brief-thermostat", "user": Self.appUser, "backgroundModes": ["bluetooth-peripheral"], "wakeBudgetSeconds": 2,
            "launch": ["command": [Executables.path("thermostat"), "--restore", "--json"]],
        ]
        try JSONSerialization.data(withJSONObject: brief).write(to: URL(fileURLWithPath: appsDir + "/brief-thermostat.json"))
        chmod(appsDir + "/brief-thermostat.json", 0o644)
        // The door lock under another id, with a 1 s wake budget, whose connections take 5 s to handle.
        let sleepy: [String: Any] = [
            "id": "com.example.sleepy", "user": Self.appUser, "backgroundModes": ["bluetooth-central"], "wakeBudgetSeconds": 1,
            "launch": ["command": [Executables.path("doorlock"), "--service", "D00D0001-0000-1000-8000-00805F9B34FB",
                                   "--characteristic", "D00D0004-0000-1000-8000-00805F9B34FB", "--log", sleepyLog, "--busy-seconds", "5"]],
        ]
        try JSONSerialization.data(withJSONObject: sleepy).write(to: URL(fileURLWithPath: appsDir + "/sleepy.json"))
        chmod(appsDir + "/sleepy.json", 0o644)
        // The door lock under another id, reading the lock's state 40 times once it has it.
        let reader: [String: Any] = [
            "id": "com.example.reader", "user": Self.appUser, "backgroundModes": ["bluetooth-central"],
            "launch": ["command": [Executables.path("doorlock"), "--service", "D00D0001-0000-1000-8000-00805F9B34FB",
                                   "--characteristic", "D00D0004-0000-1000-8000-00805F9B34FB", "--log", readerLog, "--reads", "40"]],
        ]
        try JSONSerialization.data(withJSONObject: reader).write(to: URL(fileURLWithPath: appsDir + "/reader.json"))
        chmod(appsDir + "/reader.json", 0o644)
        for log in [doorlockLog, sleepyLog, readerLog] {
            _ = FileManager.default.createFile(atPath: log, contents: nil)
            chmod(log, 0o666)  // the app appends to it as its manifest's user
        }
        let manifest: [String: Any] = [
            "id": Self.appID, "user": Self.appUser, "backgroundModes": ["bluetooth-central"],
            "launch": ["command": [Executables.path("doorlock"), "--service", "D00D0001-0000-1000-8000-00805F9B34FB",
                                   "--characteristic", "D00D0004-0000-1000-8000-00805F9B34FB", "--log", doorlockLog]],
        ]
        try JSONSerialization.data(withJSONObject: manifest).write(to: URL(fileURLWithPath: appsDir + "/doorlock.json"))
        try Data("{\"id\": \"com.example.rooted\", \"user\": \"root\"}".utf8).write(to: URL(fileURLWithPath: appsDir + "/rooted.json"))
        try Data("{\"id\": \"com.example.broken\", \"user\": ".utf8).write(to: URL(fileURLWithPath: appsDir + "/broken.json"))
        for file in ["doorlock.json", "rooted.json", "broken.json"] { chmod(appsDir + "/" + file, 0o644) }
    }

    override func setUpWithError() throws {
        try super.setUpWithError()
        // The app's user must reach the runtime directory's sockets.
        for directory in [scratch.root, scratch.root + "/run0", scratch.root + "/run0/logs"] { chmod(directory, 0o755) }
    }

    override func tearDown() {
        _ = try? beryl(["app", "quit", Self.appID])
        super.tearDown()
    }

    private func app(_ id: String = RestorationTests.appID) throws -> [String: Any] { try managedApp(id) }

    private func log(of id: String) -> String { (try? String(contentsOfFile: "\(scratch.root)/run0/logs/app-\(id).log", encoding: .utf8)) ?? "" }

    /// What a thermostat (run with --json) reported, over all its launches.
    private func reports(of id: String) -> [[String: Any]] { events(in: "\(scratch.root)/run0/logs/app-\(id).log") }

    private func count(_ event: String, of id: String, where match: ([String: Any]) -> Bool = { _ in true }) -> Int {
        reports(of: id).filter { $0["event"] as? String == event && match($0) }.count
    }

    /// Times the app's own advertising started.
    private func advertised(_ id: String) -> Int { count("advertising", of: id) { $0["error"] is NSNull } }

    private func relaunches(of id: String) -> Int { count("relaunched", of: id) { $0["restoring"] as? [String] == ["thermostat"] } }

    private func resets(of id: String) -> Int { count("state", of: id) { $0["state"] as? String == "resetting" } }

    private func applied(_ tenths: Int, by id: String) -> Bool { count("setpointWritten", of: id) { $0["tenths"] as? Int == tenths } > 0 }

    /// What it reported since the stack last relaunched it, that relaunch first; empty before any.
    private func sinceRelaunch(of id: String) -> [[String: Any]] {
        let all = reports(of: id)
        guard let last = all.lastIndex(where: { $0["event"] as? String == "relaunched" }) else { return [] }
        return Array(all[last...])
    }

    /// A central that opted into restoration reads again and again: what managerd preserves for it does not change, so
    /// nothing in the state directory is written (every GATT operation rewrote and fsynced the whole record once).
    func testARestorableCentralsReadsWriteNothingToTheStateDirectory() throws {
        let profile = Self.lockProfile.replacingOccurrences(of: "secure-lock.json", with: "lock.json")
        try scratch.start("serve", [Executables.path("beryl"), "serve", profile, "--runtime-dir", "\(scratch.root)/run1"],
                          socket: "\(scratch.root)/run1/managerd.sock")
        defer { _ = try? beryl(["app", "quit", "com.example.reader"]) }
        XCTAssertEqual(try beryl(["app", "launch", "com.example.reader"]).status, 0)
        let events = { self.names(self.events(in: self.readerLog)) }
        XCTAssertTrue(eventually(.seconds(20)) { events().contains("didUpdateValueFor") && events().contains("didUpdateNotificationStateFor") },
                      "\(events())")
        XCTAssertEqual(try app("com.example.reader")["preservedCentrals"] as? [String], ["doorlock-central"])
        let before = try stateFiles()
        XCTAssertFalse(before.isEmpty, "the preserved manager is on disk")
        XCTAssertTrue(eventually(.seconds(30)) { events().contains("readsDone") }, "\(events())")
        XCTAssertEqual(events().filter { $0 == "didUpdateValueFor" }.count, 41, "\(events())")
        XCTAssertEqual(try stateFiles(), before, "40 reads wrote to the state directory")
    }

    /// Every file under managerd's state directory with its size and modification time.
    private func stateFiles() throws -> [String: String] {
        let root = scratch.root + "/state0"
        var files: [String: String] = [:]
        let enumerator = try XCTUnwrap(FileManager.default.enumerator(atPath: root), "no state directory at \(root)")
        for case let path as String in enumerator {
            var status = stat()
            guard stat(root + "/" + path, &status) == 0, status.st_mode & S_IFMT == S_IFREG else { continue }
            files[path] = "\(status.st_size) bytes, modified \(status.st_mtim.tv_sec).\(status.st_mtim.tv_nsec)"
        }
        return files
    }

    /// A peripheral app: its service stays published and advertised after kill -9, and a central's read of its
    /// dynamic setpoint relaunches it to answer.
    func testTheThermostatIsRelaunchedToAnswerAReadThenAWrite() throws {
        let thermostat = "com.example.thermostat"
        XCTAssertEqual(try beryl(["app", "launch", thermostat]).status, 0)
        XCTAssertTrue(eventually(.seconds(15)) { self.advertised(thermostat) > 0 }, log(of: thermostat))
        let pids = try XCTUnwrap(try app(thermostat)["pids"] as? [Int])
        for pid in pids { kill(Int32(pid), SIGKILL) }
        XCTAssertTrue(eventually { ((try? self.app(thermostat)["pids"] as? [Int]) ?? [1]).isEmpty })
        XCTAssertEqual(try app(thermostat)["preservedPeripherals"] as? [String], ["thermostat"])
        // Background advertising is slower on the air: 1 s rather than the foreground's 100 ms.
        XCTAssertEqual(try simController(0)["advertisingIntervalUs"] as? Int, 1_000_000)

        // The other stack still finds it advertising, and reads the setpoint: the read relaunches the app.
        let found = try beryl(["scan", "--service", "7E570001-0000-1000-8000-00805F9B34FB", "--count", "1", "--timeout", "30", "--json"], side: 1)  // 1 s background interval
        let heard = try XCTUnwrap(try? JSONSerialization.jsonObject(with: Data(found.out.utf8)) as? [String: Any], found.err)
        let identifier = try XCTUnwrap(heard["identifier"] as? String)
        // Background advertising: no name, the service only in the overflow area (found because the scan names it).
        XCTAssertEqual(heard["name"] as? String, "", "\(heard)")
        XCTAssertEqual(heard["serviceUUIDs"] as? [String], [], "\(heard)")
        let read = try beryl(["gatt", "--peer", identifier, "read", "7E570002-0000-1000-8000-00805F9B34FB", "--json"], side: 1)
        XCTAssertEqual(read.status, 0, read.err)
        XCTAssertEqual(JSONLines.events("read", in: read.out).map { $0["value"] as? String }, ["d700"], read.out)
        let relaunch = sinceRelaunch(of: thermostat)
        let restored = try XCTUnwrap(relaunch.first { $0["event"] as? String == "restored" }, log(of: thermostat))
        XCTAssertEqual(restored["services"] as? Int, 1)
        XCTAssertEqual(restored["characteristics"] as? [String], ["7E570002", "2A6E", "7E570003"])
        XCTAssertEqual(restored["advertisingAs"] as? String, "Beryl Thermostat")
        XCTAssertTrue(relaunch.contains { $0["event"] as? String == "setpointRead" }, "\(relaunch)")
        XCTAssertFalse(relaunch.contains { $0["event"] as? String == "advertising" }, "the restored app added nothing again: \(relaunch)")

        // A system termination keeps the manager; a central's write then relaunches the app to answer it.
        XCTAssertEqual(try beryl(["app", "terminate", thermostat]).status, 0)
        XCTAssertTrue(eventually { ((try? self.app(thermostat)["pids"] as? [Int]) ?? [1]).isEmpty })
        XCTAssertEqual(try app(thermostat)["preservedPeripherals"] as? [String], ["thermostat"], "terminate preserves")
        let relaunchesBefore = relaunches(of: thermostat)
        let write = try beryl(["gatt", "--peer", identifier, "write", "7E570002-0000-1000-8000-00805F9B34FB", "e100", "--json"], side: 1)
        XCTAssertEqual(write.status, 0, write.err)
        XCTAssertEqual(relaunches(of: thermostat), relaunchesBefore + 1, log(of: thermostat))
        XCTAssertTrue(applied(225, by: thermostat), log(of: thermostat))

        // A user quit discards it: nothing is published or advertised any more.
        XCTAssertEqual(try beryl(["app", "quit", thermostat]).status, 0)
        XCTAssertTrue(eventually { ((try? self.app(thermostat)["preservedPeripherals"] as? [String]) ?? ["?"]).isEmpty })
        let gone = try beryl(["gatt", "--peer", identifier, "read", "7E570002-0000-1000-8000-00805F9B34FB", "--timeout", "4"], side: 1)
        XCTAssertNotEqual(gone.status, 0, "after a quit the setpoint is gone: \(gone.out)")
    }

    /// A relaunched app that refuses a write it was woken for has handled it as much as one that applies it: the
    /// library reports it idle once the callback returned (the app says nothing), so it is not ended at its wake budget
    /// and the central's next write is answered by the same app.
    /// (The thermostat said idle only after a write it applied: a refused one left it to be suspended, and its next
    /// write was refused with Unlikely Error.)
    func testARelaunchedAppThatRefusesAWriteIsIdleAgainWithinItsBudget() throws {
        let brief = "com.example.brief-thermostat"
        XCTAssertEqual(try beryl(["app", "launch", brief]).status, 0)
        XCTAssertTrue(eventually(.seconds(15)) { self.advertised(brief) > 0 }, log(of: brief))
        try killApp(brief)
        let found = try beryl(["scan", "--service", "7E570001-0000-1000-8000-00805F9B34FB", "--count", "1", "--timeout", "30", "--json"], side: 1)
        let identifier = try XCTUnwrap((try? JSONSerialization.jsonObject(with: Data(found.out.utf8)) as? [String: Any])?["identifier"] as? String, found.err)

        // The write relaunches the app; the next event, in the background, wakes it for its budget.
        let first = try beryl(["gatt", "--peer", identifier, "write", "7E570002-0000-1000-8000-00805F9B34FB", "e100", "--json"], side: 1)
        XCTAssertEqual(first.status, 0, first.err)
        XCTAssertGreaterThanOrEqual(relaunches(of: brief), 1, log(of: brief))
        XCTAssertTrue(applied(225, by: brief), log(of: brief))
        // One byte where the setpoint takes two: the app refuses it (Invalid Attribute Value Length).
        let tally = { ((try? self.app(brief)["wakes"] as? [String: Int]) ?? [:]) }
        XCTAssertTrue(eventually { tally()["begun"] == (tally()["endedIdle"] ?? 0) + (tally()["overran"] ?? 0) }, "the first write's wake ended: \(tally())")
        let wakesBefore = tally()
        let refused = try beryl(["gatt", "--peer", identifier, "write", "7E570002-0000-1000-8000-00805F9B34FB", "e1", "--json"], side: 1)
        XCTAssertNotEqual(refused.status, 0, refused.out)
        // Invalid Attribute Value Length (Core Vol 3 Part F §3.4.1.1), as the write's failed event carries it.
        XCTAssertEqual(JSONLines.events("failed", in: refused.out).map { $0["attError"] as? Int }, [0x0D], refused.out + refused.err)
        let pids = try XCTUnwrap(try app(brief)["pids"] as? [Int])
        Thread.sleep(forTimeInterval: 3)  // past the 2 s budget
        XCTAssertEqual(try app(brief)["state"] as? String, "background", "idle after the refusal without saying so, not ended")
        XCTAssertEqual(try app(brief)["pids"] as? [Int], pids, "the same process")
        let wakes = try XCTUnwrap(try app(brief)["wakes"] as? [String: Int])
        XCTAssertEqual(wakes["begun"], (wakesBefore["begun"] ?? 0) + 1, "the refused write woke it: \(wakesBefore) → \(wakes)")
        XCTAssertEqual(wakes["endedIdle"], (wakesBefore["endedIdle"] ?? 0) + 1, "and that wake ended idle: \(wakesBefore) → \(wakes)")
        XCTAssertEqual(wakes["overran"], 0, "\(wakes)")

        let write = try beryl(["gatt", "--peer", identifier, "write", "7E570002-0000-1000-8000-00805F9B34FB", "dc00", "--json"], side: 1)
        XCTAssertEqual(write.status, 0, write.err)
        XCTAssertTrue(applied(220, by: brief), log(of: brief))
        _ = try? beryl(["app", "quit", brief])
    }

    /// attd goes: the running thermostat's service and advertising are cleared (Core Bluetooth's rule: the app adds
    /// them again on poweredOn), and the app is killed before it can. Its record keeps what it had published: managerd
    /// publishes and advertises it again once attd is back, and a central's read relaunches the app. Then the same
    /// with managerd killed too, restarted from the record alone.
    func testAPeripheralKilledBeforeItAddsItsServicesAgainIsStillRestored() throws {
        let thermostat = "com.example.thermostat"
        let run = "\(scratch.root)/run0"
        XCTAssertEqual(try beryl(["app", "launch", thermostat]).status, 0)
        XCTAssertTrue(eventually(.seconds(15)) { self.advertised(thermostat) > 0 }, log(of: thermostat))

        func killAttdThenTheApp(alsoManagerd: Bool, round: Int) throws {
            let resetsBefore = resets(of: thermostat)
            try scratch.crash(round == 0 ? "attd0" : "attd0-\(round)", socket: run + "/attd.sock")
            XCTAssertTrue(eventually { self.resets(of: thermostat) > resetsBefore }, log(of: thermostat))
            let appPIDs = try XCTUnwrap(try app(thermostat)["pids"] as? [Int])
            if alsoManagerd { try scratch.crash("managerd0", socket: run + "/managerd.sock") }
            for pid in appPIDs { kill(Int32(pid), SIGKILL) }
            try scratch.start("attd0-\(round + 1)", [Executables.path("attd"), "--runtime-dir", run, "--state-dir", "\(scratch.root)/state0"],
                              socket: run + "/attd.sock")
            if alsoManagerd {
                try scratch.start("managerd0-\(round + 1)", [Executables.path("managerd"), "--runtime-dir", run, "--state-dir", "\(scratch.root)/state0",
                                                            "--apps-dir", appsDir], socket: run + "/managerd.sock")
            }
            XCTAssertTrue(eventually { ((try? self.app(thermostat)["pids"] as? [Int]) ?? [1]).isEmpty })
            XCTAssertEqual(try app(thermostat)["preservedPeripherals"] as? [String], ["thermostat"])

            let found = try beryl(["scan", "--service", "7E570001-0000-1000-8000-00805F9B34FB", "--count", "1", "--timeout", "30", "--json"], side: 1)
            let heard = try XCTUnwrap(try? JSONSerialization.jsonObject(with: Data(found.out.utf8)) as? [String: Any], "still advertised: \(found.err)")
            let identifier = try XCTUnwrap(heard["identifier"] as? String)
            let relaunchesBefore = relaunches(of: thermostat)
            let read = try beryl(["gatt", "--peer", identifier, "read", "7E570002-0000-1000-8000-00805F9B34FB", "--json"], side: 1)
            XCTAssertEqual(read.status, 0, "still published: \(read.err)")
            XCTAssertEqual(JSONLines.events("read", in: read.out).map { $0["value"] as? String }, ["d700"], read.out)
            XCTAssertEqual(relaunches(of: thermostat), relaunchesBefore + 1, log(of: thermostat))
            let restored = sinceRelaunch(of: thermostat).first { $0["event"] as? String == "restored" }
            XCTAssertEqual(restored?["characteristics"] as? [String], ["7E570002", "2A6E", "7E570003"], log(of: thermostat))
        }
        try killAttdThenTheApp(alsoManagerd: false, round: 0)
        try killAttdThenTheApp(alsoManagerd: true, round: 1)
    }

    /// A record written by an earlier Beryl (version 1: the wire message's bytes) is read by a new managerd: the
    /// preserved thermostat's service is published and advertised again from it, a central reads its kept value, and
    /// the record is written back in the current version.
    func testAVersionOneRecordIsResumedAndRewritten() throws {
        let run = "\(scratch.root)/run0", state = "\(scratch.root)/state0"
        try scratch.crash("managerd0", socket: run + "/managerd.sock")
        let legacy = Beryl_Ipc_V1_PreservedState.with {
            $0.peripheral = .with { peripheral in
                peripheral.services = [.with { service in
                    service.spec = .with { spec in
                        spec.uuid = "1E6AC701-0000-1000-8000-00805F9B34FB"
                        spec.primary = true
                        spec.characteristics = [.with { $0.uuid = "1E6AC702-0000-1000-8000-00805F9B34FB"; $0.properties = 0x02; $0.permissions = 0x01
                                                        $0.cached = true; $0.value = Data("kept".utf8) }]
                    }
                    service.published = .with { $0.startHandle = 40; $0.endHandle = 42; $0.valueHandles = [42] }
                }]
                peripheral.advertising = true
                peripheral.localName = "Legacy"
                peripheral.advertisedServiceUuids = ["1E6AC701-0000-1000-8000-00805F9B34FB"]
            }
        }
        let store = try RestorationStore(path: state + "/restoration.sqlite")
        try store.save(PreservedRecord(appID: "com.example.thermostat", restoreID: "legacy", role: .peripheral, state: try legacy.serializedBytes()))
        try scratch.start("managerd0-1", [Executables.path("managerd"), "--runtime-dir", run, "--state-dir", state, "--apps-dir", appsDir],
                          socket: run + "/managerd.sock")
        XCTAssertTrue(eventually { ((try? self.app("com.example.thermostat")["preservedPeripherals"] as? [String]) ?? []) == ["legacy"] })

        let found = try beryl(["scan", "--service", "1E6AC701-0000-1000-8000-00805F9B34FB", "--count", "1", "--timeout", "30", "--json"], side: 1)
        let heard = try XCTUnwrap(try? JSONSerialization.jsonObject(with: Data(found.out.utf8)) as? [String: Any], "advertised from the record: \(found.err)")
        XCTAssertEqual(heard["name"] as? String, "", "its app is not running: the background form, without the name (\(found.out))")
        let identifier = try XCTUnwrap(heard["identifier"] as? String)
        let read = try beryl(["gatt", "--peer", identifier, "read", "1E6AC702-0000-1000-8000-00805F9B34FB", "--json"], side: 1)
        XCTAssertEqual(read.status, 0, read.err)
        XCTAssertEqual(JSONLines.events("read", in: read.out).map { $0["value"] as? String }, [Hex.encode(Array("kept".utf8))], read.out)

        let rewritten = try XCTUnwrap(try store.all().first { $0.restoreID == "legacy" })
        XCTAssertEqual(rewritten.state.first, UInt8(ascii: "{"), "written back as version 2")
        XCTAssertEqual(try PreservedState.decodeStored(rewritten.state).peripheral?.advertising?.localName, "Legacy")
    }

    /// managerd stopped (SIGTERM: `beryl down`, systemd) ends the apps launched for the stack, also one an earlier
    /// managerd launched before it was killed; their preserved managers stay, for the next managerd to launch again.
    func testStoppingManagerdEndsTheAppsLaunchedForTheStack() throws {
        let thermostat = "com.example.thermostat"
        let run = "\(scratch.root)/run0"
        let arguments = [Executables.path("managerd"), "--runtime-dir", run, "--state-dir", "\(scratch.root)/state0", "--apps-dir", appsDir]
        XCTAssertEqual(try beryl(["app", "launch", thermostat]).status, 0)
        XCTAssertTrue(eventually(.seconds(15)) { self.advertised(thermostat) > 0 }, log(of: thermostat))
        let appPID = Int32(try XCTUnwrap((try app(thermostat)["pids"] as? [Int])?.first))

        // A crash leaves the app running, to reconnect to the next managerd, which takes it as its own, with the data
        // channel attd kept for it: the app never hears a reset.
        try scratch.crash("managerd0", socket: run + "/managerd.sock")
        try scratch.start("managerd0-1", arguments, socket: run + "/managerd.sock")
        XCTAssertTrue(eventually { (try? self.app(thermostat)["pids"] as? [Int]) == [Int(appPID)] })
        let attd = try IPCClient(path: run + "/attd.sock")
        XCTAssertTrue(eventually { (try? attd.call(.with { $0.getStatus = .init() }).status.dataPlane.adoptedChannels) == 1 }, log(of: thermostat))
        XCTAssertEqual(resets(of: thermostat), 0, log(of: thermostat))
        XCTAssertTrue(ProcessStats.isAlive(pid: appPID), "a crash ends no app")
        XCTAssertTrue(eventually { (try? self.app(thermostat)["state"] as? String) == "foreground" },
                      "as any app that reconnects: taken as launched is not taken as woken (it would be suspended at its wake budget)")

        let stopped = try XCTUnwrap(scratch.pid(of: "managerd0-1"))
        kill(stopped, SIGTERM)
        XCTAssertTrue(eventually(.seconds(6)) { Spawn.reap(stopped) != nil }, "managerd stops within the supervisor's 5 s")
        XCTAssertTrue(eventually(.seconds(2)) { !ProcessStats.isAlive(pid: appPID) }, "the app managerd's predecessor launched is ended")

        try? FileManager.default.removeItem(atPath: run + "/managerd.sock")
        try scratch.start("managerd0-2", arguments, socket: run + "/managerd.sock")
        XCTAssertEqual(try app(thermostat)["preservedPeripherals"] as? [String], ["thermostat"], "a stop is a system termination: kept")
        XCTAssertEqual(try app(thermostat)["pids"] as? [Int], [], "nothing running is mistaken for the app")
    }

    /// managerd crashes, and its successor is up before the stack is on again (attd went too), so the running app
    /// reconnects to a manager that is not poweredOn. Its reset clears its services and advertising, and it adds its
    /// own again on poweredOn; managerd must not publish the record's copy beside them. (Found by the fault suite:
    /// two copies, and writes to the first answered Invalid Handle by an app that no longer had it.)
    func testAnAppBackBeforeTheStackIsOnHasItsServiceOnce() throws {
        let thermostat = "com.example.thermostat"
        let run = "\(scratch.root)/run0"
        let common = ["--runtime-dir", run, "--state-dir", "\(scratch.root)/state0"]
        XCTAssertEqual(try beryl(["app", "launch", thermostat]).status, 0)
        XCTAssertTrue(eventually(.seconds(15)) { self.advertised(thermostat) > 0 }, log(of: thermostat))
        let advertisedBefore = advertised(thermostat)

        try scratch.crash("managerd0", socket: run + "/managerd.sock")
        try scratch.crash("attd0", socket: run + "/attd.sock")
        try scratch.start("managerd0-1", [Executables.path("managerd")] + common + ["--apps-dir", appsDir], socket: run + "/managerd.sock")
        XCTAssertTrue(eventually { ((try? self.app(thermostat)["restorations"] as? Int) ?? 0) == 1 },
                      "the app reconnects and restores its manager while managerd has no attd")
        usleep(500_000)  // the app's reset clears its services and advertising now, before poweredOn
        try scratch.start("attd0-1", [Executables.path("attd")] + common, socket: run + "/attd.sock")
        XCTAssertTrue(eventually(.seconds(15)) { self.advertised(thermostat) > advertisedBefore },
                      "the app adds its service again on poweredOn: \(log(of: thermostat))")

        let found = try beryl(["scan", "--service", "7E570001-0000-1000-8000-00805F9B34FB", "--count", "1", "--timeout", "10", "--json"], side: 1)
        let heard = try XCTUnwrap(try? JSONSerialization.jsonObject(with: Data(found.out.utf8)) as? [String: Any], found.err)
        let identifier = try XCTUnwrap(heard["identifier"] as? String)
        let discover = try beryl(["gatt", "--peer", identifier, "discover", "--json"], side: 1)
        XCTAssertEqual(discover.status, 0, discover.err)
        let services = discover.out.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            .filter { $0["event"] as? String == "service" }.compactMap { $0["uuid"] as? String }
        XCTAssertEqual(services.filter { $0 == "7E570001" }.count, 1, "one thermostat service on the air: \(services)")
        let write = try beryl(["gatt", "--peer", identifier, "write", "7E570002-0000-1000-8000-00805F9B34FB", "e100"], side: 1)
        XCTAssertEqual(write.status, 0, write.err)
        XCTAssertTrue(applied(225, by: thermostat), log(of: thermostat))
    }

    /// A background app woken by an event has its budget; this one's connection takes longer, so the stack ends
    /// it, as iOS does, rather than leave it suspended with its events held. Its preserved central keeps the lock's
    /// connection, and the next event (the lock back in range) launches it again.
    func testAWokenAppThatOverrunsItsBudgetIsEndedAndWokenByItsNextEvent() throws {
        let profile = Self.lockProfile.replacingOccurrences(of: "secure-lock.json", with: "lock.json")
        try scratch.start("serve", [Executables.path("beryl"), "serve", profile, "--runtime-dir", "\(scratch.root)/run1"],
                          socket: "\(scratch.root)/run1/managerd.sock")
        let sleepy = "com.example.sleepy"
        let sleepyEvents = { ((try? String(contentsOfFile: self.sleepyLog, encoding: .utf8)) ?? "").split(separator: "\n")
            .compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] } }
        let wakes = { ((try? self.app(sleepy)["wakes"] as? [String: Int]) ?? [:]) }
        XCTAssertEqual(try beryl(["app", "launch", sleepy]).status, 0)
        XCTAssertEqual(try app(sleepy)["state"] as? String, "background", "a launched app starts in the background")

        // The wakes before the link (the launch, the discovery) end with their callbacks: no overrun.
        XCTAssertTrue(eventually(.seconds(20)) { self.names(sleepyEvents()).contains("didConnect") }, "\(sleepyEvents())")
        XCTAssertTrue(eventually { (wakes()["endedIdle"] ?? 0) >= 1 }, "\(wakes())")
        XCTAssertEqual(wakes()["overran"], 0)
        let firstPID = try XCTUnwrap(sleepyEvents().first?["pid"] as? Int)
        XCTAssertTrue(names(sleepyEvents()).contains("didDiscover"))

        // didConnect's callback runs 5 s: ended at 1 s, its central preserved with the link.
        XCTAssertTrue(eventually(.seconds(6)) { wakes()["overran"] == 1 }, "\(wakes())")
        XCTAssertTrue(eventually(.seconds(5)) { ((try? self.app(sleepy)["pids"] as? [Int]) ?? [1]).isEmpty }, "the app was ended")
        XCTAssertFalse(ProcessStats.isAlive(pid: Int32(firstPID)))
        XCTAssertEqual(try app(sleepy)["preservedCentrals"] as? [String], ["doorlock-central"])
        XCTAssertNotEqual(try app(sleepy)["state"] as? String, "suspended", "ended, not suspended with its events held")

        // Its next event wakes it again: the lock leaves and comes back, the stack reconnects and relaunches it.
        XCTAssertEqual(try sim(["range", "1", "out"]), 0)
        XCTAssertTrue(eventually(.seconds(10)) { (try? self.beryl(["peripherals", "--connected", "--json"]).out.isEmpty) == true }, "the link dropped")
        XCTAssertEqual(try sim(["range", "1", "in"]), 0)
        XCTAssertTrue(eventually(.seconds(30)) { self.names(sleepyEvents()).filter { $0 == "launched" }.count == 2 }, "\(sleepyEvents())")
        XCTAssertTrue(eventually(.seconds(10)) { self.names(sleepyEvents()).suffix(from: self.names(sleepyEvents()).lastIndex(of: "launched")!).contains("didConnect") },
                      "\(sleepyEvents())")
        let relaunch = try XCTUnwrap(sleepyEvents().last { $0["event"] as? String == "launched" })
        XCTAssertEqual(relaunch["restoring"] as? [String], ["doorlock-central"])
        XCTAssertNotEqual(relaunch["pid"] as? Int, firstPID, "a new process")
        XCTAssertEqual(try beryl(["app", "quit", sleepy]).status, 0)
    }

    private func killApp(_ id: String = RestorationTests.appID) throws {
        let pids = try XCTUnwrap(try app(id)["pids"] as? [Int])
        XCTAssertFalse(pids.isEmpty)
        for pid in pids { kill(Int32(pid), SIGKILL) }
        XCTAssertTrue(eventually { ((try? self.app(id)["pids"] as? [Int]) ?? [1]).isEmpty }, "managerd saw the app go")
    }

    func testManifestsLoadAndBadOnesAreRefusedWithTheirReason() throws {
        let listed = try beryl(["app", "list", "--json"])
        XCTAssertEqual(listed.status, 0, listed.err)
        let object = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(listed.out.utf8)) as? [String: Any])
        XCTAssertEqual((object["apps"] as? [[String: Any]])?.compactMap { $0["id"] as? String }, ["com.example.brief-thermostat", Self.appID, "com.example.reader", "com.example.sleepy", "com.example.thermostat"])
        let refused = try XCTUnwrap(object["refused"] as? [String])
        XCTAssertTrue(refused.contains { $0.contains("rooted.json: user: apps never run as root") }, "\(refused)")
        XCTAssertTrue(refused.contains { $0.contains("broken.json: $: not JSON") }, "\(refused)")
        let doorlock = try app()
        XCTAssertEqual(doorlock["user"] as? String, Self.appUser)
        XCTAssertEqual(doorlock["backgroundModes"] as? [String], ["bluetooth-central"])
        XCTAssertEqual(doorlock["state"] as? String, "not running")

        // Only the manifest's user may claim the app id (this test runs as another user when it is root).
        if getuid() == 0 {
            let misuse = Recorder()
            let central = CentralManager(delegate: nil, queue: nil, appID: Self.appID, socketPath: "\(scratch.root)/run0/managerd.sock")
            central.apiMisuseHandler = { misuse.note("\($0)") }
            XCTAssertTrue(eventually { central.state == .unauthorized }, "state \(central.state)")
            // And restoration needs a manifest at all.
            let stray = CentralManager(delegate: nil, queue: nil, options: CentralManagerOptions(restoreIdentifier: "x"), appID: "com.example.unknown",
                                           socketPath: "\(scratch.root)/run0/managerd.sock")
            XCTAssertTrue(eventually { stray.state == .unsupported }, "state \(stray.state)")
        }
        let unknown = try beryl(["app", "launch", "com.example.nothing"])
        XCTAssertNotEqual(unknown.status, 0)
        XCTAssertTrue(unknown.err.contains("no app manifest declares 'com.example.nothing'"), unknown.err)
    }

    /// The doorlock app's callbacks, one JSON object per line.
    private func doorlockEvents() -> [[String: Any]] { events(in: doorlockLog) }

    private func events(in log: String) -> [[String: Any]] { JSONLines.events(inFile: log) }

    private func names(_ events: [[String: Any]]) -> [String] { events.compactMap { $0["event"] as? String } }

    /// The programming guide's door-lock scenario: connected and subscribed, the app is killed; the lock leaves range
    /// and the link drops, and managerd keeps the connection request pending (through its own kill -9); the lock comes
    /// back, managerd reconnects and relaunches the app, which gets willRestoreState with the lock, then didConnect,
    /// and reads again without discovering again.
    func testTheGuidesDoorLockScenario() throws {
        // A lock whose state notifies only when it changes (a ticking one would wake the app each time).
        let profile = Self.lockProfile.replacingOccurrences(of: "secure-lock.json", with: "lock.json")
        try scratch.start("serve", [Executables.path("beryl"), "serve", profile, "--runtime-dir", "\(scratch.root)/run1", "--json"],
                          socket: "\(scratch.root)/run1/managerd.sock")
        let serveLog = { (try? String(contentsOfFile: self.scratch.paths.logFile("serve"), encoding: .utf8)) ?? "" }
        XCTAssertTrue(eventually { !JSONLines.events("advertising", inFile: self.scratch.paths.logFile("serve")).isEmpty }, serveLog())

        // 1. Launched through managerd as its manifest's user: it finds the lock, connects, discovers, subscribes, reads.
        XCTAssertEqual(try beryl(["app", "launch", Self.appID]).status, 0)
        XCTAssertTrue(eventually(.seconds(20)) { self.names(self.doorlockEvents()).contains("didUpdateValueFor") }, "\(doorlockEvents())")
        let first = names(doorlockEvents())
        XCTAssertEqual(Array(first.prefix(4)), ["launched", "centralManagerDidUpdateState", "didDiscover", "didConnect"], "\(first)")
        XCTAssertTrue(first.contains("didDiscoverServices") && first.contains("didUpdateNotificationStateFor"), "\(first)")
        XCTAssertEqual(Set(doorlockEvents().compactMap { $0["pid"] as? Int }).count, 1)

        // 2. kill -9: the link is kept for the app.
        try killApp()
        XCTAssertEqual(try app()["preservedCentrals"] as? [String], ["doorlock-central"])

        // 3. Out of range: the link drops, the request is pending again, and nothing is launched for that.
        XCTAssertEqual(try sim(["range", "1", "out"]), 0)
        XCTAssertTrue(eventually(.seconds(10)) { (try? self.beryl(["peripherals", "--connected", "--json"]).out.isEmpty) == true }, "the link dropped")
        usleep(1_000_000)
        XCTAssertEqual(names(doorlockEvents()).filter { $0 == "launched" }.count, 1, "a preserved pending connection wakes no one")

        // 4. managerd is killed too; it comes back with the pending request from its state directory.
        try scratch.crash("managerd0", socket: socket(0))
        try scratch.start("managerd0-again", [Executables.path("managerd"), "--runtime-dir", "\(scratch.root)/run0", "--state-dir", "\(scratch.root)/state0",
                                              "--apps-dir", appsDir], socket: "\(scratch.root)/run0/managerd.sock")
        XCTAssertEqual(try app()["preservedCentrals"] as? [String], ["doorlock-central"], "the preserved manager outlives managerd")

        // 5. The lock comes back: reconnected, relaunched, restored, then didConnect; reading resumes without discovery.
        XCTAssertEqual(try sim(["range", "1", "in"]), 0)
        XCTAssertTrue(eventually(.seconds(30)) {
            let events = self.doorlockEvents()
            guard let relaunch = events.lastIndex(where: { $0["event"] as? String == "launched" }), relaunch > 0 else { return false }
            return events[relaunch...].contains { $0["event"] as? String == "didUpdateValueFor" }
        }, "\(doorlockEvents())")
        let events = doorlockEvents()
        let relaunch = try XCTUnwrap(events.lastIndex { $0["event"] as? String == "launched" })
        let after = Array(events[relaunch...])
        XCTAssertEqual(after.first?["restoring"] as? [String], ["doorlock-central"])
        let restored = try XCTUnwrap(after.first { $0["event"] as? String == "willRestoreState" })
        let peripherals = try XCTUnwrap(restored["peripherals"] as? [[String: Any]])
        XCTAssertEqual(peripherals.count, 1)
        XCTAssertEqual(peripherals.first?["characteristicKnown"] as? Bool, true, "what the app discovered is restored")
        let order = names(after)
        let restoreAt = try XCTUnwrap(order.firstIndex(of: "willRestoreState"))
        let connectAt = try XCTUnwrap(order.firstIndex(of: "didConnect"), "\(order)")
        XCTAssertLessThan(restoreAt, connectAt)
        XCTAssertLessThan(restoreAt, try XCTUnwrap(order.firstIndex(of: "centralManagerDidUpdateState")), "willRestoreState comes first")
        XCTAssertTrue(order.contains("resumedWithoutDiscovery"), "\(order)")
        XCTAssertFalse(order.contains("didDiscoverServices") || order.contains("didDiscover"), "no discovery after restoration: \(order)")
        XCTAssertNotEqual(after.first?["pid"] as? Int, events.first?["pid"] as? Int, "a new process")

        // 6. A user quit discards the preserved manager.
        XCTAssertEqual(try beryl(["app", "quit", Self.appID]).status, 0)
        XCTAssertTrue(eventually { ((try? self.app()["preservedCentrals"] as? [String]) ?? ["?"]).isEmpty })
    }
}
