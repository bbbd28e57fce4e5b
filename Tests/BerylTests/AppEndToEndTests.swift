import Beryl
import BerylDaemonKit
import BerylSupervisor
import BerylTestSupport
import BerylWire
import Dispatch
import Foundation
import Synchronization
import XCTest

/// Records what a delegate heard, for the test to wait on.
final class Recorder: Sendable {
    private let lines = Mutex<[String]>([])
    func note(_ line: String) { lines.withLock { $0.append(line) } }
    var all: [String] { lines.withLock { $0 } }
    func wait(for prefix: String, timeout: TimeInterval = 15) -> String? {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let line = all.first(where: { $0.hasPrefix(prefix) }) { return line }
            usleep(20_000)
        }
        return nil
    }
}

/// A heart-rate peripheral app as the programming guide writes it: a dynamic body-sensor location, a writable
/// control point, and a notifying measurement.
final class HeartRatePeripheral: PeripheralManagerDelegate {
    let recorder = Recorder()
    let location = MutableCharacteristic(type: BluetoothUUID(0x2A38), properties: .read, value: nil, permissions: .readable)
    let control = MutableCharacteristic(type: BluetoothUUID(0x2A39), properties: .write, value: nil, permissions: .writeable)
    let measurement = MutableCharacteristic(type: BluetoothUUID(0x2A37), properties: .notify, value: nil, permissions: .readable)
    let cached = MutableCharacteristic(type: BluetoothUUID(0x2A29), properties: .read, value: Data("Beryl Labs".utf8), permissions: .readable)

    func peripheralManagerDidUpdateState(_ peripheral: PeripheralManager) { recorder.note("state \(peripheral.state)") }
    func peripheralManager(_ peripheral: PeripheralManager, didAdd service: Service, error: Error?) {
        recorder.note("added \(service.uuid) \(error.map { "\($0)" } ?? "ok")")
    }
    func peripheralManagerDidStartAdvertising(_ peripheral: PeripheralManager, error: Error?) { recorder.note("advertising \(error.map { "\($0)" } ?? "ok")") }
    func peripheralManager(_ peripheral: PeripheralManager, didReceiveRead request: ATTRequest) {
        recorder.note("read \(request.characteristic.uuid) offset \(request.offset)")
        guard request.characteristic === location else { return peripheral.respond(to: request, withResult: .readNotPermitted) }
        guard request.offset <= 1 else { return peripheral.respond(to: request, withResult: .invalidOffset) }
        request.value = Data([0x01])
        peripheral.respond(to: request, withResult: .success)
    }
    func peripheralManager(_ peripheral: PeripheralManager, didReceiveWrite requests: [ATTRequest]) {
        recorder.note("write \(requests.map { "\($0.characteristic.uuid)=\($0.value?.map { String(format: "%02x", $0) }.joined() ?? "")" }.joined(separator: ","))")
        peripheral.respond(to: requests[0], withResult: requests[0].value == Data([0xFF]) ? .writeNotPermitted : .success)
    }
    func peripheralManager(_ peripheral: PeripheralManager, central: Central, didSubscribeTo characteristic: Characteristic) {
        recorder.note("subscribed \(characteristic.uuid) max \(central.maximumUpdateValueLength)")
    }
    func peripheralManager(_ peripheral: PeripheralManager, central: Central, didUnsubscribeFrom characteristic: Characteristic) {
        recorder.note("unsubscribed \(characteristic.uuid)")
    }
}

final class HeartRateCentral: CentralManagerDelegate, PeripheralDelegate {
    let recorder = Recorder()
    let discovered = Mutex<[Peripheral]>([])
    func centralManagerDidUpdateState(_ central: CentralManager) { recorder.note("state \(central.state)") }
    func centralManager(_ central: CentralManager, didDiscover peripheral: Peripheral, advertisementData: [String: Any], rssi RSSI: NSNumber) {
        discovered.withLock { $0.append(peripheral) }
        let uuids = advertisementData[AdvertisementDataServiceUUIDsKey] as? [BluetoothUUID] ?? []
        recorder.note("discovered \(advertisementData[AdvertisementDataLocalNameKey] as? String ?? "?") \(uuids.map(\.description)) rssi \(RSSI)")
    }
    func centralManager(_ central: CentralManager, didConnect peripheral: Peripheral) { recorder.note("connected \(peripheral.identifier)") }
    func centralManager(_ central: CentralManager, didDisconnectPeripheral peripheral: Peripheral, error: Error?) {
        recorder.note("disconnected \(error.map { "\($0)" } ?? "cleanly")")
    }
    func peripheral(_ peripheral: Peripheral, didDiscoverServices error: Error?) {
        recorder.note("services \(peripheral.services?.map(\.uuid.description) ?? []) \(error.map { "\($0)" } ?? "ok")")
    }
    func peripheral(_ peripheral: Peripheral, didUpdateValueFor characteristic: Characteristic, error: Error?) {
        recorder.note("value \(characteristic.uuid) \(characteristic.value?.map { String(format: "%02x", $0) }.joined() ?? "-") \(error.map { "\($0)" } ?? "")")
    }
    func peripheral(_ peripheral: Peripheral, didWriteValueFor characteristic: Characteristic, error: Error?) {
        recorder.note("wrote \(characteristic.uuid) \(error.map { "\($0)" } ?? "ok")")
    }
    func peripheral(_ peripheral: Peripheral, didUpdateNotificationStateFor characteristic: Characteristic, error: Error?) {
        recorder.note("notifying \(characteristic.uuid) \(characteristic.isNotifying)")
    }
}

final class IncludedServicesCentral: CentralManagerDelegate, PeripheralDelegate {
    let recorder = Recorder()
    func centralManagerDidUpdateState(_ central: CentralManager) { recorder.note("state \(central.state)") }
    func peripheral(_ peripheral: Peripheral, didDiscoverIncludedServicesFor service: Service, error: Error?) {
        recorder.note("included \(service.uuid): " + (service.includedServices ?? []).map { "\($0.uuid) \($0.isPrimary ? "primary" : "secondary")" }.joined(separator: ", "))
    }
}

/// Two full stacks on berylsim for each test (`run0`/`run1`), with what most app tests use.
class TwoStacksTestCase: XCTestCase {
    var scratch: Scratch!
    /// Extra managerd arguments for each stack.
    var managerdArguments: [[String]] { [[], []] }
    /// Extra berylsim arguments (its link, say).
    var simArguments: [String] { [] }
    /// Runs in the scratch directory before the stacks start.
    func prepare() throws {}

    override func setUpWithError() throws {
        scratch = try Scratch()
        try prepare()
        try startStacks(scratch, count: managerdArguments.count, sim: simArguments, managerd: managerdArguments)
    }

    override func tearDown() {
        // A failure that shows once in a CI run leaves its daemons' and apps' logs behind.
        // Not hasSucceeded: that is false until the run has stopped, which is after tearDown.
        if (testRun?.totalFailureCount ?? 0) > 0 {
            scratch.keep = true
            print("\(name): kept \(scratch.root) for its logs")
        }
        scratch.stopAll()
    }

    func socket(_ index: Int) -> String { "\(scratch.root)/run\(index)/managerd.sock" }

    /// Each app's lifecycle state set through managerd's socket, as the supervisor sets it; false when any call
    /// fails. Static, so that a detached task can flip the apps while they run.
    static func setAppState(_ ids: [String], _ state: Beryl_Ipc_V1_AppLifecycle, managerd socket: String) -> Bool {
        guard let control = try? IPCClient(path: socket) else { return false }
        return ids.allSatisfy { id in
            var request = Request()
            request.manager.setAppState = .with { $0.appID = id; $0.state = state }
            return (try? control.call(request)) != nil
        }
    }

    /// `beryl ARGUMENTS` against one of the stacks.
    @discardableResult
    func beryl(_ arguments: [String], side: Int = 0) throws -> (status: Int32, out: String, err: String) {
        let run = try runTool("beryl", arguments + ["--runtime-dir", "\(scratch.root)/run\(side)"])
        return (run.status, run.stdout, run.stderr)
    }

    /// `beryl sim ARGUMENTS` against the test's berylsim; its exit status.
    func sim(_ arguments: [String]) throws -> Int32 {
        try runTool("beryl", ["sim"] + arguments + ["--dir", scratch.root + "/sim"]).status
    }

    /// An app as `beryl app list` on stack 0 shows it.
    func managedApp(_ id: String) throws -> [String: Any] {
        let listed = try beryl(["app", "list", "--json"])
        let object = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(listed.out.utf8)) as? [String: Any], listed.err)
        return try XCTUnwrap((object["apps"] as? [[String: Any]])?.first { $0["id"] as? String == id })
    }

    /// Controller `index` as berylsim sees it: what its host set on the air.
    func simController(_ index: Int) throws -> [String: Any] {
        let listed = try runTool("beryl", ["sim", "list", "--json", "--dir", scratch.root + "/sim"])
        let object = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [String: Any], listed.stderr)
        return try XCTUnwrap((object["controllers"] as? [[String: Any]])?.first { ($0["index"] as? Int ?? 0) == index })
    }
}

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

/// Two apps on one stack: two peripheral apps publish into one database and advertise in turn; two central apps
/// on the other stack scan through one controller scan (each by its own filter) and share one link.
final class SharedStackTests: TwoStacksTestCase {

    func testTwoAppsShareScansALinkAndTheDatabase() async throws {
        let queue = DispatchQueue(label: "apps")
        let heartApp = HeartRatePeripheral()
        let heartManager = PeripheralManager(delegate: heartApp, queue: queue, socketPath: socket(1))
        let batteryApp = HeartRatePeripheral()
        let batteryManager = PeripheralManager(delegate: batteryApp, queue: queue, socketPath: socket(1))
        XCTAssertNotNil(heartApp.recorder.wait(for: "state poweredOn"))
        XCTAssertNotNil(batteryApp.recorder.wait(for: "state poweredOn"))
        let heart = MutableService(type: BluetoothUUID(0x180D), primary: true)
        heart.characteristics = [heartApp.location]
        try await heartManager.add(heart)
        let battery = MutableService(type: BluetoothUUID(0x180F), primary: true)
        let level = MutableCharacteristic(type: BluetoothUUID(0x2A19), properties: .read, value: Data([77]), permissions: .readable)
        battery.characteristics = [level]
        try await batteryManager.add(battery)
        heartManager.startAdvertising(AdvertisingOptions(localName: "Heart", serviceUUIDs: [BluetoothUUID(0x180D)]))
        batteryManager.startAdvertising(AdvertisingOptions(localName: "Battery", serviceUUIDs: [BluetoothUUID(0x180F)]))

        let heartClient = HeartRateCentral()
        let batteryClient = HeartRateCentral()
        let heartCentral = CentralManager(delegate: heartClient, queue: queue, socketPath: socket(0))
        let batteryCentral = CentralManager(delegate: batteryClient, queue: queue, socketPath: socket(0))
        XCTAssertNotNil(heartClient.recorder.wait(for: "state poweredOn"))
        XCTAssertNotNil(batteryClient.recorder.wait(for: "state poweredOn"))
        heartCentral.scanForPeripherals(withServices: [BluetoothUUID(0x180D)])
        batteryCentral.scanForPeripherals(withServices: [BluetoothUUID(0x180F)])
        // The stack advertises each app's data in turn (one controller advertiser): each scan sees only its own.
        XCTAssertNotNil(heartClient.recorder.wait(for: "discovered Heart [\"180D\"]"), heartClient.recorder.all.joined(separator: "\n"))
        XCTAssertNotNil(batteryClient.recorder.wait(for: "discovered Battery [\"180F\"]"), batteryClient.recorder.all.joined(separator: "\n"))
        XCTAssertFalse(heartClient.recorder.all.contains { $0.contains("180F") }, "each app gets its own filter's discoveries")
        heartCentral.stopScan()
        batteryCentral.stopScan()

        // Both central apps connect to the same peripheral: one link, two holders.
        let peripheralID = try XCTUnwrap(heartClient.discovered.withLock { $0.first?.identifier })
        let forHeart = try XCTUnwrap(heartCentral.retrievePeripherals(withIdentifiers: [peripheralID]).first)
        let forBattery = try XCTUnwrap(batteryCentral.retrievePeripherals(withIdentifiers: [peripheralID]).first)
        try await heartCentral.connected(to: forHeart)
        try await batteryCentral.connected(to: forBattery)
        let heartServices = try await forHeart.services(discovering: nil)
        let batteryServices = try await forBattery.services(discovering: nil)
        // One database holds both apps' services.
        XCTAssertEqual(Set(heartServices.map(\.uuid.description)), ["1800", "1801", "180D", "180F"])
        let levelCharacteristic = try XCTUnwrap(batteryServices.first { $0.uuid == BluetoothUUID(0x180F) }?.characteristics?.first)
        let value = try await forBattery.readValue(for: levelCharacteristic)
        XCTAssertEqual(value, Data([77]))

        // One app cancels: the link stays for the other.
        heartCentral.cancelPeripheralConnection(forHeart)
        XCTAssertEqual(heartClient.recorder.wait(for: "disconnected"), "disconnected cleanly")
        let stillThere = try await forBattery.readValue(for: levelCharacteristic)
        XCTAssertEqual(stillThere, Data([77]), "the other app's link is untouched")
        batteryCentral.cancelPeripheralConnection(forBattery)
        XCTAssertNotNil(batteryClient.recorder.wait(for: "disconnected"))
        withExtendedLifetime((heartManager, batteryManager, heartCentral, batteryCentral)) {}
    }
}

/// `beryl scan` and `beryl peripherals` are ordinary apps of managerd; identifiers survive managerd's kill -9.
final class ScanCommandTests: XCTestCase {
    func testScanPrintsDiscoveriesAndIdentifiersSurviveARestart() async throws {
        let scratch = try Scratch()
        defer { scratch.stopAll() }
        try startStacks(scratch)
        let app = HeartRatePeripheral()
        let manager = PeripheralManager(delegate: app, queue: DispatchQueue(label: "app"), socketPath: "\(scratch.root)/run1/managerd.sock")
        XCTAssertNotNil(app.recorder.wait(for: "state poweredOn"))
        manager.startAdvertising(AdvertisingOptions(localName: "Beryl HR", serviceUUIDs: [BluetoothUUID(0x180D)]))
        XCTAssertNotNil(app.recorder.wait(for: "advertising ok"))

        func beryl(_ arguments: [String]) throws -> (status: Int32, out: String, err: String) {
            let run = try runTool("beryl", arguments + ["--runtime-dir", "\(scratch.root)/run0"])
            return (run.status, run.stdout, run.stderr)
        }
        let scan = try beryl(["scan", "--service", "180D", "--count", "1", "--timeout", "10", "--json"])
        XCTAssertEqual(scan.status, 0, scan.err)
        let found = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(scan.out.utf8)) as? [String: Any])
        XCTAssertEqual(found["name"] as? String, "Beryl HR")
        XCTAssertEqual(found["serviceUUIDs"] as? [String], ["180D"])
        XCTAssertEqual(found["connectable"] as? Bool, true)
        let identifier = try XCTUnwrap(found["identifier"] as? String)
        XCTAssertNotNil(UUID(uuidString: identifier))
        let peripheralAddress = try XCTUnwrap(StackProbe.controllerInfo(at: "\(scratch.root)/run1/hcid.sock")?.address)
        XCTAssertEqual(found["address"] as? String, peripheralAddress)

        try scratch.crash("managerd0", socket: "\(scratch.root)/run0/managerd.sock")
        usleep(200_000)
        try scratch.start("managerd0-again", [Executables.path("managerd"), "--runtime-dir", "\(scratch.root)/run0", "--state-dir", "\(scratch.root)/state0"],
                          socket: "\(scratch.root)/run0/managerd.sock")
        let listed = try beryl(["peripherals", "--json"])
        XCTAssertEqual(listed.status, 0, listed.err)
        let known = listed.out.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        XCTAssertEqual(known.compactMap { $0["identifier"] as? String }, [identifier], "the identifier outlives managerd")
        let bad = try beryl(["scan", "--service", "nonsense"])
        XCTAssertNotEqual(bad.status, 0)
        withExtendedLifetime(manager) {}
    }
}

/// The heart-rate examples, as built, against each other on two `beryl up` stacks.
final class ExampleTests: XCTestCase {
    func testTheHeartRateExamplesTalk() throws {
        let scratch = try Scratch()
        defer {
            for side in ["a", "b"] { _ = try? run(["beryl", "down", "--runtime-dir", "\(scratch.root)/\(side)"]) }
            scratch.stopAll()
        }
        let sim = scratch.root + "/sim"
        try scratch.start("berylsim", [Executables.path("berylsim"), "--dir", sim, "--controllers", "2"], socket: sim + "/control.sock")
        for (side, controller) in [("a", 0), ("b", 1)] {
            let up = try run(["beryl", "up", "--runtime-dir", "\(scratch.root)/\(side)", "--state-dir", "\(scratch.root)/\(side)-state",
                              "--transport", "unix:\(sim)/controller-\(controller).sock"])
            XCTAssertEqual(up.status, 0, up.output)
        }
        try scratch.start("peripheral", [Executables.path("heart-rate-peripheral"), "--runtime-dir", "\(scratch.root)/b", "--json"],
                          socket: "\(scratch.root)/b/managerd.sock")
        let central = try run(["heart-rate-central", "--runtime-dir", "\(scratch.root)/a", "--count", "3", "--json"])
        XCTAssertEqual(central.status, 0, central.output)
        let events = JSONLines.events(in: central.output)
        let names = events.compactMap { $0["event"] as? String }
        // The guide's order: found, connected, characteristics, then the location read ahead of the subscription's beats.
        XCTAssertEqual(names, ["discovered", "connected", "characteristicsDiscovered", "sensorLocation", "heartRate", "heartRate", "heartRate",
                               "energyExpendedReset", "done"], central.output)
        XCTAssertEqual(events.first?["localName"] as? String, "Beryl HR")
        XCTAssertEqual(Set(events.first { $0["event"] as? String == "characteristicsDiscovered" }?["uuids"] as? [String] ?? []), ["2A37", "2A38", "2A39"])
        XCTAssertEqual(events.first { $0["event"] as? String == "sensorLocation" }?["code"] as? Int, 1, "chest")
        let beats = events.filter { $0["event"] as? String == "heartRate" }.compactMap { $0["bpm"] as? Int }
        XCTAssertTrue(beats.allSatisfy { (60...100).contains($0) }, "\(beats)")
        let writes = JSONLines.events("controlPointWritten", inFile: scratch.paths.logFile("peripheral"))
        XCTAssertEqual(writes.map { $0["value"] as? [Int] }, [[1]])
        XCTAssertEqual(writes.first?["accepted"] as? Bool, true)
    }

    private func run(_ arguments: [String]) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Executables.path(arguments[0]))
        process.arguments = Array(arguments.dropFirst())
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }
}

/// The door-lock central (through managerd and the library) against `beryl serve secure-lock.json`: the read of an
/// encryption-required value makes the stack pair, then the unlock is written.
final class DoorLockExampleTests: XCTestCase {
    func testTheDoorLockCentralPairsReadsAndUnlocks() throws {
        let scratch = try Scratch()
        defer { scratch.stopAll() }
        try startStacks(scratch)
        let profile = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Examples/profiles/secure-lock.json").path
        try scratch.start("serve", [Executables.path("beryl"), "serve", profile, "--json", "--runtime-dir", "\(scratch.root)/run1"],
                          socket: "\(scratch.root)/run1/attd.sock")
        let serveLog = { (try? String(contentsOfFile: scratch.paths.logFile("serve"), encoding: .utf8)) ?? "" }
        let served = { JSONLines.events($0, inFile: scratch.paths.logFile("serve")) }
        XCTAssertTrue(eventually { !served("advertising").isEmpty }, serveLog())

        let process = Process()
        process.executableURL = URL(fileURLWithPath: Executables.path("door-lock-central"))
        process.arguments = ["--runtime-dir", "\(scratch.root)/run0", "--unlock", "--json"]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        XCTAssertEqual(process.terminationStatus, 0, output)
        let said = JSONLines.events(in: output)
        XCTAssertEqual(said.compactMap { $0["event"] as? String }, ["connected", "lockState", "unlockSent"], output)
        XCTAssertEqual(said.first { $0["event"] as? String == "lockState" }?["state"] as? String, "locked", "read once the stack paired")
        XCTAssertEqual(served("pairing-complete").first?["bonded"] as? Bool, true, serveLog())
        let unlock = try XCTUnwrap(served("write-requested").last?["writes"] as? [[String: Any]], "the unlock write reached the publisher: \(serveLog())")
        // The lock's command characteristic, D00D0003-0000-1000-8000-00805F9B34FB: on the Bluetooth base, so 32 bits.
        XCTAssertEqual(unlock.first?["attribute"] as? String, "D00D0003")
        XCTAssertEqual(unlock.first?["bytes"] as? Int, "unlock".utf8.count)
        XCTAssertNil(served("write-requested").last?["refusal"], "taken on the encrypted link: \(serveLog())")
    }
}

/// The pairing delegate: with keyboards on both sides, pairing by Passkey Entry asks both apps for the passkey.
final class KeyboardUser: PairingDelegate {
    let recorder = Recorder()
    let passkey: UInt32
    init(passkey: UInt32) { self.passkey = passkey }
    func pairing(with peer: UUID, prompt: PairingPrompt, responder: PairingResponder) {
        recorder.note("prompt \(prompt)")
        if prompt == .enterPasskey { responder.enter(passkey: passkey) }
    }
    func pairing(with peer: UUID, finished outcome: PairingOutcome) {
        recorder.note("finished \(outcome.success) bonded \(outcome.bonded) reason \(outcome.reason) sc \(outcome.secureConnections) from \(outcome.address)")
    }
}

final class PairingDelegateTests: XCTestCase {
    func testPasskeyPromptsReachBothAppsAndPairingUnlocksTheValue() async throws {
        let scratch = try Scratch()
        defer { scratch.stopAll() }
        try startStacks(scratch, attd: [["--io-capability", "keyboard-only"], ["--io-capability", "keyboard-only"]])
        let queue = DispatchQueue(label: "apps")
        let app = HeartRatePeripheral()
        let peripheralUser = KeyboardUser(passkey: 246810)
        let manager = PeripheralManager(delegate: app, queue: queue, socketPath: "\(scratch.root)/run1/managerd.sock")
        manager.pairingDelegate = peripheralUser
        XCTAssertNotNil(app.recorder.wait(for: "state poweredOn"))
        let service = MutableService(type: BluetoothUUID(0x180D), primary: true)
        let secret = MutableCharacteristic(type: BluetoothUUID(0x2A38), properties: .read, value: Data([0x05]), permissions: .readEncryptionRequired)
        service.characteristics = [secret]
        try await manager.add(service)
        manager.startAdvertising(AdvertisingOptions(localName: "Secret", serviceUUIDs: [BluetoothUUID(0x180D)]))

        let client = HeartRateCentral()
        let centralUser = KeyboardUser(passkey: 246810)
        let central = CentralManager(delegate: client, queue: queue, socketPath: "\(scratch.root)/run0/managerd.sock")
        central.pairingDelegate = centralUser
        XCTAssertNotNil(client.recorder.wait(for: "state poweredOn"))
        let found = await central.firstDiscovery(of: BluetoothUUID(0x180D))
        let peripheral = try XCTUnwrap(found?.peripheral)
        try await central.connected(to: peripheral)
        let services = try await peripheral.services(discovering: nil)
        let characteristic = try XCTUnwrap(services.first { $0.uuid == BluetoothUUID(0x180D) }?.characteristics?.first)
        let value = try await peripheral.readValue(for: characteristic)
        XCTAssertEqual(value, Data([0x05]), "readable once paired")
        XCTAssertNotNil(centralUser.recorder.wait(for: "prompt enterPasskey"))
        XCTAssertNotNil(peripheralUser.recorder.wait(for: "prompt enterPasskey"))
        let peripheralAddress = try XCTUnwrap(StackProbe.controllerInfo(at: "\(scratch.root)/run1/hcid.sock")?.address)
        XCTAssertEqual(centralUser.recorder.wait(for: "finished"), "finished true bonded true reason 0 sc true from \(peripheralAddress)")
        withExtendedLifetime((manager, central)) {}
    }
}

/// `beryl demo --json`, the main job's machine-readable face: every step ok, in order, and a clean end.
final class DemoCommandTests: XCTestCase {
    static let examples = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Examples").path

    func testTheDemoRunsEndToEndAndSaysSoInJSON() throws {
        let run = try runTool("beryl", ["demo", "--json", "--examples", Self.examples])
        let events = JSONLines.events(in: run.stdout)
        XCTAssertEqual(run.status, 0, run.stdout + run.stderr)
        let steps = events.filter { $0["event"] as? String == "step" }
        XCTAssertTrue(steps.allSatisfy { $0["ok"] as? Bool == true && $0["ms"] is Int }, "\(steps)")
        let names = steps.compactMap { $0["step"] as? String }
        for expected in ["heart-rate-central example discovers it", "connects", "reads the body sensor location", "takes 5 heart-rate notifications",
                         "writes the control point", "kill -9 the app; the stack keeps its link", "the lock returns: relaunched, restored, read"] {
            XCTAssertTrue(names.contains(expected), "\(expected) in \(names)")
        }
        XCTAssertEqual(events.last?["event"] as? String, "done")
        XCTAssertEqual(events.last?["ok"] as? Bool, true)
        let sides = Set(steps.compactMap { $0["side"] as? String })
        XCTAssertTrue(sides.isSuperset(of: ["central", "peripheral", "air"]), "\(sides)")
    }

    /// `beryl demo --json | head -2`: the reader goes, and the demo stops what it started rather than leaving
    /// berylsim and two stacks running (or crashing on EPIPE).
    func testADemoWhoseReaderGoesStopsItsProcesses() throws {
        let demo = Process()
        demo.executableURL = URL(fileURLWithPath: Executables.path("beryl"))
        demo.arguments = ["demo", "--json", "--examples", Self.examples]
        let output = Pipe()
        demo.standardOutput = output
        demo.standardError = FileHandle.nullDevice
        try demo.run()
        var received = Data()
        while !received.contains(UInt8(ascii: "\n")) {
            let chunk = output.fileHandleForReading.availableData
            guard !chunk.isEmpty else { break }
            received += chunk
        }
        let first = try XCTUnwrap(JSONSerialization.jsonObject(with: received.prefix { $0 != UInt8(ascii: "\n") }) as? [String: Any])
        let simPID = Int32(try XCTUnwrap(first["pid"] as? Int, "\(first)"))
        XCTAssertEqual(kill(simPID, 0), 0, "berylsim runs")
        try output.fileHandleForReading.close()
        demo.waitUntilExit()
        XCTAssertEqual(demo.terminationReason, .exit, "ended by itself, not by a signal")
        XCTAssertEqual(demo.terminationStatus, 128 + SIGPIPE)
        XCTAssertNotEqual(kill(simPID, 0), 0, "berylsim was stopped")
    }

    func testTheDemoRefusesAMissingExamplesDirectory() throws {
        let run = try runTool("beryl", ["demo", "--examples", "/nonexistent"])
        XCTAssertEqual(run.status, 64, run.stderr)
        XCTAssertTrue(run.stderr.contains("no /nonexistent/profiles/lock.json"), run.stderr)
    }
}
