import BerylSupervisor
import BerylTestSupport
import Foundation
import XCTest

/// `beryl bench restore` runs the door-lock story and prints its figures (the figures themselves are not judged here).
final class RestoreBenchmarkSmokeTests: XCTestCase {
    func testTheRestoreBenchmarkRuns() throws {
        let run = try runTool("beryl", ["bench", "restore", "--rounds", "1", "--json"])
        XCTAssertEqual(run.status, 0, run.stderr)
        let figures = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: [Double]], run.stdout)
        for key in ["reconnectToRestoreMilliseconds", "reconnectToReadMilliseconds", "managerdRestartMilliseconds"] {
            XCTAssertEqual(figures[key]?.count, 1, key)
            XCTAssertGreaterThan(figures[key]?.first ?? 0, 0, key)
        }
        XCTAssertLessThanOrEqual(figures["reconnectToRestoreMilliseconds"]![0], figures["reconnectToReadMilliseconds"]![0])
    }
}
