import BerylBench
import BerylDaemonKit
import BerylSupervisor
import Foundation
import Synchronization

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
    /// Labs run side by side, each its own berylsim and two stacks: the faults mostly wait on timers (supervisor
    /// backoff, supervision timeouts, the thermostat's ticks), so a few labs share two cores.
    public var labs = 1

    public init() {}

    /// The seed of one iteration, printed so that `beryl faults --fault F --phase P --seed S` replays it.
    public func seed(cell: Int, iteration: Int) -> UInt64 { baseSeed &+ UInt64(cell) &* 1000 &+ UInt64(iteration) }

    public func run(progress: @escaping @Sendable (String) -> Void) throws -> FaultReport {
        let cells = faults.flatMap { fault in phases.map { (fault, $0) } }
        let work = cells.indices.flatMap { cell in (0..<seeds).map { (cell, $0) } }
        let ledger = Mutex(Ledger(report: FaultReport(seeds: seeds)))
        let first = try startLab(index: 0, progress: progress)
        if soak > 0 {
            let result = soakRun(first, progress: progress)
            ledger.withLock { $0.report.soak = result }
        }
        // Each lab takes the next iteration until none is left; a seed belongs to its cell and iteration, not to the
        // lab that runs it, so a replay needs no --labs.
        let errors = Mutex<[String]>([])
        let lanes = DispatchGroup()
        for index in 0..<labs {
            DispatchQueue.global().async(group: lanes) {
                do {
                    var lab = index == 0 ? first : try startLab(index: index, progress: progress)
                    defer { finish(lab) }
                    func take() -> (Int, Int)? {
                        ledger.withLock { ledger in
                            guard ledger.next < work.count else { return nil }
                            defer { ledger.next += 1 }
                            return work[ledger.next]
                        }
                    }
                    while let (cellIndex, iteration) = take() {
                        let (fault, phase) = cells[cellIndex]
                        let seed = seed(cell: cellIndex, iteration: iteration)
                        let outcome = lab.run(fault, in: phase, seed: seed, rogue: rogue)
                        let done = ledger.withLock { ledger in
                            ledger.report.outcomes.append(outcome)
                            return ledger.report.outcomes.count
                        }
                        let verdict = outcome.passed ? "ok" : "FAILED: " + outcome.failures.joined(separator: "; ")
                        progress("[\(done)/\(work.count)] \(fault.rawValue) × \(phase.rawValue) on the \(outcome.side) side, seed \(seed): "
                                 + "\(verdict) (back in \(Self.seconds(outcome.recovery)))")
                        if !outcome.passed {
                            progress("  replay: beryl faults --fault \(fault.rawValue) --phase \(phase.rawValue) --seed \(seed)  (lab kept at \(lab.root))")
                            lab.stop()
                            lab = try startLab(index: index, progress: progress)
                        }
                    }
                } catch {
                    errors.withLock { $0.append("lab \(index): \(error)") }
                }
            }
        }
        lanes.wait()
        if let error = errors.withLock({ $0.first }) { throw FaultLabError.setup(error) }
        return ledger.withLock { $0.report }
    }

    /// What the labs share: the next iteration to take and what came of those taken.
    private struct Ledger {
        var next = 0
        var report: FaultReport
    }

    private func startLab(index: Int, progress: (String) -> Void) throws -> FaultLab {
        let lab = try FaultLab(seed: baseSeed, index: index)
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
        String(format: "%.1f s", HCIBenchmark.durationSeconds(duration))
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
        if readValues(read.stdout) != [Self.hex(value)] { failures.append("soak read: \(read.stdout.suffix(120)) \(read.stderr.suffix(120))") }
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

    /// Each failed iteration with its seed and what broke: what a log read from its tail needs.
    public func failures() -> String {
        outcomes.filter { !$0.passed }.map { "\($0.fault.rawValue) × \($0.phase.rawValue), seed \($0.seed): " + $0.failures.joined(separator: "; ") }
            .joined(separator: "\n")
    }

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
        let recoveries = outcomes.filter(\.passed).map { HCIBenchmark.durationSeconds($0.recovery) }.sorted()
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
