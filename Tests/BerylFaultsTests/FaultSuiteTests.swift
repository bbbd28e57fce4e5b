import BerylFaults
import Foundation
import XCTest

/// The fault-injection suite inside `ci/test`: every fault in every phase, BERYL_FAULT_SEEDS times each (1 by
/// default; `ci/test --faults` runs the full 20), and the 100-round leak soak. The table is printed either way.
final class FaultSuiteTests: XCTestCase {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    func testEveryFaultInEveryPhaseLeavesBothStacksWhole() throws {
        let environment = ProcessInfo.processInfo.environment
        var suite = FaultSuite()
        suite.seeds = environment["BERYL_FAULT_SEEDS"].flatMap(Int.init) ?? 1
        suite.soak = environment["BERYL_FAULT_SOAK"].flatMap(Int.init) ?? 100
        suite.baseSeed = environment["BERYL_FAULT_SEED"].flatMap(UInt64.init) ?? 1
        suite.labs = environment["BERYL_FAULT_LABS"].flatMap(Int.init) ?? 1
        if let only = environment["BERYL_FAULTS"] { suite.faults = only.split(separator: ",").compactMap { Fault(rawValue: String($0)) } }
        if let only = environment["BERYL_FAULT_PHASES"] { suite.phases = only.split(separator: ",").compactMap { Phase(rawValue: String($0)) } }
        let python = Self.repository + "/.venv-interop/bin/python"
        let rogue = Self.repository + "/Tests/Interop/bumble_rogue.py"
        XCTAssertTrue(FileManager.default.isExecutableFile(atPath: python), "ci/setup makes the Bumble venv the rogue remote device runs in")
        suite.rogue = [python, rogue]
        let report = try suite.run { print("faults: \($0)") }
        print(report.table())
        print("faults: \(suite.seeds) seed(s) per cell in this run; the full run (ci/test --faults) takes 20")
        XCTAssertEqual(report.outcomes.count, suite.faults.count * suite.phases.count * suite.seeds)
        XCTAssertTrue(report.passed, report.failures() + "\n" + report.table())
        XCTAssertEqual(report.soak?.rows.count, suite.soak > 0 ? 6 : nil, "all six daemons measured")
    }
}
