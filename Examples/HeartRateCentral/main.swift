// A heart-rate central, written as the Core Bluetooth Programming Guide's central tasks are: a delegate class that
// keeps what it found, scans for the service, connects, discovers, reads the sensor location, subscribes to
// measurements and writes the control point.
//
//   heart-rate-central [--runtime-dir DIR] [--count N] [--json]
//
// With --json each line is a JSON object naming its event (what `beryl demo` and the tests read).
import Beryl
import ExampleReports
import Dispatch
import Foundation

let heartRateService = BluetoothUUID(string: "180D")
let measurementUUID = BluetoothUUID(string: "2A37")
let sensorLocationUUID = BluetoothUUID(string: "2A38")
let controlPointUUID = BluetoothUUID(string: "2A39")

final class HeartRateCentral: NSObject, CentralManagerDelegate, PeripheralDelegate {
    var centralManager: CentralManager!
    var heartRateMonitor: Peripheral?
    var controlPoint: Characteristic?
    let wanted: Int
    var beats = 0

    init(wanted: Int, socketPath: String?) {
        self.wanted = wanted
        super.init()
        centralManager = CentralManager(delegate: self, queue: nil, options: nil, appID: "com.example.heartrate-central", socketPath: socketPath)
    }

    func centralManagerDidUpdateState(_ central: CentralManager) {
        guard central.state == .poweredOn else { return }
        central.scanForPeripherals(withServices: [heartRateService], options: nil)
    }

    func centralManager(_ central: CentralManager, didDiscover peripheral: Peripheral, advertisementData: [String: Any], rssi RSSI: NSNumber) {
        guard heartRateMonitor == nil else { return }
        say(.discovered(name: advertisementData[AdvertisementDataLocalNameKey] as? String, rssi: RSSI.intValue))
        heartRateMonitor = peripheral
        central.stopScan()
        central.connect(peripheral, options: nil)
    }

    func centralManager(_ central: CentralManager, didConnect peripheral: Peripheral) {
        say(.connected)
        peripheral.delegate = self
        peripheral.discoverServices([heartRateService])
    }

    func centralManager(_ central: CentralManager, didFailToConnect peripheral: Peripheral, error: Error?) {
        fail("could not connect: \(error?.localizedDescription ?? "no reason given")")
    }

    func peripheral(_ peripheral: Peripheral, didDiscoverServices error: Error?) {
        if let error = error { fail("service discovery failed: \(error.localizedDescription)") }
        guard let service = peripheral.services?.first(where: { $0.uuid == heartRateService }) else { fail("the peripheral has no heart rate service") }
        peripheral.discoverCharacteristics(nil, for: service)
    }

    func peripheral(_ peripheral: Peripheral, didDiscoverCharacteristicsFor service: Service, error: Error?) {
        let characteristics = service.characteristics ?? []
        say(.characteristicsDiscovered(characteristics.map { "\($0.uuid)" }))
        controlPoint = characteristics.first { $0.uuid == controlPointUUID }
        if let location = characteristics.first(where: { $0.uuid == sensorLocationUUID }) { peripheral.readValue(for: location) }
        if let measurement = characteristics.first(where: { $0.uuid == measurementUUID }) { peripheral.setNotifyValue(true, for: measurement) }
    }

    func peripheral(_ peripheral: Peripheral, didUpdateValueFor characteristic: Characteristic, error: Error?) {
        if let error = error { fail("reading \(characteristic.uuid) failed: \(error.localizedDescription)") }
        guard let value = characteristic.value else { return }
        switch characteristic.uuid {
        case sensorLocationUUID:
            if let code = value.first { say(.sensorLocation(code: code)) }
        case measurementUUID where value.count >= 2 && beats < wanted:
            // Flags first; bit 0 clear: an 8-bit heart rate value (Heart Rate Service §3.1.1.1).
            say(.heartRate(bpm: value[value.startIndex + 1]))
            beats += 1
            guard beats == wanted else { break }
            peripheral.setNotifyValue(false, for: characteristic)
            // The control point is optional (Heart Rate Service §3.3): without one there is nothing to reset.
            if let controlPoint { peripheral.writeValue(Data([0x01]), for: controlPoint, type: .withResponse) } else { finish(peripheral) }
        default:
            break
        }
    }

    func peripheral(_ peripheral: Peripheral, didWriteValueFor characteristic: Characteristic, error: Error?) {
        if let error = error { fail("the control point refused the write: \(error.localizedDescription)") }
        say(.energyExpendedReset)
        finish(peripheral)
    }

    func finish(_ peripheral: Peripheral) {
        centralManager.cancelPeripheralConnection(peripheral)
        say(.done)
        exit(0)
    }
}

var runtimeDir: String?
var wanted = 5
var arguments = CommandLine.arguments.dropFirst().makeIterator()
while let argument = arguments.next() {
    switch argument {
    case "--runtime-dir": runtimeDir = arguments.next()
    case "--count": wanted = Int(arguments.next() ?? "") ?? 5
    case "--json": break  // ReportFormat.json
    default:
        FileHandle.standardError.write(Data("usage: heart-rate-central [--runtime-dir DIR] [--count N] [--json]\n".utf8))
        exit(64)
    }
}

let central = HeartRateCentral(wanted: max(1, wanted), socketPath: runtimeDir.map { $0 + "/managerd.sock" })
// A stack that never comes up, or a monitor that never answers, is this tool's failure, not a state to wait in.
DispatchQueue.main.asyncAfter(deadline: .now() + 20) { fail("no heart rate monitor served the measurements in 20 s") }
dispatchMain()

/// What the central reports: a line of text, or (--json) a JSON object with the event's name, fields and text.
enum Report: ExampleReport {
    case discovered(name: String?, rssi: Int)
    case connected
    case characteristicsDiscovered([String])
    /// Body Sensor Location (Heart Rate Service §3.2): 1 is chest.
    case sensorLocation(code: UInt8)
    case heartRate(bpm: UInt8)
    case energyExpendedReset
    case done

    var text: String {
        switch self {
        case .discovered(let name, let rssi): "discovered \(name ?? "a heart rate monitor") (RSSI \(rssi))"
        case .connected: "connected"
        case .characteristicsDiscovered(let uuids): "discovered \(uuids.count) characteristics"
        case .sensorLocation(let code): "sensor location \(code == 1 ? "chest" : "code \(code)")"
        case .heartRate(let bpm): "heart rate \(bpm) bpm"
        case .energyExpendedReset: "reset energy expended"
        case .done: "done"
        }
    }

    var fields: [String: Any] {
        switch self {
        case .discovered(let name, let rssi): ["event": "discovered", "localName": name ?? NSNull(), "rssi": rssi]
        case .connected: ["event": "connected"]
        case .characteristicsDiscovered(let uuids): ["event": "characteristicsDiscovered", "uuids": uuids]
        case .sensorLocation(let code): ["event": "sensorLocation", "code": Int(code)]
        case .heartRate(let bpm): ["event": "heartRate", "bpm": Int(bpm)]
        case .energyExpendedReset: ["event": "energyExpendedReset"]
        case .done: ["event": "done"]
        }
    }
}

/// One line to stdout at once: the report's text, or with --json its JSON object.
func say(_ report: Report) { report.write() }

func fail(_ why: String) -> Never {
    FileHandle.standardError.write(Data("heart-rate-central: \(why)\n".utf8))
    exit(1)
}
