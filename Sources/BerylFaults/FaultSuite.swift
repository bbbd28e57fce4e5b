import BerylDaemonKit
import BerylStack
import Foundation

/// Every fault in every phase, `seeds` times each, on one lab (set up again after a failure, so one failure does
/// not cascade), then a soak that looks for leaked file descriptors and memory in all six daemons.
public struct FaultSuite: Sendable {
    public var faults: [Fault] = Fault.allCases
    public var phases: [Phase] = Phase.allCases
    public var seeds = 1
    public var baseSeed: UInt64 = 1
    /// The rogue remote device's command (Bumble), e.g. [python, Tests/Interop/bumble_rogue.py]; nil skips that row.
    public var rogue: [String]?
    /// Iterations of the leak soak (0: none).
    public var soak = 100
    public var keepScratch = false

    public init() {}

    /// The seed of one iteration, printed so that `beryl faults --fault F --phase P --seed S` replays it.
    public func seed(cell: Int, iteration: Int) -> UInt64 { baseSeed &+ UInt64(cell) &* 1000 &+ UInt64(iteration) }

    public func run(progress: (String) -> Void) throws -> FaultReport {
        var report = FaultReport(seeds: seeds)
        var lab = try startLab(progress: progress)
        defer { finish(lab) }
        if soak > 0 { report.soak = soakRun(lab, progress: progress) }
        let cells = faults.flatMap { fault in phases.map { (fault, $0) } }
        var done = 0
        for (cellIndex, (fault, phase)) in cells.enumerated() {
            for iteration in 0..<seeds {
                let seed = seed(cell: cellIndex, iteration: iteration)
                let outcome = lab.run(fault, in: phase, seed: seed, rogue: rogue)
                report.outcomes.append(outcome)
                done += 1
                let verdict = outcome.passed ? "ok" : "FAILED: " + outcome.failures.joined(separator: "; ")
                progress("[\(done)/\(cells.count * seeds)] \(fault.rawValue) × \(phase.rawValue) on the \(outcome.side) side, seed \(seed): "
                         + "\(verdict) (back in \(Self.seconds(outcome.recovery)))")
                if !outcome.passed {
                    progress("  replay: beryl faults --fault \(fault.rawValue) --phase \(phase.rawValue) --seed \(seed)  (lab kept at \(lab.root))")
                    lab.stop()
                    lab = try startLab(progress: progress)
                }
            }
        }
        return report
    }

    private func startLab(progress: (String) -> Void) throws -> FaultLab {
        let lab = try FaultLab(seed: baseSeed)
        let started = ContinuousClock.now
        do {
            try lab.start()
        } catch {
            lab.stop()
            throw error
        }
        progress("lab up in \(Self.seconds(ContinuousClock.now - started)): berylsim, two supervised stacks, bonded, doorlock subscribed to the thermostat (\(lab.root))")
        return lab
    }

    private func finish(_ lab: FaultLab) {
        lab.stop()
        if !keepScratch { lab.removeScratch() }
    }

    /// Open descriptors and resident memory of all six daemons before and after `soak` iterations of rogue IPC and
    /// of GATT through short-lived app sessions: what a daemon leaks per request shows up a hundredfold.
    private func soakRun(_ lab: FaultLab, progress: (String) -> Void) -> SoakResult {
        func measure() -> [String: (pid: Int32, fds: Int, rss: UInt64)] {
            var figures: [String: (Int32, Int, UInt64)] = [:]
            for side in Side.allCases {
                for (name, pid) in lab.daemonPIDs(side) {
                    figures["\(side) \(name)"] = (pid, ProcessStats.openFileCount(pid: pid) ?? -1, ProcessStats.residentBytes(pid: pid) ?? 0)
                }
            }
            return figures
        }
        // One round first, so that what is allocated once (caches, pools) is not counted as a leak.
        var random = FaultRandom(seed: baseSeed)
        lab.soakRound(&random)
        let before = measure()
        var failures: [String] = []
        for round in 0..<soak {
            failures += lab.soakRound(&random)
            if round % 25 == 24 { progress("soak: \(round + 1)/\(soak) rounds") }
        }
        usleep(500_000)
        let after = measure()
        var rows: [SoakResult.Row] = []
        for (name, first) in before.sorted(by: { $0.key < $1.key }) {
            guard let last = after[name] else {
                failures.append("\(name) is gone after the soak")
                continue
            }
            if last.pid != first.pid { failures.append("\(name) restarted during the soak") }
            rows.append(.init(daemon: name, fdsBefore: first.fds, fdsAfter: last.fds, rssBefore: first.rss, rssAfter: last.rss))
            if last.fds > first.fds + 2 { failures.append("\(name) holds \(last.fds - first.fds) more descriptors after \(soak) rounds") }
            if last.rss > first.rss + 8 << 20 { failures.append("\(name) grew \((last.rss - first.rss) >> 20) MiB over \(soak) rounds") }
        }
        return SoakResult(rounds: soak, rows: rows, failures: failures)
    }

    static func seconds(_ duration: Duration) -> String {
        String(format: "%.1f s", Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18)
    }
}

extension FaultLab {
    /// One soak round: rogue IPC at every daemon, then a write and a read through new app sessions.
    @discardableResult
    func soakRound(_ random: inout FaultRandom) -> [String] {
        var failures: [String] = []
        for side in Side.allCases {
            for name in StackProbe.daemonNames {
                failures += RogueClient.abuse(socket: paths(side).socket(name), daemon: "\(side) \(name)", random: &random, nonsense: [])
            }
        }
        let value = 50 + random.int(0...249)
        let written = beryl(["gatt", "--peer", thermostatIdentifier, "write", Self.setpoint, Self.hex(value), "--timeout", "10"], on: .central)
        if written.status != 0 { failures.append("soak write failed: \(written.stderr.suffix(160))") }
        let read = beryl(["gatt", "--peer", thermostatIdentifier, "read", Self.setpoint, "--json", "--timeout", "10"], on: .central)
        if !read.stdout.contains(Self.hex(value)) { failures.append("soak read: \(read.stdout.suffix(120)) \(read.stderr.suffix(120))") }
        return failures
    }
}

public struct SoakResult: Sendable {
    public struct Row: Sendable {
        public var daemon: String
        public var fdsBefore: Int
        public var fdsAfter: Int
        public var rssBefore: UInt64
        public var rssAfter: UInt64
    }
    public var rounds: Int
    public var rows: [Row]
    public var failures: [String]
}

/// The faults × phases table.
public struct FaultReport: Sendable {
    public var seeds: Int
    public var outcomes: [FaultOutcome] = []
    public var soak: SoakResult?

    public var passed: Bool { outcomes.allSatisfy(\.passed) && (soak?.failures.isEmpty ?? true) }

    public func table() -> String {
        let phases = Phase.allCases.filter { phase in outcomes.contains { $0.phase == phase } }
        let faults = Fault.allCases.filter { fault in outcomes.contains { $0.fault == fault } }
        let width = max(32, (faults.map(\.title.count).max() ?? 0) + 2)
        var lines = ["fault".padding(toLength: width, withPad: " ", startingAt: 0) + phases.map { $0.rawValue.padding(toLength: 13, withPad: " ", startingAt: 0) }.joined()]
        for fault in faults {
            var line = fault.title.padding(toLength: width, withPad: " ", startingAt: 0)
            for phase in phases {
                let cell = outcomes.filter { $0.fault == fault && $0.phase == phase }
                let passed = cell.filter(\.passed).count
                line += "\(passed)/\(cell.count)\(passed == cell.count ? "" : " ✗")".padding(toLength: 13, withPad: " ", startingAt: 0)
            }
            lines.append(line)
        }
        let recoveries = outcomes.filter(\.passed).map { Double($0.recovery.components.seconds) + Double($0.recovery.components.attoseconds) / 1e18 }.sorted()
        if !recoveries.isEmpty {
            lines.append(String(format: "back to every invariant after the fault: median %.1f s, worst %.1f s", recoveries[recoveries.count / 2], recoveries.last!))
        }
        if let soak {
            lines.append("soak, \(soak.rounds) rounds (rogue IPC at all six daemons, GATT through new app sessions): "
                         + (soak.failures.isEmpty ? "no leak" : soak.failures.joined(separator: "; ")))
            for row in soak.rows {
                lines.append("  \(row.daemon.padding(toLength: 20, withPad: " ", startingAt: 0)) fds \(row.fdsBefore) → \(row.fdsAfter)   "
                             + String(format: "RSS %.1f → %.1f MiB", Double(row.rssBefore) / 1_048_576, Double(row.rssAfter) / 1_048_576))
            }
        }
        return lines.joined(separator: "\n")
    }
}
