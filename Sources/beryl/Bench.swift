import ArgumentParser
import BerylStack
import Foundation

struct Bench: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run benchmarks and print their figures.",
        subcommands: [BenchIPC.self])
}

struct BenchIPC: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ipc",
        abstract: "IPC round-trip latency and throughput to managerd, and each daemon's idle memory.")

    @Option(help: "Sequential round trips to time.")
    var roundTrips: Int = 5000

    @Option(help: "Seconds of pipelined traffic.")
    var seconds: Double = 2

    @Flag(help: "Print JSON.")
    var json = false

    func validate() throws {
        guard roundTrips >= 100 else { throw ValidationError("--round-trips must be at least 100") }
        guard seconds > 0, seconds <= 60 else { throw ValidationError("--seconds must be in (0, 60]") }
    }

    func run() throws {
        let result: IPCBenchmarkResult
        do {
            result = try IPCBenchmark.run(roundTrips: roundTrips, pipelineSeconds: seconds)
        } catch {
            throw Output.fail("benchmark failed: \(error)")
        }
        if json { print(Output.json(result)); return }
        print("IPC (SOCK_SEQPACKET, 32-byte Ping to managerd, separate processes)")
        print(String(format: "  round trip   p50 %.1f µs   p99 %.1f µs   (%d sequential)", result.p50Microseconds,
                     result.p99Microseconds, result.roundTrips))
        print(String(format: "  pipelined    %.0f messages/s   (window %d)", result.pipelinedMessagesPerSecond, result.pipelineWindow))
        for name in StackProbe.daemonNames {
            let rss = result.idleRSSBytes[name].map { "\($0 / 1024) KiB" } ?? "-"
            let pss = result.idlePSSBytes[name].map { "\($0 / 1024) KiB" } ?? "-"
            print("  idle memory  \(name.padding(toLength: 9, withPad: " ", startingAt: 0)) RSS \(rss)   PSS \(pss)")
        }
    }
}
