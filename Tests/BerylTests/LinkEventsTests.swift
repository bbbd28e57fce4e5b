import Beryl
import BerylIPC
import BerylSupervisor
import Dispatch
import Foundation
import Synchronization
import XCTest

/// A peripheral app that keeps the centrals that read from it, to ask them for a connection latency.
final class LatencyPeripheral: PeripheralManagerDelegate {
    let recorder = Recorder()
    let value = MutableCharacteristic(type: BluetoothUUID(0x2A38), properties: [.read], value: nil, permissions: [.readable])
    var readers: [Central] = []

    func peripheralManagerDidUpdateState(_ peripheral: PeripheralManager) { recorder.note("state \(peripheral.state)") }
    func peripheralManagerDidStartAdvertising(_ peripheral: PeripheralManager, error: Error?) { recorder.note("advertising \(error.map { "\($0)" } ?? "ok")") }
    func peripheralManager(_ peripheral: PeripheralManager, didReceiveRead request: ATTRequest) {
        readers.append(request.central)
        request.value = Data([1])
        peripheral.respond(to: request, withResult: .success)
        recorder.note("read by \(request.central.identifier)")
    }
}

/// A central app that only watches links (the guide's registerForConnectionEvents).
final class LinkWatcher: CentralManagerDelegate {
    let recorder = Recorder()
    func centralManagerDidUpdateState(_ central: CentralManager) { recorder.note("state \(central.state)") }
    func centralManager(_ central: CentralManager, connectionEventDidOccur event: ConnectionEvent, for peripheral: Peripheral) {
        recorder.note("\(event == .peerConnected ? "connected" : "disconnected") \(peripheral.identifier)")
    }
}

extension TwoStacksTestCase {
    /// A LatencyPeripheral app on stack 1, advertising the heart-rate service with its one value.
    func advertisingLatencyPeripheral(queue: DispatchQueue) async throws -> (LatencyPeripheral, PeripheralManager) {
        let app = LatencyPeripheral()
        let peripheralManager = PeripheralManager(delegate: app, queue: queue, socketPath: socket(1))
        XCTAssertNotNil(app.recorder.wait(for: "state poweredOn"))
        let service = MutableService(type: BluetoothUUID(0x180D), primary: true)
        service.characteristics = [app.value]
        try await peripheralManager.add(service)
        peripheralManager.startAdvertising([AdvertisementDataServiceUUIDsKey: [BluetoothUUID(0x180D)]])
        XCTAssertEqual(app.recorder.wait(for: "advertising"), "advertising ok")
        return (app, peripheralManager)
    }

    /// A HeartRateCentral app on stack 0, connected to the first heart-rate peripheral it finds.
    func heartRateCentralConnected(queue: DispatchQueue) async throws -> (HeartRateCentral, CentralManager, Peripheral) {
        let client = HeartRateCentral()
        let central = CentralManager(delegate: client, queue: queue, socketPath: socket(0))
        XCTAssertNotNil(client.recorder.wait(for: "state poweredOn"))
        let found = await central.firstDiscovery(of: BluetoothUUID(0x180D))
        let peripheral = try XCTUnwrap(found).peripheral
        try await central.connected(to: peripheral)
        return (client, central, peripheral)
    }
}

/// Connection latency, connection events and authorization: what apps ask of links beyond their own GATT.
final class LinkEventsTests: TwoStacksTestCase {
    func testAPeripheralAsksForALatencyAndTheWatchersHearTheLink() async throws {
        let queue = DispatchQueue(label: "app")
        let (app, peripheralManager) = try await advertisingLatencyPeripheral(queue: queue)

        // Two watchers on the central's stack: one for the heart-rate service, one for a peripheral that never comes.
        let watcher = LinkWatcher(), bystander = LinkWatcher()
        let watching = CentralManager(delegate: watcher, queue: queue, socketPath: socket(0))
        let elsewhere = CentralManager(delegate: bystander, queue: queue, socketPath: socket(0))
        XCTAssertNotNil(watcher.recorder.wait(for: "state poweredOn"))
        XCTAssertNotNil(bystander.recorder.wait(for: "state poweredOn"))
        watching.registerForConnectionEvents(options: [.serviceUUIDs: [BluetoothUUID(0x180D)]])
        elsewhere.registerForConnectionEvents(options: [.peripheralUUIDs: [UUID()]])

        let (client, central, peripheral) = try await heartRateCentralConnected(queue: queue)
        XCTAssertEqual(watcher.recorder.wait(for: "connected"), "connected \(peripheral.identifier)", "the watcher hears another manager's link")

        peripheral.discoverServices([BluetoothUUID(0x180D)])
        XCTAssertTrue(eventually { peripheral.services?.first?.uuid == BluetoothUUID(0x180D) }, "\(client.recorder.all)")
        let heart = try XCTUnwrap(peripheral.services?.first)
        peripheral.discoverCharacteristics(nil, for: heart)
        XCTAssertTrue(eventually { heart.characteristics?.isEmpty == false }, "\(client.recorder.all)")
        _ = try await peripheral.readValue(for: try XCTUnwrap(heart.characteristics?.first))
        XCTAssertNotNil(app.recorder.wait(for: "read by"))

        // High latency: the peripheral's stack asks over the Link Layer, the central's stack accepts, and the
        // peripheral's controller reports the new interval (Core Vol 4 Part E §7.7.65.3).
        let peripheralMonitor = try HCIMonitor(hcidSocket: "\(scratch.root)/run1/hcid.sock")
        let centralMonitor = try HCIMonitor(hcidSocket: "\(scratch.root)/run0/hcid.sock")
        let reader = try XCTUnwrap(queue.sync { app.readers.first })
        peripheralManager.setDesiredConnectionLatency(.high, for: reader)
        let asked = centralMonitor.leEvent(0x06, within: .seconds(5))
        XCTAssertEqual(asked.map { Array($0[3..<11]) }, [72, 0, 96, 0, 4, 0, 0x58, 0x02], "the central's host is asked for 90–120 ms, latency 4, 6 s")
        let updated = try XCTUnwrap(peripheralMonitor.leEvent(0x03, within: .seconds(5)), "no LE Connection Update Complete")
        XCTAssertEqual(updated[1], 0, "status")
        let interval = UInt16(updated[4]) | UInt16(updated[5]) << 8
        XCTAssertTrue((72...96).contains(interval), "interval \(interval)")
        XCTAssertEqual(UInt16(updated[6]) | UInt16(updated[7]) << 8, 4, "peripheral latency")

        central.cancelPeripheralConnection(peripheral)
        XCTAssertEqual(watcher.recorder.wait(for: "disconnected"), "disconnected \(peripheral.identifier)")

        // A central no longer connected is misuse, reported.
        let misuse = Recorder()
        peripheralManager.apiMisuseHandler = { misuse.note("\($0)") }
        peripheralManager.setDesiredConnectionLatency(.low, for: reader)
        XCTAssertNotNil(misuse.wait(for: "setDesiredConnectionLatency(_:for:) failed"), "\(misuse.all)")
        XCTAssertFalse(bystander.recorder.all.contains { $0.hasPrefix("connected") || $0.hasPrefix("disconnected") }, "\(bystander.recorder.all)")
        withExtendedLifetime((central, watching, elsewhere, peripheralManager)) {}
    }

    /// CBManager.authorization asks the stack named by the environment, as the class property takes no manager.
    func testAuthorizationIsAskedOfTheStack() {
        setenv("BERYL_RUNTIME_DIR", "\(scratch.root)/run0", 1)
        defer { unsetenv("BERYL_RUNTIME_DIR") }
        XCTAssertEqual(CentralManager.authorization, .allowedAlways)
        XCTAssertEqual(PeripheralManager.authorization, .allowedAlways)
        setenv("BERYL_RUNTIME_DIR", "\(scratch.root)/nowhere", 1)
        XCTAssertEqual(CentralManager.authorization, .notDetermined, "no stack to ask")
        XCTAssertFalse(CentralManager.supports(.extendedScanAndConnect))
    }
}
