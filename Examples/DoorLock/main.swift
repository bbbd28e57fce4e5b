// The door-lock app of the Core Bluetooth Programming Guide's restoration chapter. A central manager with the
// restore identifier "doorlock-central" scans for the lock's service, connects (a request that never times out),
// discovers, subscribes to the characteristic and reads it. When the app is not running, the stack keeps the
// connection (and asks for it again when the lock goes away); when the lock is back it relaunches the app, which
// gets the lock in willRestoreState and carries on without discovering again. Every delegate callback is one JSON
// line, to stdout or appended to --log.
//
// --busy-seconds makes each connection take that long to handle (a slow handshake with the lock's firmware), which is
// how the tests show the stack ending an app that overruns its background wake.
//
//   doorlock --service UUID --characteristic UUID [--log FILE] [--runtime-dir DIR] [--busy-seconds N]
import Beryl
import Dispatch
import Foundation

struct Options {
    var service: BluetoothUUID
    var characteristic: BluetoothUUID
    var log: String?
    var runtimeDir: String?
    var busySeconds: Double = 0
    /// Reads of the lock's state after the first value, one after another; "readsDone" is logged after the last.
    var reads = 0

    static func parse(_ arguments: [String]) -> Options? {
        var service: BluetoothUUID?, characteristic: BluetoothUUID?, log: String?, runtimeDir: String?, busySeconds: Double = 0, reads = 0
        var iterator = arguments.makeIterator()
        while let argument = iterator.next() {
            guard let value = iterator.next() else { return nil }
            switch argument {
            case "--service": service = BluetoothUUID(value)
            case "--characteristic": characteristic = BluetoothUUID(value)
            case "--log": log = value
            case "--runtime-dir": runtimeDir = value
            case "--busy-seconds":
                guard let seconds = Double(value), seconds >= 0 else { return nil }
                busySeconds = seconds
            case "--reads":
                guard let count = Int(value), count >= 0 else { return nil }
                reads = count
            default: return nil
            }
        }
        guard let service, let characteristic else { return nil }
        return Options(service: service, characteristic: characteristic, log: log, runtimeDir: runtimeDir, busySeconds: busySeconds, reads: reads)
    }
}

/// One JSON object per line: the callback's name, the pid, a timestamp, and what the callback carried.
final class EventLog: Sendable {
    let handle: FileHandle
    init(path: String?) throws {
        if let path {
            if !FileManager.default.fileExists(atPath: path), !FileManager.default.createFile(atPath: path, contents: nil) {
                throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: path])
            }
            handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
            handle.seekToEndOfFile()
        } else {
            handle = .standardOutput
        }
    }

    func write(_ event: String, _ fields: [String: Any] = [:]) {
        var object = fields
        object["event"] = event
        object["pid"] = Int(getpid())
        object["time"] = Date().timeIntervalSince1970
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) else { return }
        handle.write(data + Data("\n".utf8))
    }
}

final class DoorLock: NSObject, CentralManagerDelegate, PeripheralDelegate {
    let options: Options
    let log: EventLog
    let relaunched: Bool
    var myCentralManager: CentralManager!
    var lock: Peripheral?
    var readsLeft: Int

    /// As the guide's app delegate: the launch options say whether the stack relaunched the app to restore a manager;
    /// the manager is made with the restore identifier either way.
    init(options: Options, log: EventLog, launchOptions: [String: Any]?, appID: String) {
        self.options = options
        self.log = log
        let centralManagerIdentifiers = launchOptions?[ApplicationLaunchOptionsBluetoothCentralsKey] as? [String] ?? []
        relaunched = !centralManagerIdentifiers.isEmpty
        readsLeft = options.reads
        super.init()
        log.write("launched", ["restoring": centralManagerIdentifiers])
        myCentralManager = CentralManager(delegate: self, queue: nil, options: [CentralManagerOptionRestoreIdentifierKey: "doorlock-central"],
                                          appID: appID, socketPath: options.runtimeDir.map { $0 + "/managerd.sock" })
        myCentralManager.apiMisuseHandler = { [log] in log.write("apiMisuse", ["error": "\($0)"]) }
    }

    /// Every callback is logged here. In the background each event wakes the app for a budget; once its callbacks
    /// have returned the library tells the stack it is idle again, so the app says nothing of it itself.
    private func heard(_ event: String, _ fields: [String: Any] = [:]) {
        log.write(event, fields)
    }

    private func known(_ peripheral: Peripheral) -> Characteristic? {
        peripheral.services?.first { $0.uuid == options.service }?.characteristics?.first { $0.uuid == options.characteristic }
    }

    func centralManager(_ central: CentralManager, willRestoreState dict: [String: Any]) {
        let state = RestoredCentralState(dict)
        heard("willRestoreState", ["peripherals": state.peripherals.map { peripheral in
            ["identifier": peripheral.identifier.uuidString, "state": "\(peripheral.state)", "servicesKnown": peripheral.services?.count ?? 0,
             "characteristicKnown": known(peripheral) != nil] as [String: Any]
        }, "scanning": state.isScanning])
        if let restored = state.peripherals.first {
            restored.delegate = self
            lock = restored
        }
    }

    func centralManagerDidUpdateState(_ central: CentralManager) {
        heard("centralManagerDidUpdateState", ["state": "\(central.state)"])
        guard central.state == .poweredOn else { return }
        if let restored = lock {
            // Known from a restoration or from before managerd restarted.
            switch restored.state {
            case .connected: resume(restored, central)
            case .disconnected: central.connect(restored, options: nil)  // the link went while managerd restarted: ask again
            default: break  // restored pending: didConnect will come
            }
            return
        }
        guard !relaunched else { return }  // a relaunch is for an event that arrives next
        central.scanForPeripherals(withServices: [options.service], options: nil)
    }

    func centralManager(_ central: CentralManager, didDiscover peripheral: Peripheral, advertisementData: [String: Any], rssi RSSI: NSNumber) {
        heard("didDiscover", ["peripheral": peripheral.identifier.uuidString, "rssi": RSSI.intValue,
                              "name": advertisementData[AdvertisementDataLocalNameKey] as? String ?? ""])
        central.stopScan()
        peripheral.delegate = self
        lock = peripheral
        central.connect(peripheral, options: nil)  // never times out
    }

    func centralManager(_ central: CentralManager, didConnect peripheral: Peripheral) {
        heard("didConnect", ["peripheral": peripheral.identifier.uuidString])
        if options.busySeconds > 0 { Thread.sleep(forTimeInterval: options.busySeconds) }
        peripheral.delegate = self
        resume(peripheral, central)
    }

    func centralManager(_ central: CentralManager, didFailToConnect peripheral: Peripheral, error: Error?) {
        heard("didFailToConnect", ["peripheral": peripheral.identifier.uuidString, "error": error.map { "\($0)" } ?? ""])
    }

    func centralManager(_ central: CentralManager, didDisconnectPeripheral peripheral: Peripheral, error: Error?) {
        heard("didDisconnectPeripheral", ["peripheral": peripheral.identifier.uuidString, "error": error.map { "\($0)" } ?? ""])
        central.connect(peripheral, options: nil)  // wait for the lock to come back, however long
    }

    /// What was discovered before (in this process or, restored, in an earlier one) is used as it is.
    private func resume(_ peripheral: Peripheral, _ central: CentralManager) {
        if let characteristic = known(peripheral) {
            heard("resumedWithoutDiscovery", ["characteristic": characteristic.uuid.description])
            peripheral.setNotifyValue(true, for: characteristic)
            peripheral.readValue(for: characteristic)
        } else {
            peripheral.discoverServices([options.service])
        }
    }

    /// The lock's database changed (Service Changed): discover and subscribe again, whatever the stack invalidated.
    func peripheral(_ peripheral: Peripheral, didModifyServices invalidatedServices: [Service]) {
        heard("didModifyServices", ["invalidated": invalidatedServices.map(\.uuid.description)])
        peripheral.discoverServices([options.service])
    }

    func peripheral(_ peripheral: Peripheral, didDiscoverServices error: Error?) {
        heard("didDiscoverServices", ["services": (peripheral.services ?? []).map(\.uuid.description), "error": error.map { "\($0)" } ?? ""])
        guard let service = peripheral.services?.first(where: { $0.uuid == options.service }) else { return }
        peripheral.discoverCharacteristics([options.characteristic], for: service)
    }

    func peripheral(_ peripheral: Peripheral, didDiscoverCharacteristicsFor service: Service, error: Error?) {
        heard("didDiscoverCharacteristicsFor", ["service": service.uuid.description,
                                                    "characteristics": (service.characteristics ?? []).map(\.uuid.description)])
        guard let characteristic = known(peripheral) else { return }
        peripheral.setNotifyValue(true, for: characteristic)
        peripheral.readValue(for: characteristic)
    }

    func peripheral(_ peripheral: Peripheral, didUpdateNotificationStateFor characteristic: Characteristic, error: Error?) {
        heard("didUpdateNotificationStateFor", ["characteristic": characteristic.uuid.description, "notifying": characteristic.isNotifying,
                                                    "error": error.map { "\($0)" } ?? ""])
    }

    func peripheral(_ peripheral: Peripheral, didUpdateValueFor characteristic: Characteristic, error: Error?) {
        heard("didUpdateValueFor", ["characteristic": characteristic.uuid.description,
                                        "value": characteristic.value.map { $0.map { String(format: "%02x", $0) }.joined() } ?? "",
                                        "error": error.map { "\($0)" } ?? ""])
        guard error == nil, options.reads > 0, readsLeft >= 0 else { return }
        if readsLeft > 0 {
            peripheral.readValue(for: characteristic)
        } else {
            heard("readsDone", ["reads": options.reads])
        }
        readsLeft -= 1
    }
}

guard let options = Options.parse(Array(CommandLine.arguments.dropFirst())) else {
    FileHandle.standardError.write(Data("usage: doorlock --service UUID --characteristic UUID [--log FILE] [--runtime-dir DIR] [--busy-seconds N] [--reads N]\n".utf8))
    exit(64)
}
do {
    let log = try EventLog(path: options.log)
    let launch = LaunchOptions.current
    let app = DoorLock(options: options, log: log, launchOptions: launch.dictionary, appID: launch.appID ?? "com.example.doorlock")
    // Runs until the system terminates it or the user quits it; the stack keeps the lock's connection either way.
    withExtendedLifetime(app) { dispatchMain() }
} catch {
    FileHandle.standardError.write(Data("doorlock: \(error)\n".utf8))
    exit(69)
}
