import Beryl
import BerylDaemonKit
import BerylSupervisor
import BerylTestSupport
import BerylWire
import Dispatch
import Foundation
import Synchronization
import XCTest

/// The heart-rate examples, as built, against each other on two `beryl up` stacks.
final class ExampleTests: XCTestCase {
    func testTheHeartRateExamplesTalk() throws {
        let scratch = try Scratch()
        defer {
            for side in ["a", "b"] { _ = try? run(["beryl", "down", "--runtime-dir", "\(scratch.root)/\(side)"]) }
            scratch.stopAll()
        }
        let sim = scratch.root + "/sim"
        try scratch.start("berylsim", [Executables.path("berylsim"), "--dir", sim, "--controllers", "2"], socket: sim + "/control.sock")
        for (side, controller) in [("a", 0), ("b", 1)] {
            let up = try run(["beryl", "up", "--runtime-dir", "\(scratch.root)/\(side)", "--state-dir", "\(scratch.root)/\(side)-state",
                              "--transport", "unix:\(sim)/controller-\(controller).sock"])
            XCTAssertEqual(up.status, 0, up.output)
        }
        try scratch.start("peripheral", [Executables.path("heart-rate-peripheral"), "--runtime-dir", "\(scratch.root)/b", "--json"],
                          socket: "\(scratch.root)/b/managerd.sock")
        let central = try run(["heart-rate-central", "--runtime-dir", "\(scratch.root)/a", "--count", "3", "--json"])
        XCTAssertEqual(central.status, 0, central.output)
        let events = JSONLines.events(in: central.output)
        let names = events.compactMap { $0["event"] as? String }
        // The guide's order: found, connected, characteristics, then the location read ahead of the subscription's beats.
        XCTAssertEqual(names, ["discovered", "connected", "characteristicsDiscovered", "sensorLocation", "heartRate", "heartRate", "heartRate",
                               "energyExpendedReset", "done"], central.output)
        XCTAssertEqual(events.first?["localName"] as? String, "Beryl HR")
        XCTAssertEqual(Set(events.first { $0["event"] as? String == "characteristicsDiscovered" }?["uuids"] as? [String] ?? []), ["2A37", "2A38", "2A39"])
        XCTAssertEqual(events.first { $0["event"] as? String == "sensorLocation" }?["code"] as? Int, 1, "chest")
        let beats = events.filter { $0["event"] as? String == "heartRate" }.compactMap { $0["bpm"] as? Int }
        XCTAssertTrue(beats.allSatisfy { (60...100).contains($0) }, "\(beats)")
        let writes = JSONLines.events("controlPointWritten", inFile: scratch.paths.logFile("peripheral"))
        XCTAssertEqual(writes.map { $0["value"] as? [Int] }, [[1]])
        XCTAssertEqual(writes.first?["accepted"] as? Bool, true)
    }

    private func run(_ arguments: [String]) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Executables.path(arguments[0]))
        process.arguments = Array(arguments.dropFirst())
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }
}
