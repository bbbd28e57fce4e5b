import BerylDaemonKit
import BerylIPC
import Foundation

/// A throwaway runtime and state directory with daemons started in it, stopped and removed afterwards.
public final class Scratch {
    public let root: String
    public let paths: DaemonPaths
    public private(set) var pids: [(String, Int32)] = []
    /// Kept after stopAll (a failed test's logs, sockets and databases), as BERYL_KEEP_SCRATCH=1 keeps every one.
    public var keep = false

    /// A new directory `/tmp/PREFIX-XXXXXX`. `openToApps` makes it 0755, so that apps launched as another user (never
    /// root) reach the runtime directories under it.
    public static func makeDirectory(prefix: String, openToApps: Bool = false) throws -> String {
        var template = Array("/tmp/\(prefix)-XXXXXX".utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: "/tmp/\(prefix)-XXXXXX"])
        }
        let root = String(cString: made)
        if openToApps { chmod(root, 0o755) }
        return root
    }

    public init() throws {
        root = try Scratch.makeDirectory(prefix: "beryl")
        paths = DaemonPaths(runtimeDir: root + "/run", stateDir: root + "/state")
        try paths.createDirectories()
        try FileManager.default.createDirectory(atPath: paths.logDir, withIntermediateDirectories: true)
    }

    /// Starts a daemon and waits until its socket answers.
    public func start(_ name: String, _ arguments: [String], socket: String? = nil) throws {
        let pid = try Spawn.start(arguments, logPath: paths.logFile(name))
        pids.append((name, pid))
        let path = socket ?? paths.socket(name)
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(10)
        while !StackControl.ping(path) {
            if let (_, reason) = Spawn.reap(pid) {
                throw StackError.supervisorExited(reason, log: StackControl.tail(of: paths.logFile(name)))
            }
            guard clock.now < deadline else { throw StackError.notReady(after: .seconds(10), log: StackControl.tail(of: paths.logFile(name))) }
            usleep(20_000)
        }
    }

    public func pid(of name: String) -> Int32? { pids.first { $0.0 == name }?.1 }

    public func stopAll() {
        for (_, pid) in pids.reversed() { kill(pid, SIGTERM) }
        for (_, pid) in pids { try? StackControl.waitForExit(pid, timeout: .seconds(5)) }
        for (_, pid) in pids where ProcessStats.isAlive(pid: pid) {
            kill(pid, SIGKILL)
            _ = Spawn.reap(pid)
        }
        pids.removeAll()
        if !keep, ProcessInfo.processInfo.environment["BERYL_KEEP_SCRATCH"] == nil { try? FileManager.default.removeItem(atPath: root) }
    }

    deinit { stopAll() }
}
