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
        let largestRSS = result.idleRSSBytes.values.max() ?? 0
        print("  idle goals   PSS per stack \(result.idlePSSPerStackBytes / 1024) KiB of \(result.idlePSSPerStackGoalBytes / 1024) KiB"
              + (result.idlePSSPerStackBytes <= result.idlePSSPerStackGoalBytes ? " (met)" : " (over)")
              + ", largest RSS \(largestRSS / 1024) KiB of \(result.idleRSSEachGoalBytes / 1024) KiB each"
              + (largestRSS <= result.idleRSSEachGoalBytes ? " (met)" : " (over)"))
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

extension BenchLink: ExpressibleByArgument {
    public init?(argument: String) { self.init(rawValue: argument == "air-time" ? "airTime" : argument) }
    public static var allValueStrings: [String] { ["instant", "air-time"] }
}

struct BenchGATT: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "gatt",
        abstract: "GATT notifications and reads between two Beryl stacks on berylsim, next to two Bumble hosts in the same run.",
        discussion: """
            Each link is measured in turn: instant (berylsim delivers at once and returns buffers at once, 27 B × 64 as Bumble's \
            controller, so the hosts are the bound) and air-time (7.5 ms, 2M PHY, 251 octets, so the radio is; its rows give the \
            share of the physical limit).
            """)

    @Option(help: "Seconds of notifications per value size, after a quarter second of warm-up.")
    var seconds: Double = 2

    @Option(help: "Sequential reads to time, of a static and of a dynamic value each.")
    var reads: Int = 300

    @Option(help: "Links to measure on: instant, air-time (repeat for both; default both).")
    var link: [BenchLink] = []

    @Flag(help: "Skip the Bumble half.")
    var noBumble = false

    @Flag(help: "Also measure app to app, through managerd and the Beryl library on both sides, with the daemons' memory.")
    var apps = false

    @Flag(help: "Print JSON.")
    var json = false

    struct Figures: Codable {
        var stacks: GATTBenchmarkResult
        var apps: [GATTAppFigures]
    }

    func validate() throws {
        guard seconds > 0, seconds <= 60 else { throw ValidationError("--seconds must be in (0, 60]") }
        guard (10...100_000).contains(reads) else { throw ValidationError("--reads must be from 10 to 100000") }
    }

    func run() throws {
        let links = link.isEmpty ? BenchLink.allCases : link
        let figures: Figures
        do {
            figures = Figures(stacks: try GATTBenchmark.run(seconds: seconds, reads: reads, links: links, bumble: !noBumble),
                              apps: apps ? try links.map { try GATTAppBenchmark.run(on: $0, seconds: seconds, reads: reads) } : [])
        } catch {
            throw Output.fail("benchmark failed: \(error)")
        }
        if json { print(Output.json(figures)); return }
        let bumble = figures.stacks.bumble
        print("GATT notifications (a sequence number in each value, checked by the receiver; window \(seconds) s after warm-up)")
        print("  who            link       value     per second        bytes/s   lost  disordered  refused   of limit   vs Bumble")
        func row(_ who: String, _ link: String, _ row: NotificationFigures) {
            let limit = row.physicalLimitPerSecond.map { String(format: "%6.1f %%", 100 * row.perSecond / $0) } ?? "       -"
            let other = bumble?.notifications.first { $0.valueBytes == row.valueBytes }
            let ratio = other.map { String(format: "%6.2f×", row.perSecond / max($0.perSecond, 1)) } ?? "      -"
            print(String(format: "  %@ %@ %5d B   %10.0f   %12.0f   %4d  %10d  %7d   ", who.padding(toLength: 14, withPad: " ", startingAt: 0),
                         link.padding(toLength: 9, withPad: " ", startingAt: 0), row.valueBytes, row.perSecond, row.bytesPerSecond, row.lost,
                         row.outOfOrder, row.refused) + "\(limit)   \(ratio)")
        }
        for stacks in figures.stacks.beryl { for r in stacks.notifications { row("Beryl stacks", stacks.link.rawValue, r) } }
        for apps in figures.apps { for r in apps.notifications { row("Beryl apps", apps.link.rawValue, r) } }
        for r in bumble?.notifications ?? [] { row("Bumble", "LocalLink", r) }
        print("Reads of a 20-byte value, one at a time (after 10 not timed)")
        func printReads(_ who: String, _ link: String, _ list: [GATTReadLatency]) {
            for r in list {
                let oneCPU = r.oneCPUP50Microseconds.map { String(format: "   one CPU p50 %6.0f µs", $0) } ?? ""
                let crossings = r.processCrossings.map { "   \($0) crossings" } ?? ""
                print(String(format: "  %@ %@ %@ p50 %8.0f µs   p99 %8.0f µs   (%d reads)", who.padding(toLength: 14, withPad: " ", startingAt: 0),
                             link.padding(toLength: 9, withPad: " ", startingAt: 0), r.value.padding(toLength: 8, withPad: " ", startingAt: 0),
                             r.p50Microseconds, r.p99Microseconds, r.count) + oneCPU + crossings)
                for (when, cpu) in [("as scheduled", r.cpuMicrosecondsPerRead), ("on one CPU", r.oneCPUCPUMicrosecondsPerRead)] {
                    guard let cpu else { continue }
                    let parts = cpu.sorted { $0.key < $1.key }.map { String(format: "%@ %.0f", $0.key, $0.value) }
                    print(String(format: "      CPU per read (µs), %@: total %.0f   ", when, cpu.values.reduce(0, +)) + parts.joined(separator: ", "))
                }
            }
        }
        if let crossing = figures.stacks.crossing {
            let across = crossing.roundTripP50Microseconds.map { String(format: "p50 %.0f µs (p99 %.0f) between two CPUs, ", $0, crossing.roundTripP99Microseconds ?? 0) } ?? ""
            print("  this machine, no Beryl code: a process-to-process round trip takes " + across
                  + String(format: "p50 %.0f µs (p99 %.0f) on one CPU", crossing.oneCPURoundTripP50Microseconds, crossing.oneCPURoundTripP99Microseconds))
        }
        for stacks in figures.stacks.beryl { printReads("Beryl stacks", stacks.link.rawValue, stacks.reads) }
        for apps in figures.apps { printReads("Beryl apps", apps.link.rawValue, apps.reads) }
        if let bumble { printReads("Bumble", "LocalLink", bumble.reads) }
        print("CPU per notification received (µs), 20-byte values on the instant link")
        let cpuRows: [(String, NotificationFigures?)] = [("Beryl stacks", figures.stacks.beryl.first { $0.link == .instant }?.notifications.first),
                                                         ("Beryl apps", figures.apps.first { $0.link == .instant }?.notifications.first),
                                                         ("Bumble", bumble?.notifications.first)]
        for case let (who, row?) in cpuRows {
            let total = row.cpuMicrosecondsPerNotification.values.reduce(0, +)
            let parts = row.cpuMicrosecondsPerNotification.sorted { $0.key < $1.key }.map { String(format: "%@ %.1f", $0.key, $0.value) }
            print(String(format: "  %@ total %7.1f   ", who.padding(toLength: 14, withPad: " ", startingAt: 0), total) + parts.joined(separator: ", "))
        }
        for apps in figures.apps.prefix(1) {
            print("Memory (KiB), app benchmark, \(apps.link.rawValue) link")
            for (name, values) in apps.memory.sorted(by: { $0.key < $1.key }) {
                print("  \(name.padding(toLength: 24, withPad: " ", startingAt: 0)) idle \((values["idle"] ?? 0) / 1024)   loaded \((values["loaded"] ?? 0) / 1024)")
            }
        }
        for stacks in figures.stacks.beryl { print("  \(stacks.link.rawValue): \(stacks.linkSummary)") }
        print("  Beryl: \(figures.stacks.note)")
        print("  Bumble: \(figures.stacks.bumbleNote)")
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

    @Flag(help: "Print one JSON object: every part's figures (each part's own --json) and the binaries' sizes.")
    var json = false

    struct BinarySize: Codable {
        var name: String
        var bytes: Int?
        /// After `strip --strip-all` of a copy; nil without binutils' strip.
        var strippedBytes: Int?
    }

    struct Report: Encodable {
        var version: String
        var date: String
        var machine: String
        var cores: Int
        var build: String
        var quick: Bool
        /// Each part's --json output, by part name; a failed part is missing and named in `failed`.
        var parts: [String: JSONText]
        var failed: [String]
        var binaries: [BinarySize]
    }

    /// A part's JSON, embedded as it was printed.
    struct JSONText: Encodable {
        var text: String
        func encode(to encoder: Encoder) throws {
            var container = encoder.singleValueContainer()
            try container.encode(try JSONDecoder().decode(AnyJSON.self, from: Data(text.utf8)))
        }
    }

    func run() throws {
        let parts: [(String, String, [String])] = [
            ("ipc", "IPC", ["ipc"] + (quick ? ["--round-trips", "500", "--seconds", "0.5"] : [])),
            ("hci", "HCI through hcid", ["hci"] + (quick ? ["--seconds", "0.5"] : [])),
            ("sim", "Simulated air time", ["sim"] + (quick ? ["--seconds", "1"] : [])),
            ("gatt", "GATT, stack to stack and app to app, next to Bumble", ["gatt", "--apps"] + (quick ? ["--seconds", "0.5", "--reads", "30"] : [])),
            ("restore", "Restoration", ["restore"] + (quick ? ["--rounds", "1"] : [])),
        ]
        var uname = utsname()
        Glibc.uname(&uname)
        let machine = withUnsafeBytes(of: uname.machine) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        let build = Executables.directory().contains("release") ? "release" : "debug"
        let date = ISO8601DateFormatter().string(from: Date())
        if !json {
            print("Beryl \(Beryl.version) benchmark report, \(date), \(machine), \(ProcessInfo.processInfo.activeProcessorCount) cores, \(build) build\(quick ? ", quick runs" : "")")
        }
        var failed: [String] = []
        var outputs: [String: JSONText] = [:]
        for (key, title, arguments) in parts {
            if !json { print("\n== \(title) (beryl bench \(arguments.joined(separator: " ")))") }
            let run = try runTool("beryl", ["bench"] + arguments + (json ? ["--json"] : []))
            if run.status != 0 {
                if !json { print("  FAILED (exit \(run.status)): \(run.stderr.trimmingCharacters(in: .whitespacesAndNewlines))") }
                failed.append(key)
            } else if json {
                outputs[key] = JSONText(text: run.stdout)
            } else {
                print(run.stdout.trimmingCharacters(in: .newlines))
            }
        }
        let binaries = ["hcid", "attd", "managerd", "beryl", "berylsim"].map(Self.size)
        if json {
            print(Output.json(Report(version: Beryl.version, date: date, machine: machine, cores: ProcessInfo.processInfo.activeProcessorCount, build: build,
                                     quick: quick, parts: outputs, failed: failed, binaries: binaries)))
        } else {
            print("\n== Binary sizes (\(Executables.directory()))")
            func mebibytes(_ bytes: Int?) -> String { bytes.map { String(format: "%.1f MiB", Double($0) / 1_048_576) } ?? "-" }
            for binary in binaries {
                print("  \(binary.name.padding(toLength: 9, withPad: " ", startingAt: 0)) \(mebibytes(binary.bytes).padding(toLength: 10, withPad: " ", startingAt: 0)) stripped \(mebibytes(binary.strippedBytes))")
            }
        }
        if !failed.isEmpty { throw Output.fail("failed parts: \(failed.joined(separator: ", "))") }
    }

    static func size(of name: String) -> BinarySize {
        let path = Executables.path(name)
        let bytes = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? nil
        let copy = NSTemporaryDirectory() + "beryl-strip-\(getpid())-\(name)"
        defer { unlink(copy) }
        guard bytes != nil, let run = try? runTool("/usr/bin/strip", ["--strip-all", "-o", copy, path]), run.status == 0 else {
            return BinarySize(name: name, bytes: bytes, strippedBytes: nil)
        }
        return BinarySize(name: name, bytes: bytes, strippedBytes: (try? FileManager.default.attributesOfItem(atPath: copy)[.size] as? Int) ?? nil)
    }
}

/// Any JSON value, decoded and encoded again unchanged.
enum AnyJSON: Codable {
    case null, bool(Bool), number(Double), string(String), array([AnyJSON]), object([String: AnyJSON])

    init(from decoder: Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() { self = .null }
        else if let value = try? container.decode(Bool.self) { self = .bool(value) }
        else if let value = try? container.decode(Double.self) { self = .number(value) }
        else if let value = try? container.decode(String.self) { self = .string(value) }
        else if let value = try? container.decode([AnyJSON].self) { self = .array(value) }
        else { self = .object(try container.decode([String: AnyJSON].self)) }
    }

    func encode(to encoder: Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .number(let value): try container.encode(value)
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }
}
