import Beryl
import BerylDaemonKit
import BerylSupervisor
import BerylTestSupport
import BerylWire
import Dispatch
import Foundation
import Synchronization
import XCTest

/// The door-lock central (through managerd and the library) against `beryl serve secure-lock.json`: the read of an
/// encryption-required value makes the stack pair, then the unlock is written.
final class DoorLockExampleTests: XCTestCase {
    func testTheDoorLockCentralPairsReadsAndUnlocks() throws {
        let scratch = try Scratch()
        defer { scratch.stopAll() }
        try startStacks(scratch)
        let profile = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Examples/profiles/secure-lock.json").path
        try scratch.start("serve", [Executables.path("beryl"), "serve", profile, "--json", "--runtime-dir", "\(scratch.root)/run1"],
                          socket: "\(scratch.root)/run1/attd.sock")
        let serveLog = { (try? String(contentsOfFile: scratch.paths.logFile("serve"), encoding: .utf8)) ?? "" }
        let served = { JSONLines.events($0, inFile: scratch.paths.logFile("serve")) }
        XCTAssertTrue(eventually { !served("advertising").isEmpty }, serveLog())

        let process = Process()
        process.executableURL = URL(fileURLWithPath: Executables.path("door-lock-central"))
        process.arguments = ["--runtime-dir", "\(scratch.root)/run0", "--unlock", "--json"]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        XCTAssertEqual(process.terminationStatus, 0, output)
        let said = JSONLines.events(in: output)
        XCTAssertEqual(said.compactMap { $0["event"] as? String }, ["connected", "lockState", "unlockSent"], output)
        XCTAssertEqual(said.first { $0["event"] as? String == "lockState" }?["state"] as? String, "locked", "read once the stack paired")
        XCTAssertEqual(served("pairing-complete").first?["bonded"] as? Bool, true, serveLog())
        let unlock = try XCTUnwrap(served("write-requested").last?["writes"] as? [[String: Any]], "the unlock write reached the publisher: \(serveLog())")
        // The lock's command characteristic, D00D0003-0000-1000-8000-00805F9B34FB: on the Bluetooth base, so 32 bits.
        XCTAssertEqual(unlock.first?["attribute"] as? String, "D00D0003")
        XCTAssertEqual(unlock.first?["bytes"] as? Int, "unlock".utf8.count)
        XCTAssertNil(served("write-requested").last?["refusal"], "taken on the encrypted link: \(serveLog())")
    }
}
