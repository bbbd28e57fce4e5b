import Beryl
import BerylDaemonKit
import BerylSupervisor
import BerylTestSupport
import BerylWire
import Dispatch
import Foundation
import Synchronization
import XCTest

/// The pairing delegate: with keyboards on both sides, pairing by Passkey Entry asks both apps for the passkey.
final class KeyboardUser: PairingDelegate {
    let recorder = Recorder()
    let passkey: UInt32
    init(passkey: UInt32) { self.passkey = passkey }
    func pairing(with peer: UUID, prompt: PairingPrompt, responder: PairingResponder) {
        recorder.note("prompt \(prompt)")
        if prompt == .enterPasskey { responder.enter(passkey: passkey) }
    }
    func pairing(with peer: UUID, finished outcome: PairingOutcome) {
        recorder.note("finished \(outcome.success) bonded \(outcome.bonded) reason \(outcome.reason) sc \(outcome.secureConnections) from \(outcome.address)")
    }
}

final class PairingDelegateTests: XCTestCase {
    func testPasskeyPromptsReachBothAppsAndPairingUnlocksTheValue() async throws {
        let scratch = try Scratch()
        defer { scratch.stopAll() }
        try startStacks(scratch, attd: [["--io-capability", "keyboard-only"], ["--io-capability", "keyboard-only"]])
        let queue = DispatchQueue(label: "apps")
        let app = HeartRatePeripheral()
        let peripheralUser = KeyboardUser(passkey: 246810)
        let manager = PeripheralManager(delegate: app, queue: queue, socketPath: "\(scratch.root)/run1/managerd.sock")
        manager.pairingDelegate = peripheralUser
        XCTAssertNotNil(app.recorder.wait(for: "state poweredOn"))
        let service = MutableService(type: BluetoothUUID(0x180D), primary: true)
        let secret = MutableCharacteristic(type: BluetoothUUID(0x2A38), properties: .read, value: Data([0x05]), permissions: .readEncryptionRequired)
        service.characteristics = [secret]
        try await manager.add(service)
        manager.startAdvertising(AdvertisingOptions(localName: "Secret", serviceUUIDs: [BluetoothUUID(0x180D)]))

        let client = HeartRateCentral()
        let centralUser = KeyboardUser(passkey: 246810)
        let central = CentralManager(delegate: client, queue: queue, socketPath: "\(scratch.root)/run0/managerd.sock")
        central.pairingDelegate = centralUser
        XCTAssertNotNil(client.recorder.wait(for: "state poweredOn"))
        let found = await central.firstDiscovery(of: BluetoothUUID(0x180D))
        let peripheral = try XCTUnwrap(found?.peripheral)
        try await central.connected(to: peripheral)
        let services = try await peripheral.services(discovering: nil)
        let characteristic = try XCTUnwrap(services.first { $0.uuid == BluetoothUUID(0x180D) }?.characteristics?.first)
        let value = try await peripheral.readValue(for: characteristic)
        XCTAssertEqual(value, Data([0x05]), "readable once paired")
        XCTAssertNotNil(centralUser.recorder.wait(for: "prompt enterPasskey"))
        XCTAssertNotNil(peripheralUser.recorder.wait(for: "prompt enterPasskey"))
        let peripheralAddress = try XCTUnwrap(StackProbe.controllerInfo(at: "\(scratch.root)/run1/hcid.sock")?.address)
        XCTAssertEqual(centralUser.recorder.wait(for: "finished"), "finished true bonded true reason 0 sc true from \(peripheralAddress)")
        withExtendedLifetime((manager, central)) {}
    }
}
