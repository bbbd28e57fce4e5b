import Beryl
import BerylDaemonKit
import BerylSupervisor
import BerylTestSupport
import Dispatch
import Foundation
import Synchronization
import XCTest

/// A central written purely in the delegate style of the programming guide: each callback starts the next step.
final class GuideCentral: CentralManagerDelegate, PeripheralDelegate {
    let recorder = Recorder()
    let control = BluetoothUUID(0x2A39)
    let measurement = BluetoothUUID(0x2A37)
    let stream = BluetoothUUID("6E400002-B5A3-F393-E0A9-E50E24DCCA9E")!

    func centralManagerDidUpdateState(_ central: CentralManager) { recorder.note("state \(central.state)") }
    func centralManager(_ central: CentralManager, didConnect peripheral: Peripheral) {
        recorder.note("connected")
        peripheral.delegate = self
        peripheral.discoverServices(nil)
    }
    func centralManager(_ central: CentralManager, didFailToConnect peripheral: Peripheral, error: Error?) {
        recorder.note("failed to connect \(error.map { "\($0)" } ?? "-")")
    }
    func centralManager(_ central: CentralManager, didDisconnectPeripheral peripheral: Peripheral, error: Error?) {
        recorder.note("disconnected \(error.map { "\($0)" } ?? "cleanly")")
    }
    func peripheral(_ peripheral: Peripheral, didDiscoverServices error: Error?) {
        recorder.note("services \((peripheral.services ?? []).map(\.uuid.description).sorted().joined(separator: ","))")
        for service in peripheral.services ?? [] where service.uuid == BluetoothUUID(0x180D) {
            peripheral.discoverCharacteristics([control, measurement, stream], for: service)
        }
    }
    func peripheral(_ peripheral: Peripheral, didDiscoverCharacteristicsFor service: Service, error: Error?) {
        recorder.note("characteristics \((service.characteristics ?? []).map(\.uuid.description).sorted().joined(separator: ","))")
        for characteristic in service.characteristics ?? [] where characteristic.uuid == measurement {
            peripheral.discoverDescriptors(for: characteristic)
        }
    }
    func peripheral(_ peripheral: Peripheral, didDiscoverDescriptorsFor characteristic: Characteristic, error: Error?) {
        recorder.note("descriptors \(characteristic.uuid) \((characteristic.descriptors ?? []).map(\.uuid.description).joined(separator: ","))")
        peripheral.setNotifyValue(true, for: characteristic)
    }
    func peripheral(_ peripheral: Peripheral, didUpdateNotificationStateFor characteristic: Characteristic, error: Error?) {
        recorder.note("notifying \(characteristic.uuid) \(characteristic.isNotifying)")
    }
    func peripheral(_ peripheral: Peripheral, didUpdateValueFor characteristic: Characteristic, error: Error?) {
        recorder.note("value \(characteristic.uuid) \(characteristic.value?.count ?? 0)")
    }
    func peripheral(_ peripheral: Peripheral, didWriteValueFor characteristic: Characteristic, error: Error?) {
        recorder.note("wrote \(characteristic.uuid) \(error.map { "\($0)" } ?? "ok")")
    }
    func peripheral(_ peripheral: Peripheral, didModifyServices invalidatedServices: [Service]) {
        recorder.note("modified \(invalidatedServices.map(\.uuid.description).joined(separator: ","))")
    }
    func peripheralIsReady(toSendWriteWithoutResponse peripheral: Peripheral) {
        recorder.note("ready to write \(peripheral.canSendWriteWithoutResponse)")
    }
}

final class GuidePeripheral: PeripheralManagerDelegate {
    let recorder = Recorder()
    let commands = Mutex(0)
    func peripheralManagerDidUpdateState(_ peripheral: PeripheralManager) { recorder.note("state \(peripheral.state)") }
    func peripheralManager(_ peripheral: PeripheralManager, didAdd service: Service, error: Error?) {
        recorder.note("added \(service.uuid) \(error.map { "\($0)" } ?? "ok")")
    }
    func peripheralManager(_ peripheral: PeripheralManager, didReceiveWrite requests: [ATTRequest]) {
        if requests.allSatisfy({ !$0.expectsResponse }) {
            commands.withLock { $0 += requests.count }
        } else {
            recorder.note("write \(requests.count)")
            peripheral.respond(to: requests[0], withResult: .success)
        }
    }
    func peripheralManager(_ peripheral: PeripheralManager, central: Central, didSubscribeTo characteristic: Characteristic) {
        recorder.note("subscribed \(characteristic.uuid)")
    }
    func peripheralManager(_ peripheral: PeripheralManager, central: Central, didUnsubscribeFrom characteristic: Characteristic) {
        recorder.note("unsubscribed \(characteristic.uuid)")
    }
    func peripheralManagerIsReady(toUpdateSubscribers peripheral: PeripheralManager) { recorder.note("ready to update") }
}

/// Every delegate callback of the issue's list, driven the way the programming guide's code drives them, including
/// the two flow-control callbacks (a full transmit queue on either side) and services changing under a central.
/// Calls the delegate-style method where an async test would otherwise pick its async twin.
func delegateStyle(_ body: () -> Void) { body() }

final class DelegateCallbackTests: TwoStacksTestCase {

    func testTheProgrammingGuidesCallbacksInOrder() async throws {
        let app = GuidePeripheral()
        let manager = PeripheralManager(delegate: app, queue: DispatchQueue(label: "peripheral"), socketPath: socket(1))
        XCTAssertNotNil(app.recorder.wait(for: "state poweredOn"))
        let measurement = MutableCharacteristic(type: BluetoothUUID(0x2A37), properties: .notify, value: nil, permissions: .readable)
        measurement.descriptors = [MutableDescriptor(type: BluetoothUUID(0x2901), value: Data("beats".utf8))]
        let control = MutableCharacteristic(type: BluetoothUUID(0x2A39), properties: .write, value: nil, permissions: .writeable)
        let stream = MutableCharacteristic(type: BluetoothUUID("6E400002-B5A3-F393-E0A9-E50E24DCCA9E")!, properties: .writeWithoutResponse,
                                           value: nil, permissions: .writeable)
        let location = MutableCharacteristic(type: BluetoothUUID(0x2A38), properties: .read, value: Data([1]), permissions: .readable)
        let heart = MutableService(type: BluetoothUUID(0x180D), primary: true)
        heart.characteristics = [measurement, control, stream, location]
        delegateStyle { manager.add(heart) }
        XCTAssertEqual(app.recorder.wait(for: "added"), "added 180D ok")
        let extra = MutableService(type: BluetoothUUID(0x181A), primary: true)
        extra.characteristics = [MutableCharacteristic(type: BluetoothUUID(0x2A6E), properties: .read, value: Data([20]), permissions: .readable)]
        try await manager.add(extra)
        manager.startAdvertising(AdvertisingOptions(localName: "Guide", serviceUUIDs: [BluetoothUUID(0x180D)]))

        let client = GuideCentral()
        let central = CentralManager(delegate: client, queue: DispatchQueue(label: "central"), socketPath: socket(0))
        XCTAssertNotNil(client.recorder.wait(for: "state poweredOn"))
        let found = await central.firstDiscovery(of: BluetoothUUID(0x180D))
        let peripheral = try XCTUnwrap(found?.peripheral)
        delegateStyle { central.connect(peripheral) }
        XCTAssertNotNil(client.recorder.wait(for: "connected"))
        XCTAssertEqual(client.recorder.wait(for: "services"), "services 1800,1801,180D,181A")
        XCTAssertEqual(client.recorder.wait(for: "characteristics"), "characteristics 2A37,2A39,6E400002-B5A3-F393-E0A9-E50E24DCCA9E",
                       "discoverCharacteristics gives the ones asked for")
        XCTAssertEqual(client.recorder.wait(for: "descriptors"), "descriptors 2A37 2902,2901")
        XCTAssertEqual(client.recorder.wait(for: "notifying"), "notifying 2A37 true")
        XCTAssertEqual(app.recorder.wait(for: "subscribed"), "subscribed 2A37")

        let characteristics = try XCTUnwrap(peripheral.services?.first { $0.uuid == BluetoothUUID(0x180D) }?.characteristics)
        let controlPoint = try XCTUnwrap(characteristics.first { $0.uuid == BluetoothUUID(0x2A39) })
        delegateStyle { peripheral.writeValue(Data([1]), for: controlPoint, type: .withResponse) }
        XCTAssertEqual(client.recorder.wait(for: "wrote"), "wrote 2A39 ok")
        XCTAssertEqual(app.recorder.wait(for: "write"), "write 1")

        // Notifications until updateValue says the queue is full, then the ready callback.
        var refused = false
        for _ in 0..<2_000 where !refused {
            refused = !manager.updateValue(Data(repeating: 7, count: 200), for: measurement, onSubscribedCentrals: nil)
        }
        XCTAssertTrue(refused, "the transmit queue never filled")
        XCTAssertNotNil(app.recorder.wait(for: "ready to update"))
        XCTAssertNotNil(client.recorder.wait(for: "value 2A37 200"))

        // Commands until canSendWriteWithoutResponse turns false, then peripheralIsReady.
        let streamCharacteristic = try XCTUnwrap(characteristics.first { $0.uuid == client.stream })
        var sent = 0
        let deadline = Date().addingTimeInterval(10)
        while peripheral.canSendWriteWithoutResponse, Date() < deadline {
            delegateStyle { peripheral.writeValue(Data(repeating: 9, count: 200), for: streamCharacteristic, type: .withoutResponse) }
            sent += 1
            if sent % 16 == 0 { usleep(1_000) }
        }
        XCTAssertFalse(peripheral.canSendWriteWithoutResponse, "the link's queue never filled after \(sent) commands")
        XCTAssertNotNil(client.recorder.wait(for: "ready to write"))
        XCTAssertTrue(eventually { peripheral.canSendWriteWithoutResponse }, "writes are allowed again once the queue drained")
        XCTAssertTrue(eventually { app.commands.withLock { $0 } > 0 })

        // The peripheral app removes a service: Service Changed reaches the central as didModifyServices.
        manager.remove(extra)
        XCTAssertEqual(client.recorder.wait(for: "modified"), "modified 181A")

        // Unsubscribing, then the central cancels.
        let beats = try XCTUnwrap(characteristics.first { $0.uuid == BluetoothUUID(0x2A37) })
        peripheral.setNotifyValue(false, for: beats)
        XCTAssertNotNil(client.recorder.wait(for: "notifying 2A37 false"))
        XCTAssertEqual(app.recorder.wait(for: "unsubscribed"), "unsubscribed 2A37")
        central.cancelPeripheralConnection(peripheral)
        XCTAssertEqual(client.recorder.wait(for: "disconnected"), "disconnected cleanly")
        withExtendedLifetime((central, manager)) {}
    }

    /// State changes that arrive while the app's queue is busy are each heard with the state they report (Core
    /// Bluetooth sets `state` just before the callback): resetting then poweredOn, never poweredOn twice, which made a
    /// peripheral app add its services twice after a controller reset.
    func testStateChangesQueuedBehindABusyDelegateAreHeardInTurn() throws {
        let app = GuidePeripheral()
        let queue = DispatchQueue(label: "peripheral")
        let manager = PeripheralManager(delegate: app, queue: queue, socketPath: socket(1))
        XCTAssertNotNil(app.recorder.wait(for: "state poweredOn"))
        let before = app.recorder.all.count
        let released = DispatchSemaphore(value: 0)
        queue.async { released.wait() }
        let run = "\(scratch.root)/run1"
        try scratch.crash("hcid1", socket: run + "/hcid.sock")
        usleep(1_000_000)  // managerd hears hcid go at once, and tells the app
        try scratch.start("hcid1-again", [Executables.path("hcid"), "--runtime-dir", run, "--state-dir", "\(scratch.root)/state1",
                                          "--transport", "unix:\(scratch.root)/sim/controller-1.sock"], socket: run + "/hcid.sock")
        XCTAssertTrue(eventually { StackProbe.controllerInfo(at: run + "/hcid.sock")?.state == .poweredOn })
        usleep(1_500_000)  // managerd reconnects to hcid and tells the app poweredOn, while its queue is still busy
        XCTAssertEqual(manager.state, .poweredOn, "still the state last reported: the app has not heard of the drop yet")
        released.signal()
        XCTAssertTrue(eventually { app.recorder.all.count > before + 1 && app.recorder.all.last == "state poweredOn" }, "\(app.recorder.all)")
        let heard = Array(app.recorder.all[before...])
        XCTAssertTrue(heard.first != "state poweredOn", "the drop is heard as what it was: \(heard)")
        XCTAssertFalse(zip(heard, heard.dropFirst()).contains { $0 == $1 }, "each callback reports a change: \(heard)")
        withExtendedLifetime(manager) {}
    }

    /// didFailToConnect: a connection the stack cannot attempt (its controller is not on) fails at once, typed.
    func testAConnectionThatCannotBeAttemptedFails() throws {
        let lonely = scratch.root + "/lonely"
        try scratch.start("managerd-lonely", [Executables.path("managerd"), "--runtime-dir", lonely, "--state-dir", lonely + "-state"],
                          socket: lonely + "/managerd.sock")
        let client = GuideCentral()
        let central = CentralManager(delegate: client, queue: DispatchQueue(label: "central"), socketPath: lonely + "/managerd.sock")
        let peripheral = try XCTUnwrap(central.retrievePeripheral(address: "C0:FF:EE:00:00:01/random"))
        XCTAssertEqual(central.retrievePeripherals(withIdentifiers: [peripheral.identifier]).first?.identifier, peripheral.identifier,
                       "an address named is remembered under its identifier")
        central.connect(peripheral)
        XCTAssertEqual(client.recorder.wait(for: "failed to connect"), "failed to connect the manager is not powered on")
        XCTAssertEqual(peripheral.state, .disconnected)
        XCTAssertNil(central.retrievePeripheral(address: "not an address"))
        withExtendedLifetime(central) {}
    }
}
