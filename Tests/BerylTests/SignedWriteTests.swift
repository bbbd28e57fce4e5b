import Beryl
import BerylIPC
import BerylSupervisor
import Dispatch
import Foundation
import BerylTestSupport
import XCTest

/// A peripheral app with a value only an encrypted link may subscribe to (Core Bluetooth's notifyEncryptionRequired)
/// and one that takes only signed writes.
final class SigningPeripheral: PeripheralManagerDelegate {
    let recorder = Recorder()
    let guarded = MutableCharacteristic(type: BluetoothUUID(0xFFF1), properties: .notifyEncryptionRequired, value: nil, permissions: .readable)
    let signedOnly = MutableCharacteristic(type: BluetoothUUID(0xFFF2), properties: .authenticatedSignedWrites, value: nil, permissions: .writeable)

    func peripheralManagerDidUpdateState(_ peripheral: PeripheralManager) { recorder.note("state \(peripheral.state)") }
    func peripheralManagerDidStartAdvertising(_ peripheral: PeripheralManager, error: Error?) { recorder.note("advertising \(error.map { "\($0)" } ?? "ok")") }
    func peripheralManager(_ peripheral: PeripheralManager, didReceiveWrite requests: [ATTRequest]) {
        recorder.note("write \(requests.map { "\($0.characteristic.uuid)=\($0.value?.map { String(format: "%02x", $0) }.joined() ?? "")" }.joined(separator: ","))")
    }
}

/// Signed writes (Core Vol 3 Part C §10.4, Part F §3.4.5.4): a central that bonded writes without response to a
/// characteristic that takes only signed writes; on a link that is not encrypted the write goes signed with the CSRK
/// the central distributed, and the peripheral's stack verifies it against the bond before the app hears of it.
final class SignedWriteTests: XCTestCase {
    func testABondedCentralsSignedWriteIsVerifiedAndCarriedOut() async throws {
        let scratch = try Scratch()
        defer { scratch.stopAll() }
        try startStacks(scratch, attd: [["--io-capability", "keyboard-only"], ["--io-capability", "keyboard-only"]])
        let queue = DispatchQueue(label: "apps")
        let app = SigningPeripheral()
        let manager = PeripheralManager(delegate: app, queue: queue, socketPath: "\(scratch.root)/run1/managerd.sock")
        let peripheralUser = KeyboardUser(passkey: 135790)  // delegates are held weakly
        manager.pairingDelegate = peripheralUser
        XCTAssertNotNil(app.recorder.wait(for: "state poweredOn"))
        let service = MutableService(type: BluetoothUUID(0xFFF0), primary: true)
        service.characteristics = [app.guarded, app.signedOnly]
        try await manager.add(service)
        manager.startAdvertising(AdvertisingOptions(localName: "Signer", serviceUUIDs: [BluetoothUUID(0xFFF0)]))
        XCTAssertEqual(app.recorder.wait(for: "advertising"), "advertising ok")

        let client = HeartRateCentral()
        let user = KeyboardUser(passkey: 135790)
        let central = CentralManager(delegate: client, queue: queue, socketPath: "\(scratch.root)/run0/managerd.sock")
        central.pairingDelegate = user
        XCTAssertNotNil(client.recorder.wait(for: "state poweredOn"))
        let found = await central.firstDiscovery(of: BluetoothUUID(0xFFF0))
        let peripheral = try XCTUnwrap(found?.peripheral)
        try await central.connected(to: peripheral)
        var services = try await peripheral.services(discovering: nil)
        var signedOnly = try XCTUnwrap(services.first { $0.uuid == BluetoothUUID(0xFFF0) }?.characteristics?.first { $0.uuid == BluetoothUUID(0xFFF2) })
        XCTAssertEqual(signedOnly.properties, .authenticatedSignedWrites)

        // Not bonded yet: there is no key to sign with, and the app hears what a peer would say.
        do {
            try await peripheral.writeValue(Data([0x01]), for: signedOnly, type: .withoutResponse)
            XCTFail("a signed write without a bond was sent")
        } catch let error as ATTError {
            XCTAssertEqual(error.code, .insufficientAuthentication)
        }

        // notifyEncryptionRequired is notify on the air; subscribing needs an encrypted link, so the stack pairs (and
        // bonds) first. Then the central comes back on a link that is not encrypted.
        let guarded = try XCTUnwrap(services.first { $0.uuid == BluetoothUUID(0xFFF0) }?.characteristics?.first { $0.uuid == BluetoothUUID(0xFFF1) })
        XCTAssertEqual(guarded.properties, .notify)
        XCTAssertTrue(user.recorder.all.isEmpty, "no pairing yet")
        try await peripheral.setNotifying(true, for: guarded)
        XCTAssertNotNil(user.recorder.wait(for: "finished true bonded true"), "subscribing paired: \(user.recorder.all)")
        XCTAssertTrue(guarded.isNotifying)
        central.cancelPeripheralConnection(peripheral)
        XCTAssertNotNil(client.recorder.wait(for: "disconnected"))
        try await central.connected(to: peripheral)
        services = try await peripheral.services(discovering: nil)
        signedOnly = try XCTUnwrap(services.first { $0.uuid == BluetoothUUID(0xFFF0) }?.characteristics?.first { $0.uuid == BluetoothUUID(0xFFF2) })

        let monitor = try HCIMonitor(hcidSocket: "\(scratch.root)/run0/hcid.sock")
        for value: UInt8 in [0xAB, 0xCD] {
            try await peripheral.writeValue(Data([value]), for: signedOnly, type: .withoutResponse)
            let sent = monitor.sentPDUs(within: .seconds(5)) { $0.first == 0xD2 }
            let signed = try XCTUnwrap(sent.last { $0.first == 0xD2 }, "no Signed Write Command on the air: \(sent.map { $0.first ?? 0 })")
            XCTAssertEqual(signed.count, 1 + 2 + 1 + 12, "opcode, handle, value, signature")
            XCTAssertEqual(signed[3], value)
            XCTAssertNotNil(app.recorder.wait(for: "write FFF2=\(String(format: "%02x", value))"), "\(app.recorder.all)")
        }
        XCTAssertEqual(app.recorder.all.filter { $0.hasPrefix("write") }.count, 2, "each signed write once: \(app.recorder.all)")
        withExtendedLifetime((manager, central, peripheralUser, user)) {}
    }
}
