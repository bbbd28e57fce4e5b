import ExampleReports
import Foundation
import XCTest

/// The examples' reports: the text alone for people; with --json an object a reader takes whole, its text beside.
final class ExampleReportTests: XCTestCase {
    private enum Report: ExampleReport {
        case heartRate(bpm: Int)
        case advertising(error: String?)

        var text: String {
            switch self {
            case .heartRate(let bpm): "heart rate \(bpm) bpm"
            case .advertising(let error): error.map { "advertising failed: \($0)" } ?? "advertising"
            }
        }

        var fields: [String: Any] {
            switch self {
            case .heartRate(let bpm): ["event": "heartRate", "bpm": bpm]
            case .advertising(let error): ["event": "advertising", "error": error ?? NSNull()]
            }
        }
    }

    func testTextForPeopleAndAnObjectForReaders() throws {
        XCTAssertEqual(Report.heartRate(bpm: 72).line(json: false), "heart rate 72 bpm")
        let line = Report.heartRate(bpm: 72).line(json: true)
        XCTAssertFalse(line.contains("\n"), "one object per line")
        let object = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        XCTAssertEqual(object["event"] as? String, "heartRate")
        XCTAssertEqual(object["bpm"] as? Int, 72)
        XCTAssertEqual(object["text"] as? String, "heart rate 72 bpm")
        let advertising = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(Report.advertising(error: nil).line(json: true).utf8)) as? [String: Any])
        XCTAssertTrue(advertising["error"] is NSNull, "no error is a null a reader can test for, not a missing key")
    }
}
