import BerylCore
import BerylDaemonKit
import BerylIPC
import BerylSupervisor
import Foundation

public struct IPCBenchmarkResult: Codable, Sendable {
    public var roundTrips: Int
    public var p50Microseconds: Double
    public var p99Microseconds: Double
    public var pipelinedMessagesPerSecond: Double
    public var pipelineWindow: Int
    public var idleRSSBytes: [String: UInt64]
    public var idlePSSBytes: [String: UInt64]
    /// The three daemons' PSS together: one stack's share of the board's memory.
    public var idlePSSPerStackBytes: UInt64
    /// #52's goals for a Pi Zero 2 W class board: a stack's PSS, and each daemon's RSS.
    public var idlePSSPerStackGoalBytes: UInt64 = IPCBenchmark.idlePSSPerStackGoal
    public var idleRSSEachGoalBytes: UInt64 = IPCBenchmark.idleRSSEachGoal
}

/// `beryl bench ipc`: starts the three daemons in a scratch directory and measures round trips to managerd.
public enum IPCBenchmark {
    public static let idlePSSPerStackGoal: UInt64 = 12 << 20
    public static let idleRSSEachGoal: UInt64 = 12 << 20

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
            pipelineWindow: window, idleRSSBytes: rss, idlePSSBytes: pss, idlePSSPerStackBytes: pss.values.reduce(0, +))
    }

    static func microseconds(_ duration: Duration) -> Double { seconds(duration) * 1_000_000 }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}

