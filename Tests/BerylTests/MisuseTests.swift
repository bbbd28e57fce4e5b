import Beryl
import BerylDaemonKit
import Dispatch
import Foundation
import Synchronization
import XCTest

/// A peripheral app that answers every read twice: Core Bluetooth's one-answer rule.
final class DoubleAnswerer: PeripheralManagerDelegate {
    let recorder = Recorder()
    func peripheralManagerDidUpdateState(_ peripheral: PeripheralManager) { recorder.note("state \(peripheral.state)") }
    func peripheralManager(_ peripheral: PeripheralManager, didReceiveRead request: ATTRequest) {
        request.value = Data([0x2A])
        peripheral.respond(to: request, withResult: .success)
        peripheral.respond(to: request, withResult: .success)
    }
    func peripheralManager(_ peripheral: PeripheralManager, didReceiveWrite requests: [ATTRequest]) {
        // One answer covers the batch; answering its second request is the same misuse.
        peripheral.respond(to: requests[0], withResult: .success)
        if requests.count > 1 { peripheral.respond(to: requests[1], withResult: .success) }
        recorder.note("write \(requests.count)")
    }
}

/// Every misuse a Core Bluetooth app can make gets the typed error Core Bluetooth gives, nothing reaches the air,
/// and the session stays usable afterwards.
final class MisuseTests: TwoStacksTestCase {
    /// `add` fails as Core Bluetooth's API misuse (invalidParameters), for the reason given.
    private func assertRefused(_ manager: PeripheralManager, adding service: MutableService, saying reason: String,
                               file: StaticString = #filePath, line: UInt = #line) async {
        do {
            try await manager.add(service)
            XCTFail("\(service) was published", file: file, line: line)
        } catch let error as BluetoothError {
            XCTAssertEqual(error.code, .invalidParameters, file: file, line: line)
            XCTAssertTrue(error.message.contains(reason), error.message, file: file, line: line)
        } catch {
            XCTFail("\(error)", file: file, line: line)
        }
    }

    func testCallsBeforePoweredOnAreMisuse() async throws {
        // A managerd with no controller behind it: the managers stay unknown (never poweredOn).
        let lonely = scratch.root + "/lonely"
        try scratch.start("managerd-lonely", [Executables.path("managerd"), "--runtime-dir", lonely, "--state-dir", lonely + "-state"],
                          socket: lonely + "/managerd.sock")
        let misuse = Recorder()
        let client = HeartRateCentral()
        let central = CentralManager(delegate: client, queue: DispatchQueue(label: "app"), socketPath: lonely + "/managerd.sock")
        central.apiMisuseHandler = { misuse.note("\($0)") }
        usleep(300_000)
        XCTAssertNotEqual(central.state, .poweredOn)
        central.scanForPeripherals(withServices: nil)
        XCTAssertNotNil(misuse.wait(for: "the manager is not powered on"), misuse.all.joined(separator: "\n"))
        XCTAssertFalse(central.isScanning)
        var discoveries = 0
        for await _ in central.scan(withServices: nil) { discoveries += 1 }  // the stream ends: the scan was refused
        XCTAssertEqual(discoveries, 0)

        let app = HeartRatePeripheral()
        let manager = PeripheralManager(delegate: app, queue: DispatchQueue(label: "app"), socketPath: lonely + "/managerd.sock")
        let service = MutableService(type: BluetoothUUID(0x180D), primary: true)
        service.characteristics = [app.location]
        do {
            try await manager.add(service)
            XCTFail("a service was added before poweredOn")
        } catch let error as BluetoothError {
            XCTAssertEqual(error.code, .unknown)
            XCTAssertEqual(error.message, BerylError.notPoweredOn.description)
        }
        manager.startAdvertising(AdvertisingOptions(localName: "Early"))
        XCTAssertEqual(app.recorder.wait(for: "advertising"), "advertising the manager is not powered on")
        XCTAssertFalse(manager.isAdvertising)
        withExtendedLifetime((central, manager)) {}
    }

    func testMisuseOnALiveLinkIsTypedAndTheSessionStaysUsable() async throws {
        let queue = DispatchQueue(label: "apps")
        let answerer = DoubleAnswerer()
        let manager = PeripheralManager(delegate: answerer, queue: queue, socketPath: socket(1))
        let peripheralMisuse = Recorder()
        manager.apiMisuseHandler = { peripheralMisuse.note("\($0)") }
        XCTAssertNotNil(answerer.recorder.wait(for: "state poweredOn"))
        let dynamic = MutableCharacteristic(type: BluetoothUUID(0x2A19), properties: [.read, .write], value: nil, permissions: [.readable, .writeable])
        let notifying = MutableCharacteristic(type: BluetoothUUID(0x2A37), properties: .notify, value: nil, permissions: .readable)
        let service = MutableService(type: BluetoothUUID(0x180F), primary: true)
        service.characteristics = [dynamic, notifying]
        try await manager.add(service)
        let removable = MutableService(type: BluetoothUUID(0x1809), primary: true)
        let temperature = MutableCharacteristic(type: BluetoothUUID(0x2A1C), properties: .read, value: Data([37]), permissions: .readable)
        removable.characteristics = [temperature]
        try await manager.add(removable)
        manager.startAdvertising(AdvertisingOptions(localName: "Misuse", serviceUUIDs: [BluetoothUUID(0x180F)]))

        let client = HeartRateCentral()
        let central = CentralManager(delegate: client, queue: queue, socketPath: socket(0))
        XCTAssertNotNil(client.recorder.wait(for: "state poweredOn"))
        let found = await central.firstDiscovery(of: BluetoothUUID(0x180F))
        let peripheral = try XCTUnwrap(found?.peripheral)
        peripheral.delegate = client

        // GATT before connecting: not connected.
        do {
            _ = try await peripheral.services(discovering: nil)
            XCTFail("discovery without a connection")
        } catch let error as BluetoothError {
            XCTAssertEqual(error.code, .notConnected)
        }

        try await central.connected(to: peripheral)
        let services = try await peripheral.services(discovering: nil)
        let level = try XCTUnwrap(services.first { $0.uuid == BluetoothUUID(0x180F) }?.characteristics?.first { $0.uuid == BluetoothUUID(0x2A19) })
        let heart = try XCTUnwrap(services.first { $0.uuid == BluetoothUUID(0x180F) }?.characteristics?.first { $0.uuid == BluetoothUUID(0x2A37) })
        let thermometer = try XCTUnwrap(services.first { $0.uuid == BluetoothUUID(0x1809) }?.characteristics?.first)

        // Responding twice: the first answer reaches the central, the second is misuse and sends nothing.
        let value = try await peripheral.readValue(for: level)
        XCTAssertEqual(value, Data([0x2A]))
        XCTAssertNotNil(peripheralMisuse.wait(for: "API misuse: request"), peripheralMisuse.all.joined(separator: "\n"))

        // Properties the characteristic does not have: typed ATT errors at once.
        do {
            try await peripheral.writeValue(Data([1]), for: heart, type: .withResponse)
            XCTFail("a write to a notify-only characteristic")
        } catch let error as ATTError { XCTAssertEqual(error.code.rawValue, 0x03) }
        do {
            _ = try await peripheral.readValue(for: heart)
            XCTFail("a read of a notify-only characteristic")
        } catch let error as ATTError { XCTAssertEqual(error.code.rawValue, 0x02) }
        do {
            try await peripheral.setNotifying(true, for: level)
            XCTFail("notifications from a characteristic that does not notify")
        } catch let error as ATTError { XCTAssertEqual(error.code.rawValue, 0x06) }
        do {
            try await peripheral.writeValue(Data([1]), for: level, type: .withoutResponse)
            XCTFail("a command to a characteristic without writeWithoutResponse")
        } catch let error as ATTError { XCTAssertEqual(error.code.rawValue, 0x03) }

        // updateValue of a characteristic this manager never published: false, and misuse.
        let stranger = MutableCharacteristic(type: BluetoothUUID(0x2A00), properties: .notify, value: nil, permissions: .readable)
        XCTAssertFalse(manager.updateValue(Data([1]), for: stranger, onSubscribedCentrals: nil))
        XCTAssertNotNil(peripheralMisuse.wait(for: "API misuse: handle"), peripheralMisuse.all.joined(separator: "\n"))

        // What Core Bluetooth's subclass types refuse at compile time is misuse here (one class each, for Sendable):
        // updating a discovered characteristic, publishing a discovered service or one with a discovered characteristic.
        XCTAssertFalse(manager.updateValue(Data([1]), for: level, onSubscribedCentrals: nil))
        XCTAssertNotNil(peripheralMisuse.wait(for: "API misuse: updateValue needs a MutableCharacteristic"), peripheralMisuse.all.joined(separator: "\n"))
        let discovered = try XCTUnwrap(services.first { $0.uuid == BluetoothUUID(0x180F) })
        await assertRefused(manager, adding: discovered, saying: "a discovered service cannot be published")
        // A discovered object's setters leave the peer's database as it was, and say so.
        let centralMisuse = Recorder()
        central.apiMisuseHandler = { centralMisuse.note("\($0)") }
        level.value = Data([0x63])
        level.properties = [.read, .write, .notify]
        XCTAssertNotNil(centralMisuse.wait(for: "API misuse: value of a discovered Characteristic is the peer's"), centralMisuse.all.joined(separator: "\n"))
        XCTAssertNotNil(centralMisuse.wait(for: "API misuse: properties of a discovered Characteristic"), centralMisuse.all.joined(separator: "\n"))
        XCTAssertEqual(level.value, Data([0x2A]), "still the value last read")
        XCTAssertEqual(level.properties, [.read, .write])
        discovered.characteristics = nil
        XCTAssertEqual(discovered.characteristics?.count, 2)
        let including = MutableService(type: BluetoothUUID(0x181B), primary: true)
        including.includedServices = [discovered]
        await assertRefused(manager, adding: including, saying: "a published service includes only services the app made")
        let borrowing = MutableService(type: BluetoothUUID(0x181A), primary: true)
        borrowing.characteristics = [heart]
        await assertRefused(manager, adding: borrowing, saying: "must be MutableCharacteristic")

        // Reading a handle that is no longer there (the service went): Invalid Handle from the peer, after which
        // Service Changed tells the central what went.
        manager.remove(removable)
        usleep(300_000)
        do {
            _ = try await peripheral.readValue(for: thermometer)
            XCTFail("a read of a removed characteristic")
        } catch let error as ATTError {
            XCTAssertTrue([0x01, 0x0A].contains(error.code.rawValue), "Invalid Handle (or Attribute Not Found), got \(error.code)")
        }
        manager.remove(removable)  // twice: nothing published there any more
        XCTAssertNotNil(peripheralMisuse.wait(for: "API misuse: this manager published no service"), peripheralMisuse.all.joined(separator: "\n"))

        // After all that, both sessions still work.
        try await peripheral.writeValue(Data([7]), for: level, type: .withResponse)
        XCTAssertNotNil(answerer.recorder.wait(for: "write 1"))
        let again = try await peripheral.readValue(for: level)
        XCTAssertEqual(again, Data([0x2A]))
        central.cancelPeripheralConnection(peripheral)
        withExtendedLifetime((central, manager)) {}
    }
}
