import CBerylSys
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// What one hop between processes costs on this machine with no Beryl code in it: a 32-byte datagram to a bare echo
/// peer (cat, whose stdin and stdout are one end of a SEQPACKET socketpair) and back, measured in the same run as the
/// reads. A read crosses a process boundary at every hop, so on a machine whose idle CPUs wake slowly (a VM's halted
/// vCPUs) most of its time is wake-ups; on one CPU a hop is a context switch and what is left is the processes' work.
public struct CrossingFigures: Codable, Sendable {
    /// The two processes on two CPUs (nil on a machine with one).
    public var roundTripP50Microseconds: Double?
    public var roundTripP99Microseconds: Double?
    /// Both processes on one CPU.
    public var oneCPURoundTripP50Microseconds: Double
    public var oneCPURoundTripP99Microseconds: Double
    public var note: String
}

public enum ProcessCrossing {
    public static func measure(roundTrips: Int = 3000) throws -> CrossingFigures {
        // Left to the scheduler, the echo lands on either CPU from one run to the next: each placement is made, on the
        // CPUs this process may use.
        let allowed = cpus(of: getpid())
        guard let first = allowed.first else { throw BenchFailure("this process's CPU affinity could not be read") }
        let across = allowed.count > 1 ? try echoRoundTrips(roundTrips, cpus: (first, allowed[1])) : nil
        let pinned = try echoRoundTrips(roundTrips, cpus: (first, first))
        return CrossingFigures(roundTripP50Microseconds: across?.p50, roundTripP99Microseconds: across?.p99,
                               oneCPURoundTripP50Microseconds: pinned.p50, oneCPURoundTripP99Microseconds: pinned.p99,
                               note: "\(roundTrips) sequential 32-byte datagram round trips to /bin/cat on a SOCK_SEQPACKET socketpair")
    }

    /// Runs `body` with every thread of `pids` (and of this process) on one CPU, the first this process may use, then
    /// gives each process back the CPUs it had (so `taskset` around the whole bench holds).
    public static func onOneCPU<T>(_ pids: [Int32], _ body: () throws -> T) throws -> T {
        guard let cpu = cpus(of: getpid()).first else { throw BenchFailure("this process's CPU affinity could not be read") }
        return try pinned(Dictionary(uniqueKeysWithValues: Set(pids + [getpid()]).map { ($0, cpu) }), body)
    }

    /// The CPUs a process may run on.
    static func cpus(of pid: Int32) -> [Int32] {
        var cpus = [Int32](repeating: 0, count: 1024)
        let count = beryl_process_cpus(pid, &cpus, Int32(cpus.count))
        return count > 0 ? Array(cpus.prefix(Int(count))) : []
    }

    private static func pinned<T>(_ placement: [Int32: Int32], _ body: () throws -> T) throws -> T {
        let saved = Dictionary(uniqueKeysWithValues: placement.keys.map { ($0, cpus(of: $0)) })
        defer { for (pid, cpus) in saved where !cpus.isEmpty { _ = beryl_set_process_cpus(pid, cpus, Int32(cpus.count)) } }
        for (pid, cpu) in placement {
            var one = [cpu]
            let status = beryl_set_process_cpus(pid, &one, 1)
            guard status == 0 else { throw BenchFailure("cannot pin pid \(pid) to CPU \(cpu): \(String(cString: strerror(-status)))") }
        }
        return try body()
    }

    /// Round trips with this process on `cpus.0` and the echo on `cpus.1`.
    private static func echoRoundTrips(_ count: Int, cpus: (Int32, Int32)) throws -> (p50: Double, p99: Double) {
        var pair: [Int32] = [0, 0]
        guard socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0 else {
            throw BenchFailure("socketpair: \(String(cString: strerror(errno)))")
        }
        var open = true
        defer { if open { close(pair[0]) } }
        let arguments = ["/bin/cat"]
        var argv = arguments.map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        // dup2 in the child clears CLOEXEC on stdin and stdout; its copy of pair[1] closes at exec.
        let pid = argv.withUnsafeMutableBufferPointer { buffer in
            buffer.baseAddress!.withMemoryRebound(to: UnsafePointer<CChar>?.self, capacity: buffer.count) { beryl_spawn_on_socket($0, pair[1]) }
        }
        close(pair[1])
        guard pid > 0 else { throw BenchFailure("cannot start /bin/cat: \(String(cString: strerror(-pid)))") }
        defer {
            // End of input ends cat; SIGKILL in case it is stuck, before the wait.
            close(pair[0])
            open = false
            kill(pid, SIGKILL)
            var status: Int32 = 0
            waitpid(pid, &status, 0)
        }
        let time = { () throws -> [Double] in
            var message = [UInt8](repeating: 0xA5, count: 32)
            var samples: [Double] = []
            samples.reserveCapacity(count)
            let clock = ContinuousClock()
            for index in 0..<(count + 100) {
                let start = clock.now
                guard write(pair[0], &message, message.count) == message.count,
                      read(pair[0], &message, message.count) == message.count else { throw BenchFailure("the echo peer stopped answering") }
                if index >= 100 { samples.append(HCIBenchmark.durationSeconds(clock.now - start) * 1e6) }
            }
            return samples
        }
        return GATTReadLatency.percentiles(try pinned([getpid(): cpus.0, pid: cpus.1], time))
    }
}

extension GATTReadLatency {
    /// Reads not timed before each run of `timeReads`.
    public static let warmUpReads = 10

    /// Times reads as the processes are scheduled, then again with every process in `pids` on one CPU, with each
    /// process's CPU per read both times (warm-up reads counted in the CPU and the divisor). On a VM the first CPU
    /// figures include what waking another CPU costs the waker; on one CPU they are the processes' work.
    public static func measure(_ value: String, crossings: Int, pids: [String: Int32], _ timeReads: () throws -> [Double]) throws -> GATTReadLatency {
        var cpu = ProcessCPU(pids: pids)
        cpu.startWindow()
        var latency = GATTReadLatency(value: value, samples: try timeReads())
        let reads = Double(latency.count + warmUpReads)
        latency.cpuMicrosecondsPerRead = cpu.microsecondsSinceStart(per: reads)
        latency.processCrossings = crossings
        cpu.startWindow()
        // Best effort: where the processes cannot be pinned, the row has no one-CPU figures.
        guard let samples = try? ProcessCrossing.onOneCPU(Array(pids.values), timeReads) else { return latency }
        let pinned = GATTReadLatency(value: value, samples: samples)
        latency.oneCPUCPUMicrosecondsPerRead = cpu.microsecondsSinceStart(per: reads)
        latency.oneCPUP50Microseconds = pinned.p50Microseconds
        latency.oneCPUP99Microseconds = pinned.p99Microseconds
        return latency
    }
}
