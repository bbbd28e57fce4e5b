import BerylCore
import BerylDaemonKit
import BerylEventLoop
import BerylIPC
import Foundation

/// One daemon the supervisor keeps running.
public struct SupervisedDaemon: Sendable {
    public var name: String
    public var arguments: [String]

    public init(name: String, arguments: [String]) {
        self.name = name
        self.arguments = arguments
    }
}

/// `beryl up`'s background process: starts hcid, attd and managerd in that order, restarts any that
/// dies with backoff, answers GetStatus on supervisor.sock, and on SIGTERM stops them all.
public final class Supervisor {
    final class Child {
        let spec: SupervisedDaemon
        var pid: Int32 = 0
        var state: Beryl_Ipc_V1_DaemonState = .stopped
        var restarts: UInt32 = 0
        var lastExit = ""
        var startedAt: Duration = .zero
        var backoff = RestartBackoff()
        var restartTimer: EventRegistration?

        init(spec: SupervisedDaemon) { self.spec = spec }
    }

    public static let socketName = "supervisor"
    private let host: DaemonHost
    private let children: [Child]
    private var stopping = false
    private var killTimer: EventRegistration?

    public init(paths: DaemonPaths, daemons: [SupervisedDaemon], logLevel: LogLevel) throws {
        host = try DaemonHost(name: Self.socketName, paths: paths, logLevel: logLevel)
        children = daemons.map(Child.init)
    }

    public func run() -> Int32 {
        do {
            try host.start()
            try FileManager.default.createDirectory(atPath: host.paths.logDir, withIntermediateDirectories: true)
            try host.loop.onSignal(SIGCHLD) { [unowned self] in self.reapChildren() }
        } catch {
            host.logger.error("cannot start: \(error)")
            return 1
        }
        host.decorateStatus = { [unowned self] status in
            status.children = self.children.map { child in
                var info = Beryl_Ipc_V1_ProcessInfo()
                info.name = child.spec.name
                info.pid = child.pid
                info.state = child.state
                info.restarts = child.restarts
                info.lastExit = child.lastExit
                return info
            }
        }
        // The loop must outlive the children: it reaps them and then stops.
        host.onTerminationSignal = { [unowned self] in self.stopChildren() }
        for child in children { launch(child) }
        return host.run()
    }

    private func launch(_ child: Child) {
        child.restartTimer = nil
        do {
            // Bound to this process: a supervisor killed outright takes its daemons with it rather than leave a stack
            // nobody restarts and `beryl up` cannot start again.
            child.pid = try Spawn.start(child.spec.arguments, logPath: host.paths.logFile(child.spec.name), diesWithParent: true)
            child.state = .running
            child.startedAt = host.loop.uptime
            host.logger.info("started \(child.spec.name) as pid \(child.pid)")
        } catch {
            host.logger.error("\(error)")
            child.pid = 0
            scheduleRestart(child, uptime: .zero)
        }
    }

    private func reapChildren() {
        while let (pid, exit) = Spawn.reap() {
            guard let child = children.first(where: { $0.pid == pid }) else { continue }
            child.lastExit = exit.description
            child.pid = 0
            if stopping {
                child.state = .stopped
                host.logger.info("\(child.spec.name) stopped (\(exit))")
                if children.allSatisfy({ $0.pid == 0 }) { finish() }
            } else {
                host.logger.warning("\(child.spec.name) died (\(exit)); restarting")
                scheduleRestart(child, uptime: host.loop.uptime - child.startedAt)
            }
        }
    }

    private func scheduleRestart(_ child: Child, uptime: Duration) {
        child.state = .restarting
        child.restarts += 1
        let delay = child.backoff.delay(afterRunning: uptime)
        child.restartTimer = try? host.loop.after(delay) { [unowned self, unowned child] in
            guard !self.stopping else { return }
            self.launch(child)
        }
    }

    private func stopChildren() {
        guard !stopping else { return }
        stopping = true
        host.logger.info("stopping the stack")
        for child in children {
            child.restartTimer?.cancel()
            child.restartTimer = nil
            if child.pid == 0 { child.state = .stopped }
        }
        // Reverse start order: the apps' daemon first, the controller's last.
        for child in children.reversed() where child.pid > 0 {
            child.state = .stopping
            kill(child.pid, SIGTERM)
        }
        if children.allSatisfy({ $0.pid == 0 }) { finish(); return }
        killTimer = try? host.loop.after(.seconds(5)) { [unowned self] in
            for child in self.children where child.pid > 0 {
                self.host.logger.warning("\(child.spec.name) ignored SIGTERM; killing it")
                kill(child.pid, SIGKILL)
            }
        }
    }

    private func finish() {
        killTimer?.cancel()
        host.stop()
    }
}
