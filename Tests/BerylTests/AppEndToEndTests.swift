import Beryl
import BerylDaemonKit
import BerylSupervisor
import BerylTestSupport
import BerylWire
import Dispatch
import Foundation
import Synchronization
import XCTest

final class AppEndToEndTests: TwoStacksTestCase {

    func testAHeartRateCentralAndPeripheralAppEndToEnd() async throws {
        let queue = DispatchQueue(label: "app")
        let app = HeartRatePeripheral()
        let peripheralManager = PeripheralManager(delegate: app, queue: queue, socketPath: socket(1))
        XCTAssertNotNil(app.recorder.wait(for: "state poweredOn"))

        let service = MutableService(type: BluetoothUUID(0x180D), primary: true)
        service.characteristics = [app.location, app.control, app.measurement, app.cached]
        try await peripheralManager.add(service)
        peripheralManager.startAdvertising(AdvertisingOptions(localName: "Beryl HR", serviceUUIDs: [BluetoothUUID(0x180D)]))
        XCTAssertEqual(app.recorder.wait(for: "advertising"), "advertising ok")

        let client = HeartRateCentral()
        let central = CentralManager(delegate: client, queue: queue, socketPath: socket(0))
        XCTAssertNotNil(client.recorder.wait(for: "state poweredOn"))
        let found = await central.firstDiscovery(of: BluetoothUUID(0x180D))
        let discovery = try XCTUnwrap(found)
        XCTAssertEqual(discovery.advertisementData.serviceUUIDs, [BluetoothUUID(0x180D)])
        XCTAssertEqual(discovery.advertisementData.localName, "Beryl HR")
        XCTAssertTrue(discovery.advertisementData.isConnectable)
        let peripheral = discovery.peripheral
        peripheral.delegate = client

        try await central.connected(to: peripheral)
        XCTAssertEqual(peripheral.state, .connected)
        XCTAssertNotNil(client.recorder.wait(for: "connected"))

        peripheral.discoverServices([BluetoothUUID(0x180D)])
        let discovered = client.recorder.wait(for: "services", timeout: 10)
        let heart = try XCTUnwrap(peripheral.services?.first, "\(discovered ?? "no didDiscoverServices in 10 s"); the central heard \(client.recorder.all)")
        XCTAssertEqual(heart.uuid, BluetoothUUID(0x180D))
        XCTAssertNil(heart.characteristics, "service discovery alone finds no characteristics")
        peripheral.discoverCharacteristics(nil, for: heart)
        XCTAssertTrue(eventually { heart.characteristics != nil })
        let characteristics = try XCTUnwrap(heart.characteristics)
        func characteristic(_ uuid: UInt16) throws -> Characteristic { try XCTUnwrap(characteristics.first { $0.uuid == BluetoothUUID(uuid) }) }

        // A dynamic read is answered by the peripheral app; a cached one by the stack without asking it.
        let location = try await peripheral.readValue(for: characteristic(0x2A38))
        XCTAssertEqual(location, Data([0x01]))
        XCTAssertNotNil(app.recorder.wait(for: "read 2A38 offset 0"))
        let manufacturer = try await peripheral.readValue(for: characteristic(0x2A29))
        XCTAssertEqual(String(decoding: manufacturer, as: UTF8.self), "Beryl Labs")
        XCTAssertFalse(app.recorder.all.contains { $0.hasPrefix("read 2A29") }, "cached values never reach the app")

        try await peripheral.writeValue(Data([0x01]), for: characteristic(0x2A39))
        XCTAssertNotNil(app.recorder.wait(for: "write 2A39=01"))
        do {
            try await peripheral.writeValue(Data([0xFF]), for: characteristic(0x2A39))
            XCTFail("the peripheral app refused 0xFF")
        } catch let error as ATTError {
            XCTAssertEqual(error.code, .writeNotPermitted)
        }

        // Core Bluetooth's API misuse: a read of a write-only value and a write of a read-only one fail at once, typed.
        for (attempt, expected) in [(0x2A39, UInt8(0x02)), (0x2A38, UInt8(0x03))] {
            do {
                if expected == 0x02 { _ = try await peripheral.readValue(for: characteristic(UInt16(attempt))) }
                else { try await peripheral.writeValue(Data([1]), for: characteristic(UInt16(attempt))) }
                XCTFail("misuse on \(attempt) was allowed")
            } catch let error as ATTError {
                XCTAssertEqual(error.code.rawValue, Int(expected))
            }
        }

        peripheral.setNotifyValue(true, for: try characteristic(0x2A37))
        XCTAssertNotNil(client.recorder.wait(for: "notifying 2A37 true"))
        let subscribed = try XCTUnwrap(app.recorder.wait(for: "subscribed 2A37"))
        XCTAssertTrue(subscribed.hasSuffix("max 514"), subscribed)
        for beat in 60..<63 {
            XCTAssertTrue(peripheralManager.updateValue(Data([0, UInt8(beat)]), for: app.measurement, onSubscribedCentrals: nil))
        }
        XCTAssertNotNil(client.recorder.wait(for: "value 2A37 003e"))
        XCTAssertEqual(app.measurement.subscribedCentrals?.count, 1)

        XCTAssertEqual(central.retrievePeripherals(withIdentifiers: [peripheral.identifier]).first?.identifier, peripheral.identifier)
        XCTAssertEqual(central.retrieveConnectedPeripherals(withServices: [BluetoothUUID(0x180D)]).map(\.identifier), [peripheral.identifier])
        XCTAssertEqual(peripheral.maximumWriteValueLength(for: .withoutResponse), 514)
        XCTAssertEqual(peripheral.maximumWriteValueLength(for: .withResponse), 512)

        central.cancelPeripheralConnection(peripheral)
        XCTAssertEqual(client.recorder.wait(for: "disconnected"), "disconnected cleanly")
        XCTAssertNotNil(app.recorder.wait(for: "advertising ok", timeout: 1), "the peripheral advertises again once the central has gone")
        withExtendedLifetime((central, peripheralManager)) {}
    }

    /// Included services: a secondary service and a primary one, included by a third; the central finds them
    /// through discoverIncludedServices, the primary one as the very service object discovery made.
    func testIncludedServicesAreDiscovered() async throws {
        let queue = DispatchQueue(label: "app")
        let app = HeartRatePeripheral()
        let manager = PeripheralManager(delegate: app, queue: queue, socketPath: socket(1))
        XCTAssertNotNil(app.recorder.wait(for: "state poweredOn"))
        let battery = MutableService(type: BluetoothUUID(0x180F), primary: false)
        battery.characteristics = [MutableCharacteristic(type: BluetoothUUID(0x2A19), properties: .read, value: Data([90]), permissions: .readable)]
        let device = MutableService(type: BluetoothUUID(0x180A), primary: true)
        device.characteristics = [app.cached]
        let heart = MutableService(type: BluetoothUUID(0x180D), primary: true)
        heart.characteristics = [app.location]
        heart.includedServices = [battery, device]
        do {
            try await manager.add(heart)
            XCTFail("included services must be added first")
        } catch let error as BluetoothError {
            XCTAssertEqual(error.code, .invalidParameters, "API misuse")
        }
        try await manager.add(battery)
        try await manager.add(device)
        try await manager.add(heart)
        manager.startAdvertising(AdvertisingOptions(localName: "Included", serviceUUIDs: [BluetoothUUID(0x180D)]))

        let client = IncludedServicesCentral()
        let central = CentralManager(delegate: client, queue: queue, socketPath: socket(0))
        XCTAssertNotNil(client.recorder.wait(for: "state poweredOn"))
        let found = await central.firstDiscovery(of: BluetoothUUID(0x180D))
        let peripheral = try XCTUnwrap(found?.peripheral)
        peripheral.delegate = client
        try await central.connected(to: peripheral)
        let services = try await peripheral.services(discovering: nil)
        let heartService = try XCTUnwrap(services.first { $0.uuid == BluetoothUUID(0x180D) })
        XCTAssertFalse(services.contains { $0.uuid == BluetoothUUID(0x180F) }, "a secondary service is not found by primary discovery")
        peripheral.discoverIncludedServices(nil, for: heartService)
        XCTAssertEqual(client.recorder.wait(for: "included"), "included 180D: 180F secondary, 180A primary")
        let deviceInfo = try XCTUnwrap(heartService.includedServices?.first { $0.uuid == BluetoothUUID(0x180A) })
        XCTAssertTrue(deviceInfo === services.first { $0.uuid == BluetoothUUID(0x180A) }, "the included primary service is the discovered object")
        // A second, filtered call adds nothing new (discovery adds to what was found) and calls back once more.
        peripheral.discoverIncludedServices([BluetoothUUID(0x180F)], for: heartService)
        XCTAssertTrue(eventually { client.recorder.all.filter { $0 == "included 180D: 180F secondary, 180A primary" }.count == 2 },
                      client.recorder.all.joined(separator: "\n"))
        central.cancelPeripheralConnection(peripheral)
        withExtendedLifetime((central, manager)) {}
    }

    /// Core Bluetooth's API misuse: a GATT operation on a peripheral that is not connected is a typed error, and the
    /// session stays usable.
    func testMisuseGetsTypedErrors() async throws {
        let client = HeartRateCentral()
        let central = CentralManager(delegate: client, queue: DispatchQueue(label: "app"), socketPath: socket(0))
        XCTAssertNotNil(client.recorder.wait(for: "state poweredOn"))
        XCTAssertEqual(central.retrievePeripherals(withIdentifiers: [UUID()]).count, 0, "an identifier never seen")
        // No stack at the socket: a state with its reason, as Core Bluetooth reports a missing service, not a throw.
        let absent = CentralManager(delegate: nil, queue: nil, socketPath: scratch.root + "/nothing.sock")
        XCTAssertTrue(eventually { absent.state == .poweredOff }, "state \(absent.state)")
        XCTAssertTrue(absent.stateReason?.contains("nothing.sock") == true, absent.stateReason ?? "no reason")
        withExtendedLifetime(central) {}
    }
}
