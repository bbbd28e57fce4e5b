import ArgumentParser
import BerylFaults
import BerylSupervisor
import Foundation

extension Fault: ExpressibleByArgument {}
extension Phase: ExpressibleByArgument {}

/// `beryl faults`: the fault-injection suite, as device labs run it.
struct Faults: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Inject faults into two full stacks on berylsim at several phases and check the invariants after each.",
        discussion: """
            Starts berylsim and two supervised stacks from this build (beside the beryl executable), bonds them, and runs
            the doorlock app subscribed to the thermostat app. Each fault (kill -9 of daemons and apps, radio faults, bad
            input) hits each phase (subscribed, serving, connecting, restoring, streaming) --seeds times; after each the stacks must
            come back with every invariant holding: daemons up (and only the killed ones restarted), the bond on both
            sides, the link on the air, each app running once, the subscription delivering, and a write applied exactly
            once and read back. Then a soak checks the six daemons for leaked descriptors and memory.
            A failing iteration prints its seed: `beryl faults --fault F --phase P --seed S` replays it.
            Faults: \(Fault.allCases.map(\.rawValue).joined(separator: ", ")).
            """)

    @Option(help: "Only this fault (repeatable).")
    var fault: [Fault] = []

    @Option(help: "Only this phase (repeatable): subscribed, serving, connecting, restoring, streaming.")
    var phase: [Phase] = []

    @Option(help: "Iterations per fault × phase cell, each with its own seed.")
    var seeds = 1

    @Option(help: "The first seed.")
    var seed: UInt64 = 1

    @Option(help: "Rounds of the leak soak (0 skips it).")
    var soak = 100

    @Option(help: "The rogue remote device's command (default: .venv-interop/bin/python Tests/Interop/bumble_rogue.py, when they exist).")
    var rogue: String?

    @Option(help: "Labs run side by side (1-4), each its own berylsim and two stacks; the cells are shared out among them.")
    var labs = 1

    @Flag(help: "Keep the lab's directory (logs, databases).")
    var keep = false

    func validate() throws {
        guard (1...1000).contains(seeds) else { throw ValidationError("--seeds must be in [1, 1000]") }
        guard (0...100_000).contains(soak) else { throw ValidationError("--soak must be in [0, 100000]") }
        guard (1...4).contains(labs) else { throw ValidationError("--labs must be in [1, 4]") }
    }

    func run() throws {
        var suite = FaultSuite()
        if !fault.isEmpty { suite.faults = fault }
        if !phase.isEmpty { suite.phases = phase }
        suite.seeds = seeds
        suite.baseSeed = seed
        suite.soak = soak
        suite.keepScratch = keep
        suite.labs = labs
        suite.rogue = rogue.map { $0.split(separator: " ").map(String.init) } ?? Self.defaultRogue()
        if suite.rogue == nil, suite.faults.contains(.roguePDU) {
            Console.error("beryl faults: no Bumble rogue found (run ci/setup, or pass --rogue); the rogue-pdu row will fail\n")
        }
        print("faults: \(suite.faults.count) faults × \(suite.phases.count) phases × \(seeds) seed(s) from seed \(seed), soak \(soak) rounds, \(labs) lab(s)")
        let report: FaultReport
        do {
            report = try suite.run { line in print(line) }
        } catch {
            throw Output.fail("\(error)")
        }
        print("")
        print(report.table())
        print("\(seeds) seed(s) per cell" + (seeds < 20 ? " (the full run is --seeds 20)" : ""))
        if !report.passed { throw ExitCode(1) }
    }

    /// Bumble in the repository's venv, with the rogue script, found from the working directory.
    static func defaultRogue() -> [String]? {
        let directory = FileManager.default.currentDirectoryPath
        let python = directory + "/.venv-interop/bin/python"
        let script = directory + "/Tests/Interop/bumble_rogue.py"
        guard FileManager.default.isExecutableFile(atPath: python), FileManager.default.fileExists(atPath: script) else { return nil }
        return [python, script]
    }
}
