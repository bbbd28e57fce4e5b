import BerylSupervisor
import BerylTestSupport
import Foundation
import XCTest

/// `beryl bench all --quick --json`: every part runs and lands in the one report, Bumble's half included (the figures
/// are not checked: shared machines).
final class BenchAllSmokeTests: XCTestCase {
    func testTheReportHasEveryPart() throws {
        let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
        // From the repository, so that the Bumble half finds .venv-interop.
        let run = try runTool("beryl", ["bench", "all", "--quick", "--json"], in: repository)
        XCTAssertEqual(run.status, 0, run.stdout + run.stderr)
        let report = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any])
        XCTAssertEqual(report["failed"] as? [String], [])
        let parts = try XCTUnwrap(report["parts"] as? [String: Any])
        XCTAssertEqual(Set(parts.keys), ["ipc", "hci", "sim", "gatt", "restore"])
        let gatt = try XCTUnwrap(parts["gatt"] as? [String: Any])
        let stacks = try XCTUnwrap(gatt["stacks"] as? [String: Any])
        XCTAssertNotNil(stacks["bumble"] as? [String: Any], "Bumble's half ran: \(stacks["bumbleNote"] ?? "")")
        XCTAssertEqual((gatt["apps"] as? [[String: Any]])?.count, 2, "app to app on both links")
        // Reads say what bounds them: the machine's bare crossing, each read's crossings, CPU per process, one-CPU time.
        let crossing = try XCTUnwrap(stacks["crossing"] as? [String: Any])
        XCTAssertGreaterThan(crossing["roundTripP50Microseconds"] as? Double ?? 0, 0)
        XCTAssertGreaterThan(crossing["oneCPURoundTripP50Microseconds"] as? Double ?? 0, 0)
        let stackRows = try XCTUnwrap(stacks["beryl"] as? [[String: Any]])
        let appRows = try XCTUnwrap(gatt["apps"] as? [[String: Any]])
        // App to app, managerd does no work for a read: the apps' data channels carry it.
        for (rows, crossings, reader) in [(stackRows, [10, 12], "central attd"), (appRows, [10, 12], "central attd")] {
            for row in rows {
                let reads = try XCTUnwrap(row["reads"] as? [[String: Any]])
                XCTAssertEqual(reads.compactMap { $0["processCrossings"] as? Int }, crossings)
                for read in reads {
                    XCTAssertGreaterThan(read["oneCPUP50Microseconds"] as? Double ?? 0, 0, "\(read)")
                    XCTAssertGreaterThan((read["cpuMicrosecondsPerRead"] as? [String: Double])?[reader] ?? 0, 0, "\(read)")
                    XCTAssertGreaterThan((read["oneCPUCPUMicrosecondsPerRead"] as? [String: Double])?[reader] ?? 0, 0, "\(read)")
                }
            }
        }
        let binaries = try XCTUnwrap(report["binaries"] as? [[String: Any]])
        XCTAssertEqual(binaries.compactMap { $0["name"] as? String }, ["hcid", "attd", "managerd", "beryl", "berylsim"])
        for binary in binaries {
            let bytes = try XCTUnwrap(binary["bytes"] as? Int)
            let stripped = try XCTUnwrap(binary["strippedBytes"] as? Int)
            XCTAssertLessThan(stripped, bytes, "\(binary)")
        }
    }
}
