import BerylHCI
import BerylManager
import XCTest

/// The controller's one scan, decided from the apps' scans, their lifecycle and a lab session's scan.
final class ControllerScanTests: XCTestCase {
    private func wanted(apps: Bool, background: Bool = false, lab: LabSession.Scan? = nil, poweredOn: Bool = true) -> ControllerScan? {
        ControllerScan.wanted(appsScanning: apps, appsAllInBackground: background, lab: lab, poweredOn: poweredOn, ownAddressType: 0)
    }

    func testNobodyScanningOrAControllerNotOnMeansNoScan() {
        XCTAssertNil(wanted(apps: false))
        XCTAssertNil(wanted(apps: true, poweredOn: false))
        XCTAssertNil(wanted(apps: false, lab: .init(passive: false, ownAddress: .public), poweredOn: false))
    }

    func testAppsScanActivelyAndSlowOnlyWhenAllAreInTheBackground() {
        XCTAssertEqual(wanted(apps: true), ControllerScan(pace: .fast, active: true, ownAddressType: 0))
        XCTAssertEqual(wanted(apps: true, background: true), ControllerScan(pace: .slow, active: true, ownAddressType: 0))
    }

    /// A lab scans fast with its own address; passive only while no app needs scan responses for names.
    func testALabsScanIsFastAndPassiveOnlyAlone() {
        let passive = LabSession.Scan(passive: true, ownAddress: .random)
        XCTAssertEqual(wanted(apps: false, lab: passive), ControllerScan(pace: .fast, active: false, ownAddressType: 1))
        XCTAssertEqual(wanted(apps: true, background: true, lab: passive), ControllerScan(pace: .fast, active: true, ownAddressType: 1))
    }

    /// Core Vol 4 Part E §7.8.10: parameters change only with the scan off.
    func testParametersChangeOnlyWithTheScanOff() throws {
        let fast = ControllerScan(pace: .fast, active: true, ownAddressType: 0)
        let slow = ControllerScan(pace: .slow, active: true, ownAddressType: 0)
        XCTAssertEqual(ControllerScan.commands(from: fast, to: fast), [], "what runs is what is wanted")
        let started = ControllerScan.commands(from: nil, to: fast)
        XCTAssertEqual(started.map(\.opcode), [HCIOpcode.leSetScanParameters.rawValue, HCIOpcode.leSetScanEnable.rawValue])
        // Active, 100 ms interval, 60 ms window (0.625 ms units), public address, accept all.
        XCTAssertEqual(started.first?.parameters, [0x01, 0xA0, 0x00, 0x60, 0x00, 0x00, 0x00])
        let slowed = ControllerScan.commands(from: fast, to: slow)
        XCTAssertEqual(slowed.map(\.opcode), [HCIOpcode.leSetScanEnable.rawValue, HCIOpcode.leSetScanParameters.rawValue, HCIOpcode.leSetScanEnable.rawValue])
        XCTAssertEqual(slowed.first?.parameters.first, 0x00, "off first")
        XCTAssertEqual(Array(slowed[1].parameters[1...4]), [0x00, 0x08, 0x30, 0x00], "1.28 s interval, 30 ms window")
        XCTAssertEqual(ControllerScan.commands(from: slow, to: nil).map(\.parameters), [[0x00, 0x00]], "off, duplicates unfiltered")
    }

    /// An app starting to scan beside a lab's passive scan makes it active (the app needs scan responses), and it
    /// goes back to passive when the app stops.
    func testAnAppJoiningALabsPassiveScanMakesItActive() throws {
        let passive = LabSession.Scan(passive: true, ownAddress: .random)
        let alone = try XCTUnwrap(wanted(apps: false, lab: passive))
        let joined = try XCTUnwrap(wanted(apps: true, lab: passive))
        let restart = ControllerScan.commands(from: alone, to: joined)
        XCTAssertEqual(restart.map(\.opcode), [HCIOpcode.leSetScanEnable.rawValue, HCIOpcode.leSetScanParameters.rawValue, HCIOpcode.leSetScanEnable.rawValue])
        XCTAssertEqual(restart[1].parameters.first, 0x01, "active")
        XCTAssertEqual(restart[1].parameters[5], 0x01, "still the lab's random address")
        XCTAssertEqual(ControllerScan.commands(from: joined, to: alone)[1].parameters.first, 0x00, "passive again")
    }
}
