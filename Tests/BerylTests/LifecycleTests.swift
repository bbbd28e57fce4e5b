import Beryl
import BerylDaemonKit
import BerylSupervisor
import Dispatch
import Foundation
import XCTest

/// Foreground-only apps on two stacks: suspension stops their scans and holds their events (one discovery per
/// peripheral) until they return; a suspended publisher's dynamic reads are refused; alerts for notifyOn*.
final class LifecycleTests: TwoStacksTestCase {
    override var managerdArguments: [[String]] { [["--suspend-after", "0.5"], ["--suspend-after", "0.5"]] }

    private func appState(_ id: String, side: Int = 0) throws -> [String: Any]? {
        let listed = try beryl(["app", "list", "--json"], side: side)
        let object = try JSONSerialization.jsonObject(with: Data(listed.out.utf8)) as? [String: Any]
        return (object?["apps"] as? [[String: Any]])?.first { $0["id"] as? String == id }
    }

    private func advertiseHeartRate() throws -> (HeartRatePeripheral, PeripheralManager) {
        let app = HeartRatePeripheral()
        let manager = PeripheralManager(delegate: app, queue: DispatchQueue(label: "peripheral"), appID: "com.test.sensor", socketPath: socket(1))
        XCTAssertNotNil(app.recorder.wait(for: "state poweredOn"))
        return (app, manager)
    }

    func testASuspendedScannerHearsNothingUntilItReturns() throws {
        let (peripheralApp, manager) = try advertiseHeartRate()
        manager.startAdvertising(AdvertisingOptions(localName: "Pulse", serviceUUIDs: [BluetoothUUID(0x180D)]))
        XCTAssertNotNil(peripheralApp.recorder.wait(for: "advertising ok"))

        let client = HeartRateCentral()
        let central = CentralManager(delegate: client, queue: DispatchQueue(label: "central"), appID: "com.test.scanner", socketPath: socket(0))
        XCTAssertNotNil(client.recorder.wait(for: "state poweredOn"))
        central.scanForPeripherals(withServices: [BluetoothUUID(0x180D)], scanOptions: ScanOptions(allowDuplicates: true))
        XCTAssertTrue(eventually { client.recorder.all.filter { $0.hasPrefix("discovered") }.count >= 3 }, "duplicates flow in the foreground")
        XCTAssertEqual(try appState("com.test.scanner")?["state"] as? String, "foreground")

        XCTAssertEqual(try beryl(["app", "state", "com.test.scanner", "suspended"]).status, 0)
        usleep(300_000)
        let whileSuspended = client.recorder.all.filter { $0.hasPrefix("discovered") }.count
        usleep(1_500_000)
        XCTAssertEqual(client.recorder.all.filter { $0.hasPrefix("discovered") }.count, whileSuspended, "a suspended app hears nothing")
        XCTAssertEqual(try appState("com.test.scanner")?["state"] as? String, "suspended")

        // Its scan was paused, not dropped: back in the foreground it hears again.
        XCTAssertEqual(try beryl(["app", "state", "com.test.scanner", "foreground"]).status, 0)
        XCTAssertTrue(eventually { client.recorder.all.filter { $0.hasPrefix("discovered") }.count > whileSuspended + 2 })

        // Reporting background itself: a foreground-only app is suspended after --suspend-after (0.5 s here).
        XCTAssertNil(central.reportApplicationState(.background))
        XCTAssertTrue(eventually(.seconds(5)) { (try? self.appState("com.test.scanner")?["state"] as? String) == "suspended" })
        XCTAssertNil(central.reportApplicationState(.foreground))
        XCTAssertEqual(try appState("com.test.scanner")?["state"] as? String, "foreground")
        withExtendedLifetime((central, manager)) {}
    }

    func testEventsHeldWhileSuspendedArriveInOrderAndAlertsAreRaised() throws {
        let (peripheralApp, manager) = try advertiseHeartRate()
        let service = MutableService(type: BluetoothUUID(0x180D), primary: true)
        service.characteristics = [peripheralApp.location, peripheralApp.control]
        delegateStyle { manager.add(service) }
        XCTAssertNotNil(peripheralApp.recorder.wait(for: "added"))
        manager.startAdvertising(AdvertisingOptions(localName: "Pulse", serviceUUIDs: [BluetoothUUID(0x180D)]))

        let client = HeartRateCentral()
        let central = CentralManager(delegate: client, queue: DispatchQueue(label: "central"), appID: "com.test.alerts", socketPath: socket(0))
        XCTAssertNotNil(client.recorder.wait(for: "state poweredOn"))
        central.scanForPeripherals(withServices: [BluetoothUUID(0x180D)])
        XCTAssertNotNil(client.recorder.wait(for: "discovered"))
        let peripheral = try XCTUnwrap(client.discovered.withLock { $0.first })
        central.stopScan()
        delegateStyle { central.connect(peripheral, connectOptions: ConnectOptions(notifyOnDisconnection: true)) }
        XCTAssertNotNil(client.recorder.wait(for: "connected"))

        // While the central app is suspended its peripheral app refuses dynamic reads... (the publisher is suspended too)
        let alerts = scratch.root + "/alerts.out"
        _ = FileManager.default.createFile(atPath: alerts, contents: nil)
        let watcher = Process()
        watcher.executableURL = URL(fileURLWithPath: Executables.path("beryl"))
        watcher.arguments = ["alerts", "--count", "1", "--json", "--runtime-dir", "\(scratch.root)/run0"]
        watcher.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: alerts))
        try watcher.run()
        defer { if watcher.isRunning { watcher.terminate() } }
        usleep(300_000)

        XCTAssertEqual(try beryl(["app", "state", "com.test.sensor", "suspended"], side: 1).status, 0)
        let sensorDeadline = Date().addingTimeInterval(10)
        // Services, then the heart rate service's characteristics, each asked again until the woken app's stack answers.
        while peripheral.services?.first(where: { $0.uuid == BluetoothUUID(0x180D) })?.characteristics == nil, Date() < sensorDeadline {
            if let heart = peripheral.services?.first(where: { $0.uuid == BluetoothUUID(0x180D) }) {
                peripheral.discoverCharacteristics(nil, for: heart)
            } else {
                peripheral.discoverServices(nil)
            }
            usleep(300_000)
        }
        let characteristics = try XCTUnwrap(peripheral.services?.first { $0.uuid == BluetoothUUID(0x180D) }?.characteristics)
        let location = try XCTUnwrap(characteristics.first { $0.uuid == BluetoothUUID(0x2A38) })
        let control = try XCTUnwrap(characteristics.first { $0.uuid == BluetoothUUID(0x2A39) })
        peripheral.delegate = client
        peripheral.readValue(for: location)
        XCTAssertNotNil(client.recorder.wait(for: "value 2A38 - ATT error 0xe"), client.recorder.all.joined(separator: "\n"))
        peripheral.writeValue(Data([0x01]), for: control, type: .withResponse)
        XCTAssertNotNil(client.recorder.wait(for: "wrote 2A39 ATT error 0xe"), client.recorder.all.joined(separator: "\n"))
        XCTAssertFalse(peripheralApp.recorder.all.contains { $0.hasPrefix("read") || $0.hasPrefix("write") }, "the suspended publisher was not asked")

        // ...and the central app, suspended, misses the disconnection but gets an alert for it.
        XCTAssertEqual(try beryl(["app", "state", "com.test.alerts", "suspended"]).status, 0)
        let sim = Process()
        sim.executableURL = URL(fileURLWithPath: Executables.path("beryl"))
        sim.arguments = ["sim", "range", "1", "out", "--dir", scratch.root + "/sim"]
        try sim.run()
        sim.waitUntilExit()
        XCTAssertTrue(eventually(.seconds(10)) { ((try? String(contentsOfFile: alerts, encoding: .utf8)) ?? "").contains("com.test.alerts: disconnection of") },
                      (try? String(contentsOfFile: alerts, encoding: .utf8)) ?? "")
        XCTAssertTrue(((try? String(contentsOfFile: alerts, encoding: .utf8)) ?? "").contains(#""kind":"disconnection""#), "the kind travels typed")
        XCTAssertFalse(client.recorder.all.contains { $0.hasPrefix("disconnected") }, "held while suspended")
        XCTAssertEqual(try appState("com.test.alerts")?["queuedEvents"] as? Int, 1)
        XCTAssertEqual(try beryl(["app", "state", "com.test.alerts", "foreground"]).status, 0)
        XCTAssertNotNil(client.recorder.wait(for: "disconnected"), "delivered on return")
        withExtendedLifetime((central, manager)) {}
    }
}
