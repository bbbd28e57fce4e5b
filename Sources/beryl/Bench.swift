import ArgumentParser
import BerylBench
import BerylCore
import BerylDaemonKit
import BerylSim
import BerylSupervisor
import Foundation

struct Bench: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run benchmarks and print their figures.",
        subcommands: [BenchIPC.self, BenchSim.self, BenchHCI.self, BenchGATT.self, BenchRestore.self, BenchAll.self])
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

struct BenchSim: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sim",
        abstract: "Simulated link throughput, with and without the air-time model, against the radio's physical limit.")

    @Option(help: "Simulated seconds of saturated traffic per case.")
    var seconds: Int = 5

    @Flag(help: "Print JSON.")
    var json = false

    struct Case: Codable {
        var phy: Int
        var octets: Int
        var intervalMs: Double
        var limitBytesPerSecond: Double
        var airTimeBytesPerSecond: Double
        var unlimitedBytesPerSecond: Double
        var ratio: Double
    }

    func validate() throws {
        guard (1...120).contains(seconds) else { throw ValidationError("--seconds must be from 1 to 120") }
    }

    func run() throws {
        let cases: [(phy: Int, octets: Int, intervalUnits: UInt16)] = [(2, 251, 6), (1, 251, 6), (1, 27, 24), (2, 251, 24)]
        var results: [Case] = []
        for item in cases {
            let interval = Duration.microseconds(Int64(item.intervalUnits) * 1250)
            var modelled = SimConfig()
            modelled.airTime = true
            let airTime = LinkThroughput.measure(config: modelled, phy: item.phy, octets: item.octets,
                                                 intervalUnits: item.intervalUnits, duration: .seconds(seconds))
            let unlimited = LinkThroughput.measure(config: SimConfig(), phy: item.phy, octets: item.octets,
                                                   intervalUnits: item.intervalUnits, duration: .seconds(seconds))
            let limit = AirTime.maximumThroughput(interval: interval, payload: item.octets, phy: item.phy, encrypted: false)
            results.append(Case(phy: item.phy, octets: item.octets, intervalMs: Double(item.intervalUnits) * 1.25,
                                limitBytesPerSecond: limit, airTimeBytesPerSecond: airTime, unlimitedBytesPerSecond: unlimited,
                                ratio: airTime / limit))
        }
        if json { print(Output.json(results)); return }
        print("Simulated link throughput, central → peripheral, link-layer payload, \(seconds) s of simulated time per case")
        print("  PHY  octets  interval   physical limit   air-time model      ratio   no model       bound by")
        for r in results {
            // Credits come back once per connection event, so the controller's buffers cap a long interval first.
            let bound = r.ratio > 0.95 ? "air time" : "8 ACL buffers per event"
            print(String(format: "  %dM   %5d   %5.2f ms   %9.0f B/s    %9.0f B/s   %6.3f   %9.0f B/s   %@", r.phy, r.octets, r.intervalMs,
                         r.limitBytesPerSecond, r.airTimeBytesPerSecond, r.ratio, r.unlimitedBytesPerSecond, bound))
        }
        print("""
          The limit: each exchange is one data PDU and its empty acknowledgement, each followed by T_IFS (150 µs);
          a PDU is preamble (1 octet on 1M, 2 on 2M) + access address 4 + header 2 + payload + CRC 3 octets at
          8 µs/octet (1M) or 4 µs/octet (2M) — Core Vol 6 Part B §2.1, §4.1.1. Exchanges per event = ⌊interval / exchange⌋;
          limit = exchanges × payload / interval. 2M, 251 octets: 1048 + 150 + 44 + 150 = 1392 µs, 5 per 7.5 ms = 167,333 B/s.
          Without the model a connection event carries whatever the host has buffered (8 × 251 bytes here).
        """)
    }
}

struct BenchHCI: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "hci",
        abstract: "HCI command round trips per second and ACL throughput through hcid against berylsim, and hcid's CPU per 10,000 ACL packets.")

    @Option(help: "Seconds per measurement.")
    var seconds: Double = 2

    @Flag(help: "Print JSON.")
    var json = false

    func validate() throws {
        guard seconds > 0, seconds <= 60 else { throw ValidationError("--seconds must be in (0, 60]") }
    }

    func run() throws {
        let result: HCIBenchmarkResult
        do {
            result = try HCIBenchmark.run(seconds: seconds)
        } catch {
            throw Output.fail("benchmark failed: \(error)")
        }
        if json { print(Output.json(result)); return }
        print("HCI through hcid (separate processes, berylsim controllers)")
        print(String(format: "  command round trips   %.0f /s   (LE Rand, one at a time)", result.commandRoundTripsPerSecond))
        print(String(format: "  ACL throughput        %.0f B/s   (%d-byte L2CAP PDUs, %d ACL packets)", result.aclBytesPerSecond,
                     result.aclPDUBytes, result.aclPackets))
        print(String(format: "  hcid CPU              %.1f ms per 10,000 ACL packets", result.hcidCPUMillisecondsPer10kACLPackets))
        print("  (\(result.note))")
    }
}

struct BenchGATT: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "gatt",
        abstract: "GATT notification throughput and read round trips between two Beryl stacks on berylsim, next to two Bumble hosts in the same run.")

    @Option(help: "Seconds of notifications per value size.")
    var seconds: Double = 2

    @Option(help: "Sequential reads to time.")
    var reads: Int = 300

    @Flag(help: "Skip the Bumble half.")
    var noBumble = false

    @Flag(help: "Also measure app to app, through managerd and the Beryl library on both sides, with the daemons' memory.")
    var apps = false

    @Flag(help: "Print JSON.")
    var json = false

    func validate() throws {
        guard seconds > 0, seconds <= 60 else { throw ValidationError("--seconds must be in (0, 60]") }
        guard (10...100_000).contains(reads) else { throw ValidationError("--reads must be from 10 to 100000") }
    }

    func run() throws {
        let result: GATTBenchmarkResult
        do {
            result = try GATTBenchmark.run(seconds: seconds, reads: reads, bumble: !noBumble)
        } catch {
            throw Output.fail("benchmark failed: \(error)")
        }
        var appFigures: GATTAppFigures?
        if apps {
            do { appFigures = try GATTAppBenchmark.run(seconds: seconds, reads: reads) } catch { throw Output.fail("benchmark failed: \(error)") }
        }
        if json {
            struct Both: Codable { var stacks: GATTBenchmarkResult; var apps: GATTAppFigures? }
            print(Output.json(Both(stacks: result, apps: appFigures)))
            return
        }
        print("GATT between two stacks (central subscribes; peripheral notifies as fast as it is allowed)")
        print("  value    Beryl on berylsim                 Bumble on Bumble controllers        Beryl / Bumble")
        for beryl in result.beryl {
            let bumble = result.bumble?.first { $0.valueBytes == beryl.valueBytes }
            let other = bumble.map { String(format: "%8.0f /s %10.0f B/s", $0.perSecond, $0.bytesPerSecond) } ?? "           -"
            let ratio = bumble.map { String(format: "%.2f", beryl.perSecond / max($0.perSecond, 1)) } ?? "-"
            print(String(format: "  %3d B   %8.0f /s %10.0f B/s   ", beryl.valueBytes, beryl.perSecond, beryl.bytesPerSecond) + "\(other)      \(ratio)")
        }
        let read = result.berylRead
        print(String(format: "  read round trip (20 B, %d reads)   Beryl p50 %.0f µs  p99 %.0f µs", read.count, read.p50Microseconds, read.p99Microseconds)
              + (result.bumbleRead.map { String(format: "   Bumble p50 %.0f µs  p99 %.0f µs   ratio p50 %.1f", $0.p50Microseconds, $0.p99Microseconds,
                                                read.p50Microseconds / max($0.p50Microseconds, 1)) } ?? ""))
        for (name, value) in result.cpuMillisecondsPer10kNotifications.sorted(by: { $0.key < $1.key }) {
            print(String(format: "  CPU per 10,000 notifications  %@  %.0f ms", name.padding(toLength: 16, withPad: " ", startingAt: 0), value))
        }
        print("  Beryl: \(result.note)")
        print("  Bumble: \(result.bumbleNote)")
        guard let appFigures else { return }
        print("App to app through managerd and the Beryl library (updateValue → didUpdateValueFor; readValue answered by the peripheral app)")
        for row in appFigures.notifications {
            let stack = result.beryl.first { $0.valueBytes == row.valueBytes }
            print(String(format: "  %3d B   %8.0f /s %10.0f B/s   (stack to stack %.0f /s, ratio %.2f)", row.valueBytes, row.perSecond, row.bytesPerSecond,
                         stack?.perSecond ?? 0, row.perSecond / max(stack?.perSecond ?? 1, 1)))
        }
        print(String(format: "  read round trip   p50 %.0f µs  p99 %.0f µs", appFigures.read.p50Microseconds, appFigures.read.p99Microseconds))
        for (name, values) in appFigures.memory.sorted(by: { $0.key < $1.key }) {
            print("  memory  \(name.padding(toLength: 24, withPad: " ", startingAt: 0)) idle \((values["idle"] ?? 0) / 1024) KiB   loaded \((values["loaded"] ?? 0) / 1024) KiB")
        }
    }
}

/// `beryl bench all`: every benchmark in one report, each in its own process, then the binaries' sizes.
struct BenchAll: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "all",
        abstract: "One report: IPC, HCI, simulated air time against the physical limit, GATT app to app next to Bumble, restoration, memory, CPU and binary sizes.",
        discussion: "Run from the repository so that the Bumble half finds .venv-interop; each part is `beryl bench PART`, run in turn.")

    @Flag(help: "Short runs of each part (a smoke test, not figures to quote).")
    var quick = false

    func run() throws {
        let parts: [(String, [String])] = [
            ("IPC", ["ipc"] + (quick ? ["--round-trips", "500", "--seconds", "0.5"] : [])),
            ("HCI through hcid", ["hci"] + (quick ? ["--seconds", "0.5"] : [])),
            ("Simulated air time", ["sim"] + (quick ? ["--seconds", "1"] : [])),
            ("GATT, stack to stack and app to app, next to Bumble", ["gatt", "--apps"] + (quick ? ["--seconds", "0.5", "--reads", "30"] : [])),
            ("Restoration", ["restore"] + (quick ? ["--rounds", "1"] : [])),
        ]
        var uname = utsname()
        Glibc.uname(&uname)
        let machine = withUnsafeBytes(of: uname.machine) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        print("Beryl \(Beryl.version) benchmark report, \(ISO8601DateFormatter().string(from: Date())), \(machine), "
              + "\(ProcessInfo.processInfo.activeProcessorCount) cores, \(Executables.directory().contains("release") ? "release" : "debug") build\(quick ? ", quick runs" : "")")
        var failed: [String] = []
        for (title, arguments) in parts {
            print("\n== \(title) (beryl bench \(arguments.joined(separator: " ")))")
            let run = try runTool("beryl", ["bench"] + arguments)
            print(run.stdout.trimmingCharacters(in: .newlines))
            if run.status != 0 {
                print("  FAILED (exit \(run.status)): \(run.stderr.trimmingCharacters(in: .whitespacesAndNewlines))")
                failed.append(title)
            }
        }
        print("\n== Binary sizes (\(Executables.directory()))")
        for name in ["hcid", "attd", "managerd", "beryl", "berylsim"] {
            let size = (try? FileManager.default.attributesOfItem(atPath: Executables.path(name))[.size] as? Int) ?? nil
            print("  \(name.padding(toLength: 9, withPad: " ", startingAt: 0)) \(size.map { String(format: "%.1f MiB", Double($0) / 1_048_576) } ?? "missing")")
        }
        if !failed.isEmpty { throw Output.fail("failed parts: \(failed.joined(separator: ", "))") }
    }
}
