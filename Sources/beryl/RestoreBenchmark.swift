import ArgumentParser
import BerylDaemonKit
import BerylIPC
import BerylSupervisor
import Foundation
import Synchronization

/// `beryl bench restore`: the door-lock story on berylsim, timed. For each round the app is killed, the lock leaves
/// range and comes back; the figure is from the link coming up (managerd reconnecting the preserved request) to
/// willRestoreState in the relaunched app. Then managerd is killed -9 and timed until it serves apps again.
struct BenchRestore: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "restore",
        abstract: "Time restoration: reconnection to willRestoreState in a relaunched app, and managerd kill -9 to serving apps again.")

    @Option(help: "Rounds of each measurement.")
    var rounds: Int = 3

    @Flag(help: "Print JSON.")
    var json = false

    func validate() throws {
        guard (1...50).contains(rounds) else { throw ValidationError("--rounds must be from 1 to 50") }
    }

    func run() throws {
        let figures: RestoreFigures
        do { figures = try RestoreBenchmark(rounds: rounds).run() } catch { throw Output.fail("benchmark failed: \(error)") }
        if json { return print(Output.json(figures)) }
        func describe(_ values: [Double]) -> String {
            let sorted = values.sorted()
            return String(format: "median %.0f ms  (min %.0f, max %.0f, %d rounds)", sorted[sorted.count / 2], sorted.first ?? 0, sorted.last ?? 0, sorted.count)
        }
        print("Restoration on berylsim (debug or release as built; the app is examples' doorlock, relaunched by managerd)")
        print("  link up → willRestoreState in the relaunched app   \(describe(figures.reconnectToRestoreMilliseconds))")
        print("  link up → first read answered in the relaunched app \(describe(figures.reconnectToReadMilliseconds))")
        print("  managerd kill -9 → poweredOn to a new app session  \(describe(figures.managerdRestartMilliseconds))")
    }
}

struct RestoreFigures: Codable {
    var reconnectToRestoreMilliseconds: [Double] = []
    var reconnectToReadMilliseconds: [Double] = []
    var managerdRestartMilliseconds: [Double] = []
}

struct RestoreBenchmark {
    enum Failure: Error, CustomStringConvertible {
        case timedOut(String)
        var description: String { if case .timedOut(let what) = self { "timed out waiting for \(what)" } else { "" } }
    }

    let rounds: Int
    let root: String

    init(rounds: Int) throws {
        self.rounds = rounds
        root = try Scratch.makeDirectory(prefix: "beryl-bench-restore", openToApps: true)
    }

    private var central: DaemonPaths { DaemonPaths(runtimeDir: root + "/run0", stateDir: root + "/state0") }
    private var lockStack: DaemonPaths { DaemonPaths(runtimeDir: root + "/run1", stateDir: root + "/state1") }
    private var log: String { root + "/doorlock.log" }

    private func until(_ what: String, _ seconds: Double = 30, _ condition: () -> Bool) throws {
        guard eventually(.milliseconds(Int(seconds * 1000)), condition) else { throw Failure.timedOut(what) }
    }

    /// The app's JSON-line events.
    private func events() -> [[String: Any]] { JSONLines.events(inFile: log) }

    private func manager(_ build: (inout Beryl_Ipc_V1_ManagerRequest) -> Void) -> Response? {
        var request = Request()
        build(&request.manager)
        return try? IPCClient(path: central.socket("managerd")).call(request, timeout: .seconds(2))
    }

    private var appPIDs: [Int32] { manager { $0.listApps = .init() }?.manager.apps.apps.first { $0.id == "com.example.doorlock" }?.pids ?? [] }
    private var connected: Bool { !(manager { $0.retrieveConnected = .init() }?.manager.peripherals.peripherals.isEmpty ?? true) }

    private func sim(_ arguments: [String]) throws {
        let run = try runTool("beryl", ["sim"] + arguments + ["--dir", root + "/sim"])
        guard run.status == 0 else { throw Failure.timedOut("beryl sim \(arguments.joined(separator: " ")): \(run.stderr)") }
    }

    func run() throws -> RestoreFigures {
        var processes: [Int32] = []
        defer {
            _ = try? StackControl.down(paths: central)
            _ = try? StackControl.down(paths: lockStack)
            for pid in processes.reversed() { kill(pid, SIGTERM); _ = Spawn.reap(pid) }
            try? FileManager.default.removeItem(atPath: root)
        }
        processes.append(try Spawn.start([Executables.path("berylsim"), "--dir", root + "/sim", "--controllers", "2", "--log-level", "warning"], logPath: root + "/sim.log"))
        try until("berylsim") { FileManager.default.fileExists(atPath: root + "/sim/control.sock") }

        // The app's manifest, run as nobody when this runs as root (apps never run as root).
        try FileManager.default.createDirectory(atPath: root + "/apps", withIntermediateDirectories: true)
        let user = Spawn.unprivilegedUser
        let manifest: [String: Any] = ["id": "com.example.doorlock", "user": user, "backgroundModes": ["bluetooth-central"],
                                       "launch": ["command": [Executables.path("doorlock"), "--service", "D00D0001-0000-1000-8000-00805F9B34FB",
                                                              "--characteristic", "D00D0004-0000-1000-8000-00805F9B34FB", "--log", log]]]
        try JSONSerialization.data(withJSONObject: manifest).write(to: URL(fileURLWithPath: root + "/apps/doorlock.json"))
        chmod(root + "/apps/doorlock.json", 0o644)
        guard FileManager.default.createFile(atPath: log, contents: nil) else { throw CocoaError(.fileWriteUnknown) }
        chmod(log, 0o666)
        let lock = #"{"localName": "Beryl Lock", "advertise": ["D00D0001-0000-1000-8000-00805F9B34FB"], "services": [{"uuid": "D00D0001-0000-1000-8000-00805F9B34FB", "characteristics": [{"uuid": "D00D0004-0000-1000-8000-00805F9B34FB", "properties": ["read", "notify"], "value": "6c6f636b6564"}]}]}"#
        try Data(lock.utf8).write(to: URL(fileURLWithPath: root + "/lock.json"))

        _ = try StackControl.up(paths: central, transport: "unix:\(root)/sim/controller-0.sock", logLevel: .info,
                                managerdArguments: ["--apps-dir", root + "/apps"])
        _ = try StackControl.up(paths: lockStack, transport: "unix:\(root)/sim/controller-1.sock", logLevel: .warning)
        for directory in [central.runtimeDir, central.logDir] { chmod(directory, 0o755) }
        processes.append(try Spawn.start([Executables.path("beryl"), "serve", root + "/lock.json", "--json", "--runtime-dir", lockStack.runtimeDir],
                                         logPath: root + "/serve.log"))
        try until("the lock advertising") { !JSONLines.events("advertising", inFile: root + "/serve.log").isEmpty }
        _ = manager { $0.launchApp.appID = "com.example.doorlock" }
        try until("the app's first read") { events().contains { $0["event"] as? String == "didUpdateValueFor" } }

        // The start of the figure is managerd's connection event for the lock's link, heard by a session of our own
        // (registerForConnectionEvents), not a line of its log.
        let links = try LinkEventWatcher(socket: central.socket("managerd"))
        defer { links.stop() }
        var figures = RestoreFigures()
        for _ in 0..<rounds {
            for pid in appPIDs { kill(pid, SIGKILL) }
            try until("the app to go") { appPIDs.isEmpty }
            try sim(["range", "1", "out"])
            try until("the link to drop") { !connected }
            let seen = events().count
            links.forget()
            try sim(["range", "1", "in"])
            try until("the link to come back", 60) { connected }
            try until("willRestoreState") { events().dropFirst(seen).contains { $0["event"] as? String == "willRestoreState" } }
            try until("the relaunched app's read") { events().dropFirst(seen).contains { $0["event"] as? String == "didUpdateValueFor" } }
            let after = events().dropFirst(seen)
            try until("managerd's connection event") { links.lastConnected != nil }
            let linkUp = links.lastConnected ?? 0
            if let restored = after.first(where: { $0["event"] as? String == "willRestoreState" })?["time"] as? Double {
                figures.reconnectToRestoreMilliseconds.append(max(0, restored - linkUp) * 1000)
            }
            if let read = after.first(where: { $0["event"] as? String == "didUpdateValueFor" })?["time"] as? Double {
                figures.reconnectToReadMilliseconds.append(max(0, read - linkUp) * 1000)
            }
        }
        for _ in 0..<rounds {
            guard let text = try? String(contentsOfFile: central.pidFile("managerd"), encoding: .utf8), let pid = Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)) else {
                throw Failure.timedOut("managerd's pid file")
            }
            let killed = ContinuousClock.now
            kill(pid, SIGKILL)
            try until("managerd back", 30) {
                guard let text = try? String(contentsOfFile: central.pidFile("managerd"), encoding: .utf8), Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)) != pid else { return false }
                return manager { $0.hello = .init() }?.manager.welcome.state == .poweredOn
            }
            figures.managerdRestartMilliseconds.append(Double((ContinuousClock.now - killed) / .microseconds(1)) / 1000)
        }
        _ = manager { $0.stopApp = .with { $0.appID = "com.example.doorlock"; $0.userQuit = true } }
        return figures
    }
}

/// A manager session of the benchmark's own that registered for connection events (every link): it keeps when the
/// last peerConnected arrived, read on a thread of its own so the time is the event's, not the next poll's.
final class LinkEventWatcher: Sendable {
    enum Failure: Error { case notRegistered(IPCClientError?) }

    private let connectedAt = Mutex<Double?>(nil)
    private let registered = Mutex<Result<Void, IPCClientError>?>(nil)
    private let stopping = Atomic<Bool>(false)

    /// Returns once the session is registered (the client is made on the watching thread, which alone uses it).
    init(socket: String) throws {
        Thread.detachNewThread { [self] in watch(socket) }
        guard eventually(.seconds(5), { registered.withLock { $0 != nil } }) else { throw Failure.notRegistered(nil) }
        if case .failure(let error)? = registered.withLock({ $0 }) { throw Failure.notRegistered(error) }
    }

    var lastConnected: Double? { connectedAt.withLock { $0 } }

    func forget() { connectedAt.withLock { $0 = nil } }

    func stop() { stopping.store(true, ordering: .relaxed) }

    private func watch(_ socket: String) {
        let client: IPCClient
        do throws(IPCClientError) {
            client = try IPCClient(path: socket)
            _ = try client.call(.with { $0.manager.hello = .init() })
            _ = try client.call(.with { $0.manager.registerConnectionEvents = .init() })
            registered.withLock { $0 = .success(()) }
        } catch {
            registered.withLock { $0 = .failure(error) }
            return
        }
        while !stopping.load(ordering: .relaxed) {
            do throws(IPCClientError) {
                let envelope = try client.receive(timeout: .milliseconds(200))
                if case .event(let event)? = envelope.body, case .connectionEvent(let link)? = event.manager.kind, link.kind == .peerConnected {
                    let now = Date().timeIntervalSince1970
                    connectedAt.withLock { $0 = now }
                }
            } catch .timedOut {
                continue
            } catch {
                return  // managerd went (the restart rounds kill it): nothing more to hear
            }
        }
    }
}
