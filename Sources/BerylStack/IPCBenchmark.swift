import BerylCore
import BerylDaemonKit
import BerylIPC
import Foundation

public struct IPCBenchmarkResult: Codable, Sendable {
    public var roundTrips: Int
    public var p50Microseconds: Double
    public var p99Microseconds: Double
    public var pipelinedMessagesPerSecond: Double
    public var pipelineWindow: Int
    public var idleRSSBytes: [String: UInt64]
    public var idlePSSBytes: [String: UInt64]
}

/// `beryl bench ipc`: starts the three daemons in a scratch directory and measures round trips to managerd.
public enum IPCBenchmark {
    public static func run(roundTrips: Int = 5000, pipelineSeconds: Double = 2, window: Int = 32) throws -> IPCBenchmarkResult {
        let scratch = try Scratch()
        defer { scratch.stopAll() }
        for name in StackProbe.daemonNames {
            var arguments = [Executables.path(name), "--runtime-dir", scratch.paths.runtimeDir, "--state-dir", scratch.paths.stateDir,
                             "--log-level", "warning"]
            if name == "hcid" { arguments += ["--transport", "unix:\(scratch.paths.runtimeDir)/no-controller.sock"] }
            try scratch.start(name, arguments)
        }
        let client = try IPCClient(path: scratch.paths.socket("managerd"))
        var ping = Request()
        ping.ping.payload = Data(repeating: 0xA5, count: 32)

        for _ in 0..<200 { _ = try client.call(ping) }
        let clock = ContinuousClock()
        var samples: [Duration] = []
        samples.reserveCapacity(roundTrips)
        for _ in 0..<roundTrips {
            let start = clock.now
            _ = try client.call(ping)
            samples.append(clock.now - start)
        }
        samples.sort()

        // Pipelined: keep `window` requests in flight and count answers for a fixed time.
        var inFlight = 0
        var answered = 0
        let start = clock.now
        let end = start + .milliseconds(Int(pipelineSeconds * 1000))
        while clock.now < end || inFlight > 0 {
            while inFlight < window && clock.now < end {
                try client.send(ping)
                inFlight += 1
            }
            _ = try client.receive()
            inFlight -= 1
            answered += 1
        }
        let elapsed = clock.now - start

        usleep(500_000)
        var rss: [String: UInt64] = [:]
        var pss: [String: UInt64] = [:]
        for (name, pid) in scratch.pids {
            rss[name] = ProcessStats.residentBytes(pid: pid)
            pss[name] = ProcessStats.proportionalBytes(pid: pid)
        }
        return IPCBenchmarkResult(
            roundTrips: roundTrips,
            p50Microseconds: microseconds(samples[samples.count / 2]),
            p99Microseconds: microseconds(samples[min(samples.count - 1, samples.count * 99 / 100)]),
            pipelinedMessagesPerSecond: Double(answered) / seconds(elapsed),
            pipelineWindow: window, idleRSSBytes: rss, idlePSSBytes: pss)
    }

    static func microseconds(_ duration: Duration) -> Double { seconds(duration) * 1_000_000 }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}

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
