import Beryl
import BerylDaemonKit
import BerylSupervisor
import BerylTestSupport
import BerylWire
import Dispatch
import Foundation
import XCTest

/// attd owns a link's coming and going: managerd hears both from it alone (att.proto's Bearer). A link that ends
/// while attd is away is heard ending by no one, until the new attd lists every link it took over from hcid.
final class LinkOwnershipTests: TwoStacksTestCase {
    private func bearers(_ side: Int) throws -> [Beryl_Ipc_V1_Bearer] {
        try IPCClient(path: "\(scratch.root)/run\(side)/attd.sock").call(.with { $0.att.getBearers = .init() }).att.bearers.bearers
    }

    func testALinkThatEndedWhileAttdWasAwayEndsForTheAppWhenAttdIsBack() async throws {
        let queue = DispatchQueue(label: "app")
        let (app, peripheralManager) = try await advertisingLatencyPeripheral(queue: queue)

        let (client, central, peripheral) = try await heartRateCentralConnected(queue: queue)

        // attd goes on the central's side; the peripheral's controller ends the link meanwhile (HCI Disconnect,
        // remote user terminated, Core Vol 4 Part E §7.1.6), so the central's hcid reports it to no attd.
        let run = "\(scratch.root)/run0"
        try scratch.crash("attd0", socket: run + "/attd.sock")
        let handle = try XCTUnwrap(bearers(1).first, "the peripheral's attd has the link").connectionHandle
        let hcid = try IPCClient(path: "\(scratch.root)/run1/hcid.sock")
        let disconnect = try hcid.call(.with {
            $0.hci.sendCommand.opcode = 0x0406
            $0.hci.sendCommand.parameters = Data([UInt8(handle & 0xFF), UInt8(handle >> 8), 0x13])
        })
        XCTAssertEqual(disconnect.hci.commandResult.statusAndReturnParameters.first, 0, "Disconnect accepted")
        XCTAssertTrue(eventually { (try? self.bearers(1))?.isEmpty == true }, "the peripheral's side saw the link end")
        XCTAssertEqual(peripheral.state, .connected, "nobody told the central's managerd: attd, the link's owner, is away")

        try scratch.start("attd0-again", [Executables.path("attd"), "--runtime-dir", run, "--state-dir", "\(scratch.root)/state0"],
                          socket: run + "/attd.sock")
        let heard = try XCTUnwrap(client.recorder.wait(for: "disconnected"), "\(client.recorder.all)")
        XCTAssertNotEqual(heard, "disconnected cleanly", "the link was lost, not cancelled by the app")
        XCTAssertEqual(peripheral.state, .disconnected)
        XCTAssertEqual(central.retrieveConnectedPeripherals(withServices: []).count, 0)

        // The handle may come back for the next link: it is a new link, heard once.
        try await central.connected(to: peripheral)
        XCTAssertEqual(try bearers(0).count, 1)
        XCTAssertEqual(client.recorder.all.filter { $0.hasPrefix("connected") }.count, 2, "\(client.recorder.all)")
        withExtendedLifetime((central, peripheralManager)) {}
    }
}
