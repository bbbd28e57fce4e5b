import Beryl
import BerylDaemonKit
import BerylSupervisor
import BerylTestSupport
import BerylWire
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
private final class Collector: CentralManagerDelegate, PeripheralDelegate, Sendable {
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
    func peripheral(_ peripheral: Peripheral, didUpdateNotificationStateFor characteristic: Characteristic, error: Error?) {
        recorder.note("notifying \(characteristic.uuid) \(characteristic.isNotifying)")
    }
    func received(_ uuid: UInt16) -> [Int] { values.withLock { $0[BluetoothUUID(uuid)] ?? [] } }
}

private extension TwoStacksTestCase {
    var uuids: [UInt16] { [0xFFF1, 0xFFF2, 0xFFF3, 0xFFF4] }

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
        for uuid in uuids {
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
        let heardBefore = uuids.map { collector.received($0).count }
        let group = DispatchGroup()
        let failures = Recorder()
        for (manager, app) in zip(managers, apps) {
            DispatchQueue.global().async(group: group) {
                if !app.flood(manager, range, length: length) { failures.note("no peripheralManagerIsReady within 10 s") }
            }
        }
        await withCheckedContinuation { done in group.notify(queue: .global()) { done.resume() } }
        XCTAssertEqual(failures.all, [])
        XCTAssertTrue(eventually(.seconds(30)) { zip(self.uuids, heardBefore).allSatisfy { collector.received($0).count >= $1 + range.count } },
                      "received \(uuids.map { collector.received($0).count }) after \(heardBefore), \(range.count) more each expected")
        for (uuid, before) in zip(uuids, heardBefore) {
            XCTAssertEqual(Array(collector.received(uuid).dropFirst(before)), Array(range), "app \(BluetoothUUID(uuid))'s values, once each and in order")
        }
        if mustBeRefused {
            XCTAssertGreaterThan(apps.map { $0.refusals.load(ordering: .relaxed) }.reduce(0, +), 0,
                                 "no updateValue was refused: the apps never outran the link")
        }
    }
}

/// updateValue pipelines (values leave without waiting for one another's answers): four apps on one stack flood one
/// central at once on berylsim's default link. Their 4 × 16 values on their way exceed what attd holds for the link
/// (its 32-PDU outbox and the controller buffers hcid credits), so attd refuses, holds back and readies each app on
/// its own; every value still arrives once and in order.
final class PipelinedUpdateTests: TwoStacksTestCase {
    func testFourAppsFloodingOneCentralLoseAndReorderNothing() async throws {
        let apps = uuids.map { Flooder($0) }
        let (managers, central, collector) = try await publishAndSubscribe(apps)
        await flood(managers, apps, collector, 0..<300)

        // The peripheral's controller goes (hcid killed and started again) while attd stays, with its count of each
        // app's ReadyToUpdate: the apps start counting afresh, and so must attd, or their values would be refused as
        // sent before a ReadyToUpdate for ever.
        let run = "\(scratch.root)/run1"
        let beforeCrash = apps.map { $0.recorder.all.count }
        try scratch.crash("hcid1", socket: run + "/hcid.sock")
        for (app, before) in zip(apps, beforeCrash) {
            XCTAssertTrue(eventually { app.recorder.all.dropFirst(before).contains { $0.hasPrefix("state ") && $0 != "state poweredOn" } })
        }
        let heard = apps.map { $0.recorder.all.count }
        try scratch.start("hcid1-again", [Executables.path("hcid"), "--runtime-dir", run, "--state-dir", "\(scratch.root)/state1",
                                          "--transport", "unix:\(scratch.root)/sim/controller-1.sock"], socket: run + "/hcid.sock")
        for (app, before) in zip(apps, heard) {
            XCTAssertTrue(eventually(.seconds(15)) { app.recorder.all.dropFirst(before).contains("state poweredOn") }, "\(app.recorder.all)")
        }
        XCTAssertTrue(eventually(.seconds(15)) { collector.recorder.all.contains { $0.hasPrefix("disconnected") } }, "\(collector.recorder.all)")
        try await publish(managers, apps)
        try await subscribe(central, collector, apps)
        await flood(managers, apps, collector, 300..<500)
        withExtendedLifetime((managers, central)) {}
    }

    /// Indications go one at a time (each confirmed before the next), so the four apps outrun the link at once: attd
    /// keeps at most 32 waiting per link and refuses the rest, and every value still arrives once and in order.
    func testFourAppsIndicatingToOneCentralLoseAndReorderNothing() async throws {
        let apps = uuids.map { Flooder($0, properties: .indicate) }
        let (managers, central, collector) = try await publishAndSubscribe(apps)
        await flood(managers, apps, collector, 0..<80)
        withExtendedLifetime((managers, central)) {}
    }
}

/// The same floods on berylsim's instant link (delivery and buffer return at once, 27-byte × 64 controller buffers, as
/// the benchmark runs), where the host alone bounds the rate: 20- and 244-byte values, notified and indicated, each
/// once and in order.
final class PipelinedUpdateInstantLinkTests: TwoStacksTestCase {
    override var simArguments: [String] { ["--link", "instant", "--acl-buffers", "27:64"] }

    private func floodBothLengths(_ properties: CharacteristicProperties, count: Int) async throws {
        let apps = uuids.map { Flooder($0, properties: properties) }
        let (managers, central, collector) = try await publishAndSubscribe(apps)
        let long = min(244, apps[0].maximumLength.load(ordering: .relaxed))
        XCTAssertEqual(long, 244, "the central's ATT_MTU takes 244-byte values")
        // On this link the host is the bound, so whether updateValue ever says false depends on the machine.
        await flood(managers, apps, collector, 0..<count, length: 20, mustBeRefused: false)
        await flood(managers, apps, collector, count..<2 * count, length: long, mustBeRefused: false)
        XCTAssertEqual(collector.lengths.withLock { $0 }, [20, long], "values arrive whole")
        withExtendedLifetime((managers, central)) {}
    }

    func testNotificationsOf20And244BytesLoseAndReorderNothing() async throws {
        try await floodBothLengths(.notify, count: 300)
    }

    func testIndicationsOf20And244BytesLoseAndReorderNothing() async throws {
        try await floodBothLengths(.indicate, count: 80)
    }

    /// An app's values go to attd on its data channel while it is in the foreground and through managerd otherwise (its
    /// grant revoked): four apps flooding, each sent to the background and back between floods and during them, still
    /// have every value arrive once and in order (a value leaves one way only while none is on its way the other).
    func testValuesKeepTheirOrderWhileTheirAppsLeaveTheForegroundAndComeBack() async throws {
        let apps = uuids.map { Flooder($0) }
        let ids = uuids.map { "com.example.flooder.\($0)" }
        let (managers, central, collector) = try await publishAndSubscribe(apps, appIDs: ids)
        await floodWhileTheAppsLeaveTheForegroundAndComeBack(ids, managerd: socket(1)) {
            await flood(managers, apps, collector, $0, mustBeRefused: false)
        }
        let attd = try IPCClient(path: "\(scratch.root)/run1/attd.sock")
        let counters = try attd.call(.with { $0.getStatus = .init() }).status.dataPlane
        XCTAssertGreaterThan(counters.channelValues, 0, "values went on the data channels: \(counters)")
        XCTAssertGreaterThan(counters.publisherValues, 0, "and through managerd while their apps were in the background: \(counters)")
        XCTAssertEqual(counters.channels, 4)
        withExtendedLifetime((managers, central)) {}
    }
}
