import BerylCore
import BerylDaemonKit
import BerylIPC
import Foundation

public enum StackError: Error, CustomStringConvertible {
    case alreadyRunning(String)
    case supervisorExited(ExitReason, log: String)
    case notReady(after: Duration, log: String)
    case stopTimedOut(pid: Int32)
    case controllerFailed(state: String, detail: String)
    case controllerNotReady(after: Duration, state: String, detail: String)

    public var description: String {
        switch self {
        case .alreadyRunning(let dir): "a stack is already running in \(dir) (beryl down --runtime-dir \(dir) stops it)"
        case .supervisorExited(let reason, let log): "the supervisor exited (\(reason)) before managerd answered:\n\(log)"
        case .notReady(let after, let log): "managerd did not answer within \(after):\n\(log)"
        case .stopTimedOut(let pid): "the supervisor (pid \(pid)) did not stop in time"
        case .controllerFailed(let state, let detail): "the controller is \(state): \(detail); the stack was stopped"
        case .controllerNotReady(let after, let state, let detail):
            "the controller was not poweredOn after \(after) (it is \(state)\(detail.isEmpty ? "" : ": \(detail)")); the stack keeps trying (beryl down stops it)"
        }
    }
}

/// `beryl up` and `beryl down`: start a supervised stack in the background and stop it again.
public enum StackControl {
    /// `attdArguments` carry the pairing settings (`--io-capability`, `--auto-accept`, ...) through to attd.
    public static func daemons(paths: DaemonPaths, transport: String, profile: String = "none", logLevel: LogLevel,
                               attdArguments: [String] = [], managerdArguments: [String] = [], pandoraPort: Int? = nil) -> [SupervisedDaemon] {
        let common = ["--runtime-dir", paths.runtimeDir, "--state-dir", paths.stateDir, "--log-level", logLevel.label]
        let daemons = [
            SupervisedDaemon(name: "hcid", arguments: [Executables.path("hcid")] + common + ["--transport", transport, "--profile", profile]),
            SupervisedDaemon(name: "attd", arguments: [Executables.path("attd")] + common + attdArguments),
            SupervisedDaemon(name: "managerd", arguments: [Executables.path("managerd")] + common + managerdArguments),
        ]
        // The lab's gRPC server, a client of managerd like any app, started last.
        guard let pandoraPort else { return daemons }
        return daemons + [SupervisedDaemon(name: "beryl-pandora", arguments: [Executables.path("beryl-pandora"), "--runtime-dir", paths.runtimeDir,
                                                                               "--port", String(pandoraPort)])]
    }

    /// Whether managerd tells apps poweredOn: the controller is on and attd is attached.
    static func managerReady(_ socket: String) -> Bool {
        var hello = Request()
        hello.manager.hello = .init()
        return (try? IPCClient(path: socket).call(hello, timeout: .seconds(1)).manager.welcome.state) == .poweredOn
    }

    /// Starts `beryl supervise` detached and returns once managerd answers and the controller is poweredOn.
    /// A controller that cannot work here (unsupported, unauthorized) stops the stack and says why.
    public static func up(paths: DaemonPaths, transport: String, profile: String = "none", logLevel: LogLevel,
                          attdArguments: [String] = [], managerdArguments: [String] = [], pandoraPort: Int? = nil,
                          timeout: Duration = .seconds(20)) throws -> StackReport {
        try paths.createDirectories()
        try FileManager.default.createDirectory(atPath: paths.logDir, withIntermediateDirectories: true)
        if StackProbe.status(at: paths.socket(Supervisor.socketName)) != nil {
            throw StackError.alreadyRunning(paths.runtimeDir)
        }
        let logPath = paths.logFile(Supervisor.socketName)
        let arguments = [Executables.path("beryl"), "supervise", "--runtime-dir", paths.runtimeDir,
                         "--state-dir", paths.stateDir, "--transport", transport, "--profile", profile, "--log-level", logLevel.label]
            + attdArguments.flatMap { ["--attd-arg", $0] } + managerdArguments.flatMap { ["--managerd-arg", $0] }
            + (pandoraPort.map { ["--pandora-port", String($0)] } ?? [])
        let pid = try Spawn.start(arguments, newSession: true, logPath: logPath)
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        while clock.now < deadline {
            if let (_, reason) = Spawn.reap(pid) {
                throw StackError.supervisorExited(reason, log: tail(of: logPath))
            }
            if ping(paths.socket("managerd")), let info = StackProbe.controllerInfo(at: paths.socket("hcid")) {
                switch info.state {
                case .poweredOn where managerReady(paths.socket("managerd")):
                    return StackProbe.report(paths: paths)
                case .unsupported, .unauthorized:
                    _ = try? down(paths: paths)
                    throw StackError.controllerFailed(state: StackProbe.controllerStateName(info.state), detail: info.detail)
                default:
                    break
                }
            }
            usleep(50_000)
        }
        if let info = StackProbe.controllerInfo(at: paths.socket("hcid")) {
            throw StackError.controllerNotReady(after: timeout, state: StackProbe.controllerStateName(info.state), detail: info.detail)
        }
        throw StackError.notReady(after: timeout, log: tail(of: logPath))
    }

    /// Stops the supervised stack (or lone daemons found by their sockets) and waits until they are gone.
    /// Returns the pids it stopped; an empty list means nothing was running.
    @discardableResult
    public static func down(paths: DaemonPaths, timeout: Duration = .seconds(15)) throws -> [Int32] {
        var stopped: [Int32] = []
        if let supervisor = StackProbe.status(at: paths.socket(Supervisor.socketName)) {
            kill(supervisor.pid, SIGTERM)
            try waitForExit(supervisor.pid, timeout: timeout)
            stopped.append(supervisor.pid)
        }
        for name in StackProbe.daemonNames {
            guard let status = StackProbe.status(at: paths.socket(name)) else { continue }
            kill(status.pid, SIGTERM)
            try waitForExit(status.pid, timeout: timeout)
            stopped.append(status.pid)
        }
        return stopped
    }

    public static func ping(_ path: String) -> Bool {
        guard let client = try? IPCClient(path: path) else { return false }
        var request = Request()
        request.ping = Beryl_Ipc_V1_Ping()
        return (try? client.call(request, timeout: .seconds(1))) != nil
    }

    public static func waitForExit(_ pid: Int32, timeout: Duration) throws {
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        while ProcessStats.isAlive(pid: pid) {
            _ = Spawn.reap(pid)
            guard clock.now < deadline else { throw StackError.stopTimedOut(pid: pid) }
            usleep(20_000)
        }
    }

    static func tail(of path: String, lines: Int = 20) -> String {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return "(no log at \(path))" }
        return text.split(separator: "\n").suffix(lines).joined(separator: "\n")
    }
}
