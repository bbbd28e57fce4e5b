import Beryl
import BerylSupervisor
import BerylTestSupport
import Dispatch
import Foundation
import Synchronization
import XCTest

/// A peripheral app that sends numbered values as fast as updateValue takes them, waiting for
/// peripheralManagerIsReady after each false, as the programming guide says.
final class Flooder: PeripheralManagerDelegate, Sendable {
    let recorder = Recorder()
    let ready = DispatchSemaphore(value: 0)
    let refusals = Atomic<Int>(0)
    let characteristic: MutableCharacteristic

    init(_ uuid: UInt16, properties: CharacteristicProperties = .notify) {
        characteristic = MutableCharacteristic(type: BluetoothUUID(uuid), properties: properties, value: nil, permissions: .readable)
    }

    func peripheralManagerDidUpdateState(_ peripheral: PeripheralManager) { recorder.note("state \(peripheral.state)") }
    /// The longest value the subscribed central takes (its ATT_MTU less 3).
    let maximumLength = Atomic<Int>(0)
    func peripheralManager(_ peripheral: PeripheralManager, central: Central, didSubscribeTo characteristic: Characteristic) {
        maximumLength.store(central.maximumUpdateValueLength, ordering: .relaxed)
        recorder.note("subscribed \(characteristic.uuid)")
    }
    func peripheralManagerIsReady(toUpdateSubscribers peripheral: PeripheralManager) { ready.signal() }

    /// Values numbered `range`, each starting with its number (two bytes, big-endian), `length` bytes in all, from
    /// the calling thread.
    func flood(_ manager: PeripheralManager, _ range: Range<Int>, length: Int) -> Bool {
        for sequence in range {
            let value = Data([UInt8(sequence >> 8), UInt8(sequence & 0xFF)] + [UInt8](repeating: 0xA5, count: length - 2))
            while !manager.updateValue(value, for: characteristic, onSubscribedCentrals: nil) {
                refusals.add(1, ordering: .relaxed)
                guard ready.wait(timeout: .now() + 10) == .success else { return false }
            }
        }
        return true
    }
}

/// Every value each characteristic delivered, in arrival order.
final class Collector: CentralManagerDelegate, PeripheralDelegate, Sendable {
    let recorder = Recorder()
    let values = Mutex<[BluetoothUUID: [Int]]>([:])
    func centralManagerDidUpdateState(_ central: CentralManager) { recorder.note("state \(central.state)") }
    func centralManager(_ central: CentralManager, didDisconnectPeripheral peripheral: Peripheral, error: Error?) { recorder.note("disconnected") }
    let lengths = Mutex<Set<Int>>([])
    func peripheral(_ peripheral: Peripheral, didUpdateValueFor characteristic: Characteristic, error: Error?) {
        guard let value = characteristic.value, value.count >= 2 else { return }
        values.withLock { $0[characteristic.uuid, default: []].append(Int(value[0]) << 8 | Int(value[1])) }
        _ = lengths.withLock { $0.insert(value.count) }
    }
    /// The peripheral whose values it subscribed to.
    let subscribed = Mutex<Peripheral?>(nil)
    func peripheral(_ peripheral: Peripheral, didUpdateNotificationStateFor characteristic: Characteristic, error: Error?) {
        subscribed.withLock { $0 = peripheral }
        recorder.note("notifying \(characteristic.uuid) \(characteristic.isNotifying)")
    }
    func received(_ uuid: UInt16) -> [Int] { values.withLock { $0[BluetoothUUID(uuid)] ?? [] } }
}

extension TwoStacksTestCase {
    var floodUUIDs: [UInt16] { [0xFFF1, 0xFFF2, 0xFFF3, 0xFFF4] }

    func publish(_ managers: [PeripheralManager], _ apps: [Flooder]) async throws {
        for (manager, app) in zip(managers, apps) {
            let service = MutableService(type: BluetoothUUID(0xFFE0), primary: true)
            service.characteristics = [app.characteristic]
            try await manager.add(service)
        }
        managers[0].startAdvertising(AdvertisingOptions(localName: "Flood", serviceUUIDs: [BluetoothUUID(0xFFE0)]))
    }

    func subscribe(_ central: CentralManager, _ collector: Collector, _ apps: [Flooder]) async throws {
        let found = await central.firstDiscovery(of: BluetoothUUID(0xFFE0))
        let peripheral = try XCTUnwrap(found).peripheral
        peripheral.delegate = collector
        try await central.connected(to: peripheral)
        let services = try await peripheral.services(discovering: nil)
        for uuid in floodUUIDs {
            let characteristic = try XCTUnwrap(services.flatMap { $0.characteristics ?? [] }.first { $0.uuid == BluetoothUUID(uuid) })
            let before = collector.recorder.all.count
            peripheral.setNotifyValue(true, for: characteristic)
            XCTAssertTrue(eventually { collector.recorder.all.dropFirst(before).contains("notifying \(BluetoothUUID(uuid)) true") })
        }
    }

    /// Each app's manager on stack 1 publishes its characteristic; one central on stack 0 subscribes to all four.
    func publishAndSubscribe(_ apps: [Flooder], appIDs: [String?]? = nil) async throws -> ([PeripheralManager], CentralManager, Collector) {
        let ids = appIDs ?? apps.map { _ in nil }
        let managers = zip(apps, ids).map { PeripheralManager(delegate: $0, queue: DispatchQueue(label: "app"), appID: $1, socketPath: socket(1)) }
        for app in apps { XCTAssertNotNil(app.recorder.wait(for: "state poweredOn")) }
        try await publish(managers, apps)
        let collector = Collector()
        let central = CentralManager(delegate: collector, queue: DispatchQueue(label: "central"), socketPath: socket(0))
        XCTAssertNotNil(collector.recorder.wait(for: "state poweredOn"))
        try await subscribe(central, collector, apps)
        for app in apps { XCTAssertNotNil(app.recorder.wait(for: "subscribed")) }
        return (managers, central, collector)
    }

    /// Each app sends values `from..<to` of `length` bytes; the central must hear exactly those after what it heard before.
    /// `mustBeRefused`: the link is slower than the apps, so updateValue must have said false (and the ready followed).
    func flood(_ managers: [PeripheralManager], _ apps: [Flooder], _ collector: Collector, _ range: Range<Int>, length: Int = 20,
               mustBeRefused: Bool = true) async {
        let heardBefore = floodUUIDs.map { collector.received($0).count }
        let group = DispatchGroup()
        let failures = Recorder()
        for (manager, app) in zip(managers, apps) {
            DispatchQueue.global().async(group: group) {
                if !app.flood(manager, range, length: length) { failures.note("no peripheralManagerIsReady within 10 s") }
            }
        }
        await withCheckedContinuation { done in group.notify(queue: .global()) { done.resume() } }
        XCTAssertEqual(failures.all, [])
        XCTAssertTrue(eventually(.seconds(30)) { zip(self.floodUUIDs, heardBefore).allSatisfy { collector.received($0).count >= $1 + range.count } },
                      "received \(floodUUIDs.map { collector.received($0).count }) after \(heardBefore), \(range.count) more each expected")
        for (uuid, before) in zip(floodUUIDs, heardBefore) {
            XCTAssertEqual(Array(collector.received(uuid).dropFirst(before)), Array(range), "app \(BluetoothUUID(uuid))'s values, once each and in order")
        }
        if mustBeRefused {
            XCTAssertGreaterThan(apps.map { $0.refusals.load(ordering: .relaxed) }.reduce(0, +), 0,
                                 "no updateValue was refused: the apps never outran the link")
        }
    }
}
