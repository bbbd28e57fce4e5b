import Beryl
import BerylDaemonKit
import BerylSupervisor
import BerylTestSupport
import BerylWire
import Dispatch
import Foundation
import Synchronization
import XCTest

/// A central app that writes numbered values without response as fast as canSendWriteWithoutResponse allows,
/// waiting for peripheralIsReady(toSendWriteWithoutResponse:) whenever it says false, as the programming guide says.
private final class Writer: CentralManagerDelegate, PeripheralDelegate, Sendable {
    let recorder = Recorder()
    let ready = DispatchSemaphore(value: 0)
    let waits = Atomic<Int>(0)
    let readies = Atomic<Int>(0)

    func centralManagerDidUpdateState(_ central: CentralManager) { recorder.note("state \(central.state)") }
    func centralManager(_ central: CentralManager, didDisconnectPeripheral peripheral: Peripheral, error: Error?) { recorder.note("disconnected") }
    func peripheralIsReady(toSendWriteWithoutResponse peripheral: Peripheral) {
        readies.add(1, ordering: .relaxed)
        ready.signal()
    }

    /// Values numbered `range`, each starting with its number (two bytes, big-endian), `length` bytes in all.
    func flood(_ peripheral: Peripheral, _ characteristic: Characteristic, _ range: Range<Int>, length: Int) -> Bool {
        for sequence in range {
            while !peripheral.canSendWriteWithoutResponse {
                waits.add(1, ordering: .relaxed)
                // A ready callback may have come for an earlier wait: look again rather than wait for one more.
                guard ready.wait(timeout: .now() + 10) == .success else { return false }
            }
            let value = Data([UInt8(sequence >> 8), UInt8(sequence & 0xFF)] + [UInt8](repeating: 0x5A, count: length - 2))
            peripheral.writeValue(value, for: characteristic, type: .withoutResponse)
        }
        return true
    }
}

/// The peripheral app: each characteristic's writes, in arrival order.
private final class Sink: PeripheralManagerDelegate, Sendable {
    let recorder = Recorder()
    let values = Mutex<[BluetoothUUID: [Int]]>([:])
    let lengths = Mutex<Set<Int>>([])

    func peripheralManagerDidUpdateState(_ peripheral: PeripheralManager) { recorder.note("state \(peripheral.state)") }
    func peripheralManager(_ peripheral: PeripheralManager, didReceiveWrite requests: [ATTRequest]) {
        for request in requests {
            guard let value = request.value, value.count >= 2 else { continue }
            values.withLock { $0[request.characteristic.uuid, default: []].append(Int(value[0]) << 8 | Int(value[1])) }
            _ = lengths.withLock { $0.insert(value.count) }
        }
    }
    func received(_ uuid: UInt16) -> [Int] { values.withLock { $0[BluetoothUUID(uuid)] ?? [] } }
}

private extension TwoStacksTestCase {
    var uuids: [UInt16] { [0xFFA1, 0xFFA2, 0xFFA3, 0xFFA4] }

    /// `mustWait`: the link is slower than the apps, so canSendWriteWithoutResponse must have said false.
    func flood(_ writers: [Writer], _ peripherals: [Peripheral], _ characteristics: [Characteristic], _ sink: Sink,
               _ range: Range<Int>, length: Int, mustWait: Bool = true) async {
        let heardBefore = uuids.map { sink.received($0).count }
        let group = DispatchGroup()
        let failures = Recorder()
        for index in writers.indices {
            DispatchQueue.global().async(group: group) {
                if !writers[index].flood(peripherals[index], characteristics[index], range, length: length) {
                    failures.note("no peripheralIsReady(toSendWriteWithoutResponse:) within 10 s")
                }
            }
        }
        await withCheckedContinuation { done in group.notify(queue: .global()) { done.resume() } }
        XCTAssertEqual(failures.all, [])
        XCTAssertTrue(eventually(.seconds(30)) { zip(self.uuids, heardBefore).allSatisfy { sink.received($0).count >= $1 + range.count } },
                      "received \(uuids.map { sink.received($0).count }) after \(heardBefore), \(range.count) more each expected")
        for (uuid, before) in zip(uuids, heardBefore) {
            XCTAssertEqual(Array(sink.received(uuid).dropFirst(before)), Array(range), "app \(BluetoothUUID(uuid))'s writes, once each and in order")
        }
        if mustWait {
            XCTAssertGreaterThan(writers.map { $0.waits.load(ordering: .relaxed) }.reduce(0, +), 0,
                                 "canSendWriteWithoutResponse never said false: the apps never outran the link")
        }
    }

    /// A sink on stack 1 publishing four characteristics; four central apps on stack 0, each connected to it, with its own.
    func connectWriters(appIDs: [String?]? = nil) async throws -> (Sink, PeripheralManager, [Writer], [CentralManager], [Peripheral], [Characteristic]) {
        let sink = Sink()
        let manager = PeripheralManager(delegate: sink, queue: DispatchQueue(label: "peripheral"), socketPath: socket(1))
        XCTAssertNotNil(sink.recorder.wait(for: "state poweredOn"))
        let service = MutableService(type: BluetoothUUID(0xFFA0), primary: true)
        service.characteristics = uuids.map {
            MutableCharacteristic(type: BluetoothUUID($0), properties: .writeWithoutResponse, value: nil, permissions: .writeable)
        }
        try await manager.add(service)
        manager.startAdvertising(AdvertisingOptions(localName: "Sink", serviceUUIDs: [BluetoothUUID(0xFFA0)]))

        let writers = uuids.map { _ in Writer() }
        let ids = appIDs ?? writers.map { _ in nil }
        let centrals = zip(writers, ids).map { CentralManager(delegate: $0, queue: DispatchQueue(label: "central"), appID: $1, socketPath: socket(0)) }
        for writer in writers { XCTAssertNotNil(writer.recorder.wait(for: "state poweredOn")) }
        var peripherals: [Peripheral] = []
        var characteristics: [Characteristic] = []
        for (index, (central, writer)) in zip(centrals, writers).enumerated() {
            let found = await central.firstDiscovery(of: BluetoothUUID(0xFFA0))
            let peripheral = try XCTUnwrap(found).peripheral
            peripheral.delegate = writer
            try await central.connected(to: peripheral)
            let services = try await peripheral.services(discovering: nil)
            let characteristic = try XCTUnwrap(services.flatMap { $0.characteristics ?? [] }.first { $0.uuid == BluetoothUUID(uuids[index]) })
            peripherals.append(peripheral)
            characteristics.append(characteristic)
        }
        XCTAssertTrue(peripherals.allSatisfy(\.canSendWriteWithoutResponse))

        return (sink, manager, writers, centrals, peripherals, characteristics)
    }
}

/// Writes without response pipeline (they leave without waiting for one another's answers, and the library decides
/// canSendWriteWithoutResponse against its own queue): four central apps on one stack share one link to a
/// peripheral and flood it at once. Their 4 × 16 writes on their way exceed what attd holds for the link (its
/// 32-PDU outbox and the controller buffers hcid credits), so attd refuses, holds back and readies each app on its
/// own; every write still arrives once and in order.
final class PipelinedWriteTests: TwoStacksTestCase {
    func testFourCentralAppsWritingWithoutResponseOverOneLinkLoseAndReorderNothing() async throws {
        let (sink, manager, writers, centrals, peripherals, connected) = try await connectWriters()
        var characteristics = connected
        await flood(writers, peripherals, characteristics, sink, 0..<300, length: 20)

        // One app lets go of the link, which the others keep up, and connects again: it counts its readies afresh, and
        // so must attd, or each of its writes would be "sent before the latest ready" for ever.
        centrals[0].cancelPeripheralConnection(peripherals[0])
        XCTAssertNotNil(writers[0].recorder.wait(for: "disconnected"))
        try await centrals[0].connected(to: peripherals[0])
        let services = try await peripherals[0].services(discovering: nil)
        characteristics[0] = try XCTUnwrap(services.flatMap { $0.characteristics ?? [] }.first { $0.uuid == BluetoothUUID(uuids[0]) })
        let mtuBound = peripherals[0].maximumWriteValueLength(for: .withoutResponse)
        let long = min(244, mtuBound)
        await flood(writers, peripherals, characteristics, sink, 300..<500, length: long)
        XCTAssertTrue(sink.lengths.withLock { $0 } == [20, long], "values arrive whole: \(sink.lengths.withLock { $0 })")
        XCTAssertTrue(peripherals.allSatisfy(\.canSendWriteWithoutResponse), "every queue drained")
        withExtendedLifetime((manager, centrals)) {}
    }
}

/// The same writes on berylsim's instant link (delivery and buffer return at once, 27-byte × 64 controller buffers, as
/// the benchmark runs), where the host alone bounds the rate: 20- and 244-byte values, each once and in order.
final class PipelinedWriteInstantLinkTests: TwoStacksTestCase {
    override var simArguments: [String] { ["--link", "instant", "--acl-buffers", "27:64"] }

    func testWritesWithoutResponseOf20And244BytesLoseAndReorderNothing() async throws {
        let (sink, manager, writers, centrals, peripherals, characteristics) = try await connectWriters()
        let long = min(244, peripherals[0].maximumWriteValueLength(for: .withoutResponse))
        XCTAssertEqual(long, 244, "the link's ATT_MTU takes 244-byte values")
        // On this link the host is the bound, so whether the apps ever wait depends on the machine.
        await flood(writers, peripherals, characteristics, sink, 0..<300, length: 20, mustWait: false)
        await flood(writers, peripherals, characteristics, sink, 300..<600, length: long, mustWait: false)
        XCTAssertEqual(sink.lengths.withLock { $0 }, [20, long], "values arrive whole")
        XCTAssertTrue(peripherals.allSatisfy(\.canSendWriteWithoutResponse), "every queue drained")
        let counters = try dataPlaneCounters(ofStack: 0)
        XCTAssertGreaterThanOrEqual(counters.channelWriteCommands, 4 * 600, "every write went on its app's data channel: \(counters)")
        XCTAssertEqual(counters.publisherWriteCommands, 0, "and none through managerd: \(counters)")
        withExtendedLifetime((manager, centrals)) {}
    }

    /// While the apps flood, managerd sends them to the background (their grants are revoked: writes go through
    /// managerd) and back (the data channel again): each app's writes still arrive once and in order.
    func testWritesKeepTheirOrderWhileTheirAppsLeaveTheForegroundAndComeBack() async throws {
        let ids = uuids.map { "com.example.writer.\($0)" }
        let (sink, manager, writers, centrals, peripherals, characteristics) = try await connectWriters(appIDs: ids)
        await floodWhileTheAppsLeaveTheForegroundAndComeBack(ids, managerd: socket(0)) {
            await flood(writers, peripherals, characteristics, sink, $0, length: 20, mustWait: false)
        }
        let counters = try dataPlaneCounters(ofStack: 0)
        XCTAssertGreaterThan(counters.channelWriteCommands, 0, "writes went on the data channels: \(counters)")
        XCTAssertGreaterThan(counters.publisherWriteCommands, 0, "and through managerd while their apps were in the background: \(counters)")
        withExtendedLifetime((manager, centrals)) {}
    }

    private func dataPlaneCounters(ofStack index: Int) throws -> Beryl_Ipc_V1_DataPlaneCounters {
        let attd = try IPCClient(path: "\(scratch.root)/run\(index)/attd.sock")
        return try attd.call(.with { $0.getStatus = .init() }).status.dataPlane
    }
}
