import BerylDaemonKit
import BerylSupervisor
import Foundation
import Synchronization

/// The world the faults hit: berylsim with three controllers, a supervised stack (`beryl up`) on controllers 0 and 1,
/// and on them two apps launched from manifests, both with restore identifiers: `doorlock` (a central subscribed
/// to the thermostat's temperature) and `thermostat` (a peripheral with a dynamic setpoint, notifying every 200 ms).
/// The two stacks are bonded. Controller 2 is left for a rogue remote device.
/// Driven from one thread; the serving phase's writer thread reads what `start` set, and an interruption stops it from
/// the signal handler's thread: what they share is behind a lock.
public final class FaultLab: Sendable {
    public static let thermostatService = "7E570001-0000-1000-8000-00805F9B34FB"
    public static let setpoint = "7E570002-0000-1000-8000-00805F9B34FB"
    public static let stream = "7E570003-0000-1000-8000-00805F9B34FB"
    public static let doorlockID = "com.example.doorlock"
    public static let thermostatID = "com.example.thermostat"
    /// The app a side runs: the door lock as central, the thermostat as peripheral.
    static func appID(on side: Side) -> String { side == .central ? doorlockID : thermostatID }

    public let root: String
    let seed: UInt64
    let tcpBase: Int
    private struct Running {
        var simPID: Int32 = 0
        var thermostatIdentifier = ""
        var peripheralAddress = ""
        var interruption: UUID?
    }
    private let running = Mutex(Running())
    var simPID: Int32 { running.withLock { $0.simPID } }
    /// The thermostat as the central's stack names it, and the peripheral stack's controller address.
    var thermostatIdentifier: String { running.withLock { $0.thermostatIdentifier } }
    var peripheralAddress: String { running.withLock { $0.peripheralAddress } }
    let appUser: String

    public init(seed: UInt64, index: Int = 0) throws {
        root = try Scratch.makeDirectory(prefix: "beryl-faults", openToApps: true)  // the apps run as their manifest's user
        self.seed = seed
        // berylsim listens on one port per controller from here: apart for each process and each lab in it.
        tcpBase = 20_000 + Int(getpid() % 2_500) * 16 + index % 4 * 4
        appUser = Spawn.unprivilegedUser
    }

    public func paths(_ side: Side) -> DaemonPaths { DaemonPaths(runtimeDir: "\(root)/\(side)/run", stateDir: "\(root)/\(side)/state") }
    var simDir: String { root + "/sim" }
    var doorlockLog: String { root + "/doorlock.log" }
    var thermostatLog: String { paths(.peripheral).logDir + "/app-\(Self.thermostatID).log" }

    // MARK: Bring-up and teardown

    public func start() throws {
        let interruption = Interruption.onInterrupt { [self] in
            stop()
            removeScratch()
        }
        running.withLock { $0.interruption = interruption }
        let sim = try Spawn.start([Executables.path("berylsim"), "--controllers", "3", "--dir", simDir, "--seed", "\(seed)",
                                   "--tcp", "127.0.0.1:\(tcpBase)"], logPath: root + "/berylsim.log")
        running.withLock { $0.simPID = sim }
        guard eventually(.seconds(10), { FileManager.default.fileExists(atPath: self.simDir + "/control.sock") }) else {
            throw FaultLabError.setup("berylsim did not start: \(tail(root + "/berylsim.log"))")
        }
        try writeManifests()
        for side in Side.allCases {
            let paths = paths(side)
            _ = try StackControl.up(paths: paths, transport: "unix:\(simDir)/controller-\(side.rawValue).sock", logLevel: .info,
                                    managerdArguments: ["--apps-dir", "\(root)/\(side)/apps"])
            for directory in [paths.runtimeDir, paths.logDir] { chmod(directory, 0o755) }
        }
        let address = try controllerAddress(.peripheral)
        running.withLock { $0.peripheralAddress = address }
        try launch(Self.thermostatID, on: .peripheral)
        guard eventually(.seconds(20), { self.thermostatEvents().contains { $0["event"] as? String == "advertising" && $0["error"] is NSNull } }) else {
            throw FaultLabError.setup("the thermostat did not advertise: \(tail(thermostatLog))")
        }
        // Bonded before the workload starts, so that a torn bond would show.
        let paired = try runTool("beryl", ["pair", "--peer", peripheralAddress, "--auto-accept", "--timeout", "30", "--json",
                                           "--runtime-dir", paths(.central).runtimeDir])
        guard paired.status == 0 else { throw FaultLabError.setup("pairing failed: \(paired.stdout) \(paired.stderr)") }
        guard bondCount(.central) == 1, bondCount(.peripheral) == 1 else { throw FaultLabError.setup("no bond after pairing") }

        try launch(Self.doorlockID, on: .central)
        guard eventually(.seconds(30), { self.notificationCount() >= 2 }) else {
            throw FaultLabError.setup("the doorlock app took no notifications: \(tail(doorlockLog))")
        }
        let identifier = doorlockEvents().last { $0["event"] as? String == "didConnect" }?["peripheral"] as? String ?? ""
        running.withLock { $0.thermostatIdentifier = identifier }
    }

    public func stop() {
        if let interruption = running.withLock({ running in defer { running.interruption = nil }; return running.interruption }) {
            Interruption.remove(interruption)
        }
        for side in Side.allCases {
            _ = try? runTool("beryl", ["app", "quit", Self.doorlockID, "--runtime-dir", paths(side).runtimeDir])
            _ = try? runTool("beryl", ["app", "quit", Self.thermostatID, "--runtime-dir", paths(side).runtimeDir])
            _ = try? StackControl.down(paths: paths(side))
        }
        let sim = simPID
        if sim > 0 {
            kill(sim, SIGTERM)
            try? StackControl.waitForExit(sim, timeout: .seconds(5))
            if ProcessStats.isAlive(pid: sim) { kill(sim, SIGKILL) }
            _ = Spawn.reap(sim)
        }
    }

    public func removeScratch() { try? FileManager.default.removeItem(atPath: root) }

    private func writeManifests() throws {
        let manifests: [(Side, [String: Any])] = [
            (.central, ["id": Self.doorlockID, "user": appUser, "backgroundModes": ["bluetooth-central"],
                        "launch": ["command": [Executables.path("doorlock"), "--service", Self.thermostatService,
                                               "--characteristic", "2A6E", "--log", doorlockLog]]]),
            (.peripheral, ["id": Self.thermostatID, "user": appUser, "backgroundModes": ["bluetooth-peripheral"],
                           "launch": ["command": [Executables.path("thermostat"), "--restore", "--tick", "0.2", "--json"]]]),
        ]
        _ = FileManager.default.createFile(atPath: doorlockLog, contents: nil)
        chmod(doorlockLog, 0o666)
        for (side, manifest) in manifests {
            let directory = "\(root)/\(side)/apps"
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            let file = "\(directory)/\(manifest["id"]!).json"
            try JSONSerialization.data(withJSONObject: manifest).write(to: URL(fileURLWithPath: file))
            chmod(file, 0o644)
        }
    }

    /// Launched as a relaunch would be, then brought to the foreground as a user opening it would: a launched app
    /// starts in the background, where scans and advertising are slow (iOS's 1.28 s / 30 ms scan finds a 1 s
    /// advertiser in tens of seconds).
    func launch(_ app: String, on side: Side) throws {
        let launched = try runTool("beryl", ["app", "launch", app, "--runtime-dir", paths(side).runtimeDir])
        guard launched.status == 0 else { throw FaultLabError.setup("cannot launch \(app): \(launched.stderr)") }
        _ = try runTool("beryl", ["app", "state", app, "foreground", "--runtime-dir", paths(side).runtimeDir])
    }

    // MARK: What the world looks like

    func beryl(_ arguments: [String], on side: Side) -> ToolRun {
        (try? runTool("beryl", arguments + ["--runtime-dir", paths(side).runtimeDir])) ?? ToolRun(status: -1, stdout: "", stderr: "cannot run beryl")
    }

    func json(_ text: String) -> [String: Any]? { try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] }

    func controllerAddress(_ side: Side) throws -> String {
        guard let address = (json(beryl(["status", "--json"], on: side).stdout)?["controller"] as? [String: Any])?["address"] as? String else {
            throw FaultLabError.setup("no controller address for the \(side) stack")
        }
        return address
    }

    func bondCount(_ side: Side) -> Int? {
        (json(beryl(["bonds", "list", "--json"], on: side).stdout)?["bonds"] as? [Any])?.count
    }

    func app(_ id: String, on side: Side) -> [String: Any]? {
        (json(beryl(["app", "list", "--json"], on: side).stdout)?["apps"] as? [[String: Any]])?.first { $0["id"] as? String == id }
    }

    func appPIDs(_ id: String, on side: Side) -> [Int32] { ((app(id, on: side)?["pids"] as? [Int]) ?? []).map(Int32.init) }

    /// The daemons' pids on one side, by name (nil: not answering).
    func daemonPIDs(_ side: Side) -> [String: Int32] {
        var pids: [String: Int32] = [:]
        for name in StackProbe.daemonNames {
            if let status = StackProbe.status(at: paths(side).socket(name), timeout: .seconds(1)) { pids[name] = status.pid }
        }
        return pids
    }

    func sim(_ arguments: [String]) -> ToolRun {
        (try? runTool("beryl", ["sim"] + arguments + ["--dir", simDir])) ?? ToolRun(status: -1, stdout: "", stderr: "cannot run beryl sim")
    }

    /// Links on the air between the two stacks' controllers.
    func airLinks() -> Int {
        let links = (json(sim(["list", "--json"]).stdout)?["links"] as? [[String: Any]]) ?? []
        return links.filter { Set([$0["central"] as? Int ?? 0, $0["peripheral"] as? Int ?? 0]) == [0, 1] }.count
    }

    func read(_ path: String) -> String { (try? String(contentsOfFile: path, encoding: .utf8)) ?? "" }

    func tail(_ path: String, lines: Int = 15) -> String { read(path).split(separator: "\n").suffix(lines).joined(separator: "\n") }

    func doorlockEvents() -> [[String: Any]] { events(in: doorlockLog) }

    /// A log of JSON lines, as both apps write theirs.
    func events(in log: String) -> [[String: Any]] { JSONLines.events(inFile: log) }

    /// The values `beryl gatt … read --json` read, as hex.
    func readValues(_ output: String) -> [String] { JSONLines.events("read", in: output).compactMap { $0["value"] as? String } }

    /// Temperatures the doorlock app has taken (notifications that reached it, over all its launches).
    func notificationCount() -> Int {
        doorlockEvents().filter { $0["event"] as? String == "didUpdateValueFor" && ($0["error"] as? String ?? "x").isEmpty
            && !($0["value"] as? String ?? "").isEmpty }.count
    }

    /// What the thermostat reported (it runs with --json), over all its launches.
    func thermostatEvents() -> [[String: Any]] { events(in: thermostatLog) }

    /// Setpoint writes of `tenths` the thermostat applied.
    func setpointsApplied(_ tenths: Int) -> Int {
        thermostatEvents().filter { $0["event"] as? String == "setpointWritten" && $0["tenths"] as? Int == tenths }.count
    }

    /// Times the thermostat's stream found its transmit queue full (once per subscription).
    func streamHoldBacks() -> Int { thermostatEvents().filter { $0["event"] as? String == "streamHeldBack" }.count }
}

public enum FaultLabError: Error, CustomStringConvertible {
    case setup(String)
    public var description: String {
        switch self {
        case .setup(let reason): "fault lab setup: \(reason)"
        }
    }
}
