import Beryl
import BerylSupervisor
import Dispatch
import Foundation
import Synchronization
import XCTest

/// A peripheral app that sends numbered values as fast as updateValue takes them, waiting for
/// peripheralManagerIsReady after each false, as the programming guide says.
private final class Flooder: PeripheralManagerDelegate, Sendable {
    let recorder = Recorder()
    let ready = DispatchSemaphore(value: 0)
    let refusals = Atomic<Int>(0)
    let characteristic: MutableCharacteristic

    init(_ uuid: UInt16) {
        characteristic = MutableCharacteristic(type: BluetoothUUID(uuid), properties: .notify, value: nil, permissions: .readable)
    }

    func peripheralManagerDidUpdateState(_ peripheral: PeripheralManager) { recorder.note("state \(peripheral.state)") }
    func peripheralManager(_ peripheral: PeripheralManager, central: Central, didSubscribeTo characteristic: Characteristic) {
        recorder.note("subscribed \(characteristic.uuid)")
    }
    func peripheralManagerIsReady(toUpdateSubscribers peripheral: PeripheralManager) { ready.signal() }

    /// Values 0..<count, each two bytes big-endian, from the calling thread.
    func flood(_ manager: PeripheralManager, count: Int) -> Bool {
        for sequence in 0..<count {
            let value = Data([UInt8(sequence >> 8), UInt8(sequence & 0xFF)] + [UInt8](repeating: 0xA5, count: 18))
            while !manager.updateValue(value, for: characteristic, onSubscribedCentrals: nil) {
                refusals.add(1, ordering: .relaxed)
                guard ready.wait(timeout: .now() + 10) == .success else { return false }
            }
        }
        return true
    }
}

/// Every value each characteristic delivered, in arrival order.
private final class Collector: CentralManagerDelegate, PeripheralDelegate, Sendable {
    let recorder = Recorder()
    let values = Mutex<[BluetoothUUID: [Int]]>([:])
    func centralManagerDidUpdateState(_ central: CentralManager) { recorder.note("state \(central.state)") }
    func peripheral(_ peripheral: Peripheral, didUpdateValueFor characteristic: Characteristic, error: Error?) {
        guard let value = characteristic.value, value.count >= 2 else { return }
        values.withLock { $0[characteristic.uuid, default: []].append(Int(value[0]) << 8 | Int(value[1])) }
    }
    func peripheral(_ peripheral: Peripheral, didUpdateNotificationStateFor characteristic: Characteristic, error: Error?) {
        recorder.note("notifying \(characteristic.uuid) \(characteristic.isNotifying)")
    }
    func received(_ uuid: UInt16) -> [Int] { values.withLock { $0[BluetoothUUID(uuid)] ?? [] } }
}

/// updateValue pipelines (values leave without waiting for one another's answers): four apps on one stack flood one
/// central at once on berylsim's default link. Their 4 × 16 values on their way exceed what attd holds for the link
/// (its 32-PDU outbox and the controller buffers hcid credits), so attd refuses, holds back and readies each app on
/// its own; every value still arrives once and in order.
final class PipelinedUpdateTests: TwoStacksTestCase {
    func testFourAppsFloodingOneCentralLoseAndReorderNothing() async throws {
        let uuids: [UInt16] = [0xFFF1, 0xFFF2, 0xFFF3, 0xFFF4]
        let apps = uuids.map { Flooder($0) }
        let managers = apps.map { PeripheralManager(delegate: $0, queue: DispatchQueue(label: "app"), socketPath: socket(1)) }
        for app in apps { XCTAssertNotNil(app.recorder.wait(for: "state poweredOn")) }
        for (manager, app) in zip(managers, apps) {
            let service = MutableService(type: BluetoothUUID(0xFFE0), primary: true)
            service.characteristics = [app.characteristic]
            try await manager.add(service)
        }
        managers[0].startAdvertising(AdvertisingOptions(localName: "Flood", serviceUUIDs: [BluetoothUUID(0xFFE0)]))

        let collector = Collector()
        let central = CentralManager(delegate: collector, queue: DispatchQueue(label: "central"), socketPath: socket(0))
        XCTAssertNotNil(collector.recorder.wait(for: "state poweredOn"))
        let found = await central.firstDiscovery(of: BluetoothUUID(0xFFE0))
        let peripheral = try XCTUnwrap(found).peripheral
        peripheral.delegate = collector
        try await central.connected(to: peripheral)
        let services = try await peripheral.services(discovering: nil)
        for uuid in uuids {
            let characteristic = try XCTUnwrap(services.flatMap { $0.characteristics ?? [] }.first { $0.uuid == BluetoothUUID(uuid) })
            peripheral.setNotifyValue(true, for: characteristic)
            XCTAssertNotNil(collector.recorder.wait(for: "notifying \(BluetoothUUID(uuid)) true"))
        }
        for app in apps { XCTAssertNotNil(app.recorder.wait(for: "subscribed")) }

        let count = 300
        let group = DispatchGroup()
        let failures = Recorder()
        for (manager, app) in zip(managers, apps) {
            DispatchQueue.global().async(group: group) {
                if !app.flood(manager, count: count) { failures.note("no peripheralManagerIsReady within 10 s") }
            }
        }
        await withCheckedContinuation { done in group.notify(queue: .global()) { done.resume() } }
        XCTAssertEqual(failures.all, [])
        XCTAssertTrue(eventually(.seconds(30)) { uuids.allSatisfy { collector.received($0).count >= count } },
                      "received \(uuids.map { collector.received($0).count }) of \(count) each")
        for uuid in uuids {
            XCTAssertEqual(collector.received(uuid), Array(0..<count), "app \(BluetoothUUID(uuid))'s values, once each and in order")
        }
        XCTAssertGreaterThan(apps.map { $0.refusals.load(ordering: .relaxed) }.reduce(0, +), 0,
                             "no updateValue was refused: the apps never outran the link")
        withExtendedLifetime((managers, central)) {}
    }
}
