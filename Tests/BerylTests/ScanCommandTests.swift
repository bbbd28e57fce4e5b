import Beryl
import BerylDaemonKit
import BerylSupervisor
import BerylTestSupport
import BerylWire
import Dispatch
import Foundation
import Synchronization
import XCTest

/// `beryl scan` and `beryl peripherals` are ordinary apps of managerd; identifiers survive managerd's kill -9.
final class ScanCommandTests: XCTestCase {
    func testScanPrintsDiscoveriesAndIdentifiersSurviveARestart() async throws {
        let scratch = try Scratch()
        defer { scratch.stopAll() }
        try startStacks(scratch)
        let app = HeartRatePeripheral()
        let manager = PeripheralManager(delegate: app, queue: DispatchQueue(label: "app"), socketPath: "\(scratch.root)/run1/managerd.sock")
        XCTAssertNotNil(app.recorder.wait(for: "state poweredOn"))
        manager.startAdvertising(AdvertisingOptions(localName: "Beryl HR", serviceUUIDs: [BluetoothUUID(0x180D)]))
        XCTAssertNotNil(app.recorder.wait(for: "advertising ok"))

        func beryl(_ arguments: [String]) throws -> (status: Int32, out: String, err: String) {
            let run = try runTool("beryl", arguments + ["--runtime-dir", "\(scratch.root)/run0"])
            return (run.status, run.stdout, run.stderr)
        }
        let scan = try beryl(["scan", "--service", "180D", "--count", "1", "--timeout", "10", "--json"])
        XCTAssertEqual(scan.status, 0, scan.err)
        let found = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(scan.out.utf8)) as? [String: Any])
        XCTAssertEqual(found["name"] as? String, "Beryl HR")
        XCTAssertEqual(found["serviceUUIDs"] as? [String], ["180D"])
        XCTAssertEqual(found["connectable"] as? Bool, true)
        let identifier = try XCTUnwrap(found["identifier"] as? String)
        XCTAssertNotNil(UUID(uuidString: identifier))
        let peripheralAddress = try XCTUnwrap(StackProbe.controllerInfo(at: "\(scratch.root)/run1/hcid.sock")?.address)
        XCTAssertEqual(found["address"] as? String, peripheralAddress)

        try scratch.crash("managerd0", socket: "\(scratch.root)/run0/managerd.sock")
        usleep(200_000)
        try scratch.start("managerd0-again", [Executables.path("managerd"), "--runtime-dir", "\(scratch.root)/run0", "--state-dir", "\(scratch.root)/state0"],
                          socket: "\(scratch.root)/run0/managerd.sock")
        let listed = try beryl(["peripherals", "--json"])
        XCTAssertEqual(listed.status, 0, listed.err)
        let known = listed.out.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        XCTAssertEqual(known.compactMap { $0["identifier"] as? String }, [identifier], "the identifier outlives managerd")
        let bad = try beryl(["scan", "--service", "nonsense"])
        XCTAssertNotEqual(bad.status, 0)
        withExtendedLifetime(manager) {}
    }
}
