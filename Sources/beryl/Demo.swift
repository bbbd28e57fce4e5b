import ArgumentParser
import BerylDaemonKit
import BerylSupervisor
import Foundation
import Synchronization

/// `beryl demo`: the main job. berylsim with two controllers and a full stack on each; the heart-rate examples talk
/// (discovery, connection, service discovery, a read, notifications, a write); then the restoration chapter's door
/// lock: the central app is launched from its manifest, killed, the lock leaves range and returns, and the stack
/// relaunches and restores the app.
struct Demo: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the stack end to end on the simulated radio: the heart-rate examples, then the door-lock restoration story.",
        discussion: "Run from the repository (it reads Examples/profiles and Examples/manifests). Every process it starts comes from the directory of this beryl executable.")

    @Flag(help: "One JSON object per event (steps, progress, the end) instead of readable lines.")
    var json = false

    @Option(help: "The repository's Examples directory.")
    var examples = "Examples"

    @Flag(help: "Keep the demo's directory (logs, databases) afterwards.")
    var keep = false

    func validate() throws {
        for file in ["profiles/lock.json", "manifests/doorlock.json"] where !FileManager.default.fileExists(atPath: "\(examples)/\(file)") {
            throw ValidationError("no \(examples)/\(file): run beryl demo from the repository, or pass --examples")
        }
    }

    func run() throws {
        let show = DemoShow(json: json)
        let world: DemoWorld
        do {
            world = try DemoWorld(examples: examples)
        } catch {
            throw Output.fail("demo: cannot prepare: \(error)")
        }
        let interruption = Interruption.onInterrupt {
            world.stop()
            world.remove()
        }
        defer {
            Interruption.remove(interruption)
            world.stop()
            if !keep { world.remove() } else { show.note("kept \(world.root)") }
        }
        do {
            try world.heartRate(show)
            try world.doorLock(show)
            try world.shutDown(show)
            show.finished(ok: true)
        } catch is DemoFailure {
            show.note("logs: \(world.root) (kept)")
            world.keepOnFailure()
            show.finished(ok: false)
            throw ExitCode(1)
        }
    }
}

/// The processes and directories of one demo run.
/// Driven from one thread; an interruption stops it from the signal handler's thread, so the processes it started
/// and whether to keep its directory are behind a lock.
final class DemoWorld: Sendable {
    let root: String
    let examples: String
    private let pids = Mutex<[Int32]>([])
    private let keep = Mutex(false)
    let appUser: String

    init(examples: String) throws {
        root = try Scratch.makeDirectory(prefix: "beryl-demo", openToApps: true)  // the door-lock app runs as its manifest's user
        self.examples = examples
        appUser = Spawn.unprivilegedUser
    }

    var central: DaemonPaths { DaemonPaths(runtimeDir: root + "/central/run", stateDir: root + "/central/state") }
    var peripheral: DaemonPaths { DaemonPaths(runtimeDir: root + "/peripheral/run", stateDir: root + "/peripheral/state") }
    var sim: String { root + "/sim" }
    var doorlockLog: String { root + "/doorlock.log" }

    func keepOnFailure() { keep.withLock { $0 = true } }
    func remove() { if !keep.withLock({ $0 }) { try? FileManager.default.removeItem(atPath: root) } }

    func stop() {
        for paths in [central, peripheral] { _ = try? StackControl.down(paths: paths, timeout: .seconds(5)) }
        let started = pids.withLock { pids in defer { pids.removeAll() }; return pids }
        for pid in started.reversed() where ProcessStats.isAlive(pid: pid) {
            kill(pid, SIGTERM)
            try? StackControl.waitForExit(pid, timeout: .seconds(5))
            if ProcessStats.isAlive(pid: pid) { kill(pid, SIGKILL) }
            _ = Spawn.reap(pid)
        }
    }

    private func start(_ arguments: [String], log: String) throws -> Int32 {
        let pid = try Spawn.start(arguments, logPath: log)
        pids.withLock { $0.append(pid) }
        return pid
    }

    private func read(_ path: String) -> String { (try? String(contentsOfFile: path, encoding: .utf8)) ?? "" }
    private func lines(_ path: String) -> [String] { read(path).split(separator: "\n").map(String.init) }
    /// The last lines a log says, as text: an event's own text where the line is one (`--json`).
    private func last(_ path: String) -> String {
        lines(path).suffix(3).map { json($0)?["text"] as? String ?? $0 }.joined(separator: " | ")
    }

    /// The JSON-line events a program wrote to its log (`name`: only those).
    private func events(_ name: String? = nil, in path: String) -> [[String: Any]] {
        name.map { JSONLines.events($0, inFile: path) } ?? JSONLines.events(inFile: path)
    }

    private func beryl(_ arguments: [String], _ paths: DaemonPaths) -> ToolRun {
        (try? runTool("beryl", arguments + ["--runtime-dir", paths.runtimeDir])) ?? ToolRun(status: -1, stdout: "", stderr: "cannot run beryl")
    }

    private func json(_ text: String) -> [String: Any]? { try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] }

    // MARK: The heart-rate examples

    func heartRate(_ show: DemoShow) throws {
        try show.step("start berylsim (2 controllers)", side: "air", reporting: {
            let pid = try start([Executables.path("berylsim"), "--controllers", "2", "--dir", sim, "--log-level", "warning"], log: root + "/berylsim.log")
            try show.wait(.seconds(10), for: "berylsim's control socket", got: { self.last(self.root + "/berylsim.log") }) {
                FileManager.default.fileExists(atPath: self.sim + "/control.sock")
            }
            return ("pid \(pid)", ["pid": Int(pid)])
        })
        for (side, paths, index) in [("central", central, 0), ("peripheral", peripheral, 1)] {
            try show.step("beryl up on controller \(index)", side: side) {
                if side == "central" { try writeManifest() }  // managerd reads the apps directory when it starts
                let report: StackReport
                do {
                    report = try StackControl.up(paths: paths, transport: "unix:\(sim)/controller-\(index).sock", logLevel: .warning,
                                                 managerdArguments: side == "central" ? ["--apps-dir", root + "/apps"] : [])
                } catch {
                    throw DemoFailure(expected: "the stack poweredOn", got: "\(error)")
                }
                for directory in [paths.runtimeDir, paths.logDir] { chmod(directory, 0o755) }
                return "controller \(report.controller?.address ?? "?") poweredOn"
            }
        }
        let peripheralLog = root + "/heart-rate-peripheral.log"
        var peripheralPID: Int32 = 0
        try show.step("heart-rate-peripheral example advertises", side: "peripheral") {
            peripheralPID = try start([Executables.path("heart-rate-peripheral"), "--runtime-dir", peripheral.runtimeDir, "--json"], log: peripheralLog)
            try show.wait(.seconds(15), for: "\"advertising as Beryl HR\"", got: { self.last(peripheralLog) }) {
                self.events("advertising", in: peripheralLog).contains { $0["localName"] as? String == "Beryl HR" && $0["error"] is NSNull }
            }
            return "heart rate service added, advertising as Beryl HR"
        }
        let centralLog = root + "/heart-rate-central.log"
        let centralPID = try start([Executables.path("heart-rate-central"), "--runtime-dir", central.runtimeDir, "--count", "5", "--json"], log: centralLog)
        let said = { (event: String) in self.events(event, in: centralLog) }
        try show.step("heart-rate-central example discovers it", side: "central") {
            try show.wait(.seconds(20), for: "a discovery", got: { self.last(centralLog) }) { said("discovered").contains { $0["localName"] as? String == "Beryl HR" } }
            return said("discovered").first?["text"] as? String ?? ""
        }
        try show.step("connects", side: "central") {
            try show.wait(.seconds(20), for: "\"connected\"", got: { self.last(centralLog) }) { !said("connected").isEmpty }
            return ""
        }
        try show.step("discovers the service and its characteristics", side: "central") {
            try show.wait(.seconds(20), for: "characteristics discovered", got: { self.last(centralLog) }) { !said("characteristicsDiscovered").isEmpty }
            return ((said("characteristicsDiscovered").first?["uuids"] as? [String]) ?? []).joined(separator: ", ")
        }
        try show.step("reads the body sensor location", side: "central") {
            try show.wait(.seconds(10), for: "\"sensor location chest\"", got: { self.last(centralLog) }) { !said("sensorLocation").isEmpty }
            // Body Sensor Location 1 is chest (Heart Rate Service §3.2).
            guard said("sensorLocation").first?["code"] as? Int == 1 else { throw DemoFailure(expected: "sensor location chest", got: last(centralLog)) }
            return "chest"
        }
        try show.step("takes 5 heart-rate notifications", side: "central") {
            let beats = { said("heartRate").compactMap { $0["bpm"] as? Int } }
            try show.wait(.seconds(30), for: "5 notifications", got: { "\(beats().count): \(self.last(centralLog))" }) { beats().count >= 5 }
            return beats().map { "\($0) bpm" }.joined(separator: ", ")
        }
        try show.step("writes the control point", side: "central") {
            try show.wait(.seconds(10), for: "the write acknowledged", got: { self.last(centralLog) }) { !said("energyExpendedReset").isEmpty }
            try show.wait(.seconds(5), for: "the peripheral app to accept it", got: { self.last(peripheralLog) }) {
                self.events("controlPointWritten", in: peripheralLog).contains { $0["value"] as? [Int] == [1] && $0["accepted"] as? Bool == true }
            }
            try show.wait(.seconds(10), for: "the central example to finish", got: { self.last(centralLog) }) { Spawn.reap(centralPID) != nil || !ProcessStats.isAlive(pid: centralPID) }
            return "reset energy expended; the peripheral app accepted [1]"
        }
        kill(peripheralPID, SIGTERM)
        try? StackControl.waitForExit(peripheralPID, timeout: .seconds(5))
        _ = Spawn.reap(peripheralPID)
    }

    // MARK: The door lock

    private func eventNames() -> [String] { events(in: doorlockLog).compactMap { $0["event"] as? String } }
    private func appInfo() -> [String: Any]? {
        (json(beryl(["app", "list", "--json"], central).stdout)?["apps"] as? [[String: Any]])?.first { $0["id"] as? String == "com.example.doorlock" }
    }

    func doorLock(_ show: DemoShow) throws {
        try show.step("serves a door lock (beryl serve lock.json)", side: "peripheral") {
            let log = root + "/lock.log"
            _ = try start([Executables.path("beryl"), "serve", "\(examples)/profiles/lock.json", "--json", "--runtime-dir", peripheral.runtimeDir], log: log)
            try show.wait(.seconds(15), for: "the lock to advertise", got: { self.last(log) }) { !self.events("advertising", in: log).isEmpty }
            return "advertising D00D0001"
        }
        try show.step("managerd launches doorlock (as \(appUser))", side: "central") {
            let launched = beryl(["app", "launch", "com.example.doorlock"], central)
            guard launched.status == 0 else { throw DemoFailure(expected: "the app launched", got: launched.stderr) }
            _ = beryl(["app", "state", "com.example.doorlock", "foreground"], central)  // the user opened it
            try show.wait(.seconds(30), for: "connect, discover, subscribe, read", got: { self.eventNames().joined(separator: " ") }) {
                self.eventNames().contains("didUpdateValueFor")
            }
            return "connected, discovered, subscribed, read"
        }
        try show.step("kill -9 the app; the stack keeps its link", side: "central") {
            let pids = (appInfo()?["pids"] as? [Int]) ?? []
            guard !pids.isEmpty else { throw DemoFailure(expected: "the doorlock app running", got: "no pid") }
            for pid in pids { kill(Int32(pid), SIGKILL) }
            try show.wait(.seconds(5), for: "managerd to see the app go") { ((self.appInfo()?["pids"] as? [Int]) ?? [1]).isEmpty }
            guard appInfo()?["preservedCentrals"] as? [String] == ["doorlock-central"] else {
                throw DemoFailure(expected: "central manager doorlock-central preserved", got: "\(appInfo() ?? [:])")
            }
            return "central manager doorlock-central preserved"
        }
        try show.step("the lock goes out of range", side: "air") {
            _ = try runTool("beryl", ["sim", "range", "1", "out", "--dir", sim])
            try show.wait(.seconds(10), for: "the link to drop") {
                let listed = self.beryl(["peripherals", "--connected", "--json"], self.central)
                return listed.status == 0 && JSONLines.events(in: listed.stdout).isEmpty
            }
            return "link dropped; managerd keeps the connection request pending"
        }
        try show.step("kill -9 managerd; the supervisor restarts it", side: "central") {
            guard let managerd = StackProbe.status(at: central.socket("managerd"))?.pid else { throw DemoFailure(expected: "managerd running", got: "no answer") }
            kill(managerd, SIGKILL)
            try show.wait(.seconds(10), for: "a new managerd") { (StackProbe.status(at: self.central.socket("managerd"))?.pid).map { $0 != managerd } ?? false }
            guard appInfo()?["preservedCentrals"] as? [String] == ["doorlock-central"] else {
                throw DemoFailure(expected: "the preserved manager back from restoration.sqlite", got: "\(appInfo() ?? [:])")
            }
            return "preserved manager resumed from restoration.sqlite"
        }
        try show.step("the lock returns: relaunched, restored, read", side: "central") {
            _ = try runTool("beryl", ["sim", "range", "1", "in", "--dir", sim])
            try show.wait(.seconds(30), for: "willRestoreState in the relaunched app", got: { self.eventNames().joined(separator: " ") }) {
                self.eventNames().contains("willRestoreState")
            }
            try show.wait(.seconds(30), for: "a read after the relaunch", got: { self.eventNames().joined(separator: " ") }) {
                self.eventNames().filter { $0 == "didUpdateValueFor" }.count >= 2
            }
            let relaunched = Array(eventNames().drop { $0 != "willRestoreState" })
            guard let connect = relaunched.firstIndex(of: "didConnect"), relaunched[connect...].contains("resumedWithoutDiscovery"),
                  !relaunched.contains("didDiscoverServices") else {
                throw DemoFailure(expected: "willRestoreState, didConnect, then a read without discovering again", got: relaunched.joined(separator: " "))
            }
            return relaunched.prefix(5).joined(separator: ", ")
        }
        _ = beryl(["app", "quit", "com.example.doorlock"], central)
    }

    /// Examples/manifests/doorlock.json with this build's doorlock, this run's log, and a user that is not root.
    private func writeManifest() throws {
        try FileManager.default.createDirectory(atPath: root + "/apps", withIntermediateDirectories: true)
        let data = try Data(contentsOf: URL(fileURLWithPath: "\(examples)/manifests/doorlock.json"))
        guard var manifest = try JSONSerialization.jsonObject(with: data) as? [String: Any], var launch = manifest["launch"] as? [String: Any],
              var command = launch["command"] as? [String], let logAt = command.firstIndex(of: "--log"), logAt + 1 < command.count else {
            throw DemoFailure(expected: "a doorlock manifest with a launch command and --log", got: String(decoding: data, as: UTF8.self))
        }
        command[0] = Executables.path("doorlock")
        command[logAt + 1] = doorlockLog
        launch["command"] = command
        manifest["launch"] = launch
        manifest["user"] = appUser
        _ = FileManager.default.createFile(atPath: doorlockLog, contents: nil)
        chmod(doorlockLog, 0o666)
        let file = root + "/apps/doorlock.json"
        try JSONSerialization.data(withJSONObject: manifest).write(to: URL(fileURLWithPath: file))
        chmod(file, 0o644)
    }

    // MARK: The end

    func shutDown(_ show: DemoShow) throws {
        try show.step("beryl down, both stacks", side: "both") {
            for paths in [central, peripheral] {
                _ = try? StackControl.down(paths: paths)
                for name in ["supervisor", "hcid", "attd", "managerd"] where FileManager.default.fileExists(atPath: paths.socket(name)) {
                    throw DemoFailure(expected: "\(name).sock removed", got: "still there")
                }
            }
            return "sockets removed"
        }
        try show.step("stop berylsim", side: "air") {
            stop()
            return ""
        }
    }
}
