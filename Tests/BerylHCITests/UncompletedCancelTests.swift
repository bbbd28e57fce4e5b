import BerylCore
@testable import BerylHCI
import BerylSim
import XCTest

/// LE Create Connection Cancel confirmed and never completed (Core Vol 4 Part E §7.8.13 requires an LE Connection
/// Complete with status 0x02): Bumble 0.0.236's controller does this and then refuses every connect. berylsim's
/// wedge-cancel fault imitates it.
final class UncompletedCancelTests: XCTestCase {
    /// A connection attempt to a peer nobody hears: it waits until cancelled.
    private func createToAbsentPeer() -> [UInt8] {
        var create = ByteWriter()
        create.u16(0x10)
        create.u16(0x10)
        create.u8(0)
        create.u8(0)
        create.append([0x01, 0x02, 0x03, 0x04, 0x05, 0x06])
        create.u8(0)
        for value: UInt16 in [6, 6, 0, 100, 0, 0] { create.u16(value) }
        return create.bytes
    }

    private func connectionCompletes(_ harness: HostHarness) -> [UInt8] {
        harness.events[0].filter { $0.code == 0x3E && [0x01, 0x0A].contains($0.parameters.first) }.map { $0.parameters[1] }
    }

    func testAWedgedCancelIsDetectedCountedAndTheControllerResetSoConnectsGoOutAgain() {
        let harness = HostHarness(controllers: 1)
        harness.startAll()
        harness.air.setWedgesConnectionCancel(0, true)
        XCTAssertEqual(harness.command(0, .leCreateConnection, createToAbsentPeer()).first, 0x00, "Command Status: success")
        XCTAssertEqual(harness.command(0, .leCreateConnectionCancel).dropFirst(3).first, 0x00, "Command Complete: success")
        harness.run(for: .milliseconds(500))
        XCTAssertEqual(connectionCompletes(harness), [], "the wedged controller owes the LE Connection Complete")
        XCTAssertEqual(harness.command(0, .leCreateConnection, createToAbsentPeer()).first, HCIStatus.commandDisallowed.rawValue,
                       "and refuses the next connect, as Bumble's does")
        let resetsBefore = harness.commandsSent[0].filter { $0 == HCIOpcode.reset.rawValue }.count
        harness.run(until: { harness.hosts[0].cancelsNeverCompleted == 1 }, timeout: .seconds(5))
        XCTAssertEqual(harness.hosts[0].cancelsNeverCompleted, 1, "\(harness.logs[0])")
        harness.run(until: { harness.hosts[0].state == .poweredOn }, timeout: .seconds(5))
        XCTAssertEqual(harness.commandsSent[0].filter { $0 == HCIOpcode.reset.rawValue }.count, resetsBefore + 1, "one HCI Reset")
        XCTAssertEqual(Array(harness.states[0].suffix(2)), [.resetting, .poweredOn], "clients see the reset and its end")
        XCTAssertTrue(harness.logs[0].contains { $0.contains("no LE Connection Complete") }, "\(harness.logs[0])")
        XCTAssertEqual(harness.command(0, .leCreateConnection, createToAbsentPeer()).first, 0x00, "connects go out again")
        XCTAssertEqual(harness.hosts[0].timesUnresponsive, 0, "not a silence: the controller answered everything else")
    }

    func testACancelCompletedAsTheSpecSaysResetsNothing() {
        let harness = HostHarness(controllers: 1)
        harness.startAll()
        XCTAssertEqual(harness.command(0, .leCreateConnection, createToAbsentPeer()).first, 0x00)
        XCTAssertEqual(harness.command(0, .leCreateConnectionCancel).dropFirst(3).first, 0x00)
        harness.run(for: .seconds(6))
        XCTAssertEqual(connectionCompletes(harness), [HCIStatus.unknownConnectionIdentifier.rawValue])
        XCTAssertEqual(harness.hosts[0].cancelsNeverCompleted, 0)
        XCTAssertEqual(harness.commandsSent[0].filter { $0 == HCIOpcode.reset.rawValue }.count, 1, "the bring-up's reset only")
        XCTAssertEqual(harness.hosts[0].state, .poweredOn)
    }

    /// The reset also ends a cancel nobody could complete any more, and a cancel refused (no attempt) owes nothing.
    func testARefusedCancelOwesNoCompletion() {
        let harness = HostHarness(controllers: 1)
        harness.startAll()
        harness.air.setWedgesConnectionCancel(0, true)
        XCTAssertEqual(harness.command(0, .leCreateConnectionCancel).dropFirst(3).first, HCIStatus.commandDisallowed.rawValue)
        harness.run(for: .seconds(6))
        XCTAssertEqual(harness.hosts[0].cancelsNeverCompleted, 0)
        XCTAssertEqual(harness.hosts[0].state, .poweredOn)
    }
}
