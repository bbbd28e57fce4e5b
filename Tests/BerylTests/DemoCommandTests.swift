import Beryl
import BerylDaemonKit
import BerylSupervisor
import BerylTestSupport
import BerylWire
import Dispatch
import Foundation
import Synchronization
import XCTest

/// `beryl demo --json`, the main job's machine-readable face: every step ok, in order, and a clean end.
final class DemoCommandTests: XCTestCase {
    static let examples = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Examples").path

    func testTheDemoRunsEndToEndAndSaysSoInJSON() throws {
        let run = try runTool("beryl", ["demo", "--json", "--examples", Self.examples])
        let events = JSONLines.events(in: run.stdout)
        XCTAssertEqual(run.status, 0, run.stdout + run.stderr)
        let steps = events.filter { $0["event"] as? String == "step" }
        XCTAssertTrue(steps.allSatisfy { $0["ok"] as? Bool == true && $0["ms"] is Int }, "\(steps)")
        let names = steps.compactMap { $0["step"] as? String }
        for expected in ["heart-rate-central example discovers it", "connects", "reads the body sensor location", "takes 5 heart-rate notifications",
                         "writes the control point", "kill -9 the app; the stack keeps its link", "the lock returns: relaunched, restored, read"] {
            XCTAssertTrue(names.contains(expected), "\(expected) in \(names)")
        }
        XCTAssertEqual(events.last?["event"] as? String, "done")
        XCTAssertEqual(events.last?["ok"] as? Bool, true)
        let sides = Set(steps.compactMap { $0["side"] as? String })
        XCTAssertTrue(sides.isSuperset(of: ["central", "peripheral", "air"]), "\(sides)")
    }

    /// `beryl demo --json | head -2`: the reader goes, and the demo stops what it started rather than leaving
    /// berylsim and two stacks running (or crashing on EPIPE).
    func testADemoWhoseReaderGoesStopsItsProcesses() throws {
        let demo = Process()
        demo.executableURL = URL(fileURLWithPath: Executables.path("beryl"))
        demo.arguments = ["demo", "--json", "--examples", Self.examples]
        let output = Pipe()
        demo.standardOutput = output
        demo.standardError = FileHandle.nullDevice
        try demo.run()
        var received = Data()
        while !received.contains(UInt8(ascii: "\n")) {
            let chunk = output.fileHandleForReading.availableData
            guard !chunk.isEmpty else { break }
            received += chunk
        }
        let first = try XCTUnwrap(JSONSerialization.jsonObject(with: received.prefix { $0 != UInt8(ascii: "\n") }) as? [String: Any])
        let simPID = Int32(try XCTUnwrap(first["pid"] as? Int, "\(first)"))
        XCTAssertEqual(kill(simPID, 0), 0, "berylsim runs")
        try output.fileHandleForReading.close()
        demo.waitUntilExit()
        XCTAssertEqual(demo.terminationReason, .exit, "ended by itself, not by a signal")
        XCTAssertEqual(demo.terminationStatus, 128 + SIGPIPE)
        XCTAssertNotEqual(kill(simPID, 0), 0, "berylsim was stopped")
    }

    func testTheDemoRefusesAMissingExamplesDirectory() throws {
        let run = try runTool("beryl", ["demo", "--examples", "/nonexistent"])
        XCTAssertEqual(run.status, 64, run.stderr)
        XCTAssertTrue(run.stderr.contains("no /nonexistent/profiles/lock.json"), run.stderr)
    }
}
