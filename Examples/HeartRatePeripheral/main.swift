// A heart-rate peripheral, written as the Core Bluetooth Programming Guide's peripheral tasks are:
// build the service, add it once the manager is powered on, advertise, answer reads, notify subscribers.
//
//   heart-rate-peripheral [--runtime-dir DIR] [--seconds N] [--json]
//
// With --json each line is a JSON object naming its event (what `beryl demo` and the tests read).
import Beryl
import ExampleReports
import Dispatch
import Foundation

final class HeartRateMonitor: NSObject, PeripheralManagerDelegate {
    var peripheralManager: PeripheralManager!
    let measurement = MutableCharacteristic(type: BluetoothUUID(string: "2A37"), properties: .notify, value: nil, permissions: .readable)
    // Body sensor location "chest", cached: the stack answers reads of it without asking us.
    let location = MutableCharacteristic(type: BluetoothUUID(string: "2A38"), properties: .read, value: Data([0x01]), permissions: .readable)
    // Heart rate control point: a dynamic, writable value.
    let controlPoint = MutableCharacteristic(type: BluetoothUUID(string: "2A39"), properties: .write, value: nil, permissions: .writeable)
    /// Heart Rate Service §3.3.1's "Control Point Value Not Supported", an application error.
    let valueNotSupported = ATTError.Code(rawValue: 0x80)!
    var beat: UInt8 = 60
    var subscribers = 0
    var timer: DispatchSourceTimer?

    init(queue: DispatchQueue, socketPath: String?) {
        super.init()
        peripheralManager = PeripheralManager(delegate: self, queue: queue, options: nil, appID: "com.example.heartrate", socketPath: socketPath)
        // A measurement a second, on the manager's queue, where this object's state lives.
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + 1, repeating: 1)
        timer.setEventHandler { [weak self] in self?.tick() }
        timer.resume()
        self.timer = timer
    }

    func peripheralManagerDidUpdateState(_ peripheral: PeripheralManager) {
        say(.state("\(peripheral.state)"))
        guard peripheral.state == .poweredOn else { return }
        let service = MutableService(type: BluetoothUUID(string: "180D"), primary: true)
        service.characteristics = [measurement, location, controlPoint]
        // The manager passed in, not the property: this first callback can run on the queue before the initialiser's
        // result is stored (the stack answers that fast), as it could with Core Bluetooth.
        peripheral.add(service)
    }

    func peripheralManager(_ peripheral: PeripheralManager, didAdd service: Service, error: Error?) {
        if let error = error { return say(.notAdded(error: error.localizedDescription)) }
        say(.added)
        peripheralManager.startAdvertising([AdvertisementDataLocalNameKey: "Beryl HR", AdvertisementDataServiceUUIDsKey: [service.uuid]])
    }

    func peripheralManagerDidStartAdvertising(_ peripheral: PeripheralManager, error: Error?) {
        say(.advertising(as: "Beryl HR", error: error?.localizedDescription))
    }

    func peripheralManager(_ peripheral: PeripheralManager, didReceiveWrite requests: [ATTRequest]) {
        // 0x01 resets the energy expended; anything else is not supported (Heart Rate Service §3.3.1).
        let accepted = requests.allSatisfy { $0.value == Data([0x01]) }
        say(.controlPointWritten(requests.first?.value.map { Array($0) } ?? [], accepted: accepted))
        peripheralManager.respond(to: requests[0], withResult: accepted ? .success : valueNotSupported)
    }

    func peripheralManager(_ peripheral: PeripheralManager, central: Central, didSubscribeTo characteristic: Characteristic) {
        subscribers += 1
        say(.subscribed)
    }

    func peripheralManager(_ peripheral: PeripheralManager, central: Central, didUnsubscribeFrom characteristic: Characteristic) {
        subscribers -= 1
        say(.unsubscribed)
    }

    /// A new measurement for whoever subscribed.
    func tick() {
        guard subscribers > 0 else { return }
        beat = beat >= 100 ? 60 : beat + 1
        // Flags 0: 8-bit heart rate value (Heart Rate Service §3.1.1.1).
        if !peripheralManager.updateValue(Data([0x00, beat]), for: measurement, onSubscribedCentrals: nil) {
            say(.heldBack(beat: beat))
        }
    }
}

var runtimeDir: String?
var seconds = 0.0
var arguments = CommandLine.arguments.dropFirst().makeIterator()
while let argument = arguments.next() {
    switch argument {
    case "--runtime-dir": runtimeDir = arguments.next()
    case "--seconds": seconds = Double(arguments.next() ?? "") ?? 0
    case "--json": break  // ReportFormat.json
    default:
        FileHandle.standardError.write(Data("usage: heart-rate-peripheral [--runtime-dir DIR] [--seconds N] [--json]\n".utf8))
        exit(64)
    }
}

let monitor = HeartRateMonitor(queue: DispatchQueue(label: "heart-rate"), socketPath: runtimeDir.map { $0 + "/managerd.sock" })
if seconds > 0 { Thread.sleep(forTimeInterval: seconds) } else { dispatchMain() }

/// What the monitor reports: a line of text, or (--json) a JSON object with the event's name, fields and text.
enum Report: ExampleReport {
    case state(String)
    case notAdded(error: String)
    case added
    case advertising(as: String, error: String?)
    case controlPointWritten([UInt8], accepted: Bool)
    case subscribed
    case unsubscribed
    case heldBack(beat: UInt8)

    var text: String {
        switch self {
        case .state(let state): "state \(state)"
        case .notAdded(let error): "could not add the service: \(error)"
        case .added: "added heart rate service"
        case .advertising(let name, let error): error.map { "advertising failed: \($0)" } ?? "advertising as \(name)"
        case .controlPointWritten(let value, let accepted): "control point write \(value) \(accepted ? "accepted" : "refused")"
        case .subscribed: "central subscribed to heart rate measurement"
        case .unsubscribed: "central unsubscribed"
        case .heldBack: "transmit queue full; waiting for peripheralManagerIsReady"
        }
    }

    var fields: [String: Any] {
        switch self {
        case .state(let state): ["event": "state", "state": state]
        case .notAdded(let error): ["event": "notAdded", "error": error]
        case .added: ["event": "added"]
        case .advertising(let name, let error): ["event": "advertising", "localName": name, "error": error ?? NSNull()]
        case .controlPointWritten(let value, let accepted): ["event": "controlPointWritten", "value": value.map(Int.init), "accepted": accepted]
        case .subscribed: ["event": "subscribed"]
        case .unsubscribed: ["event": "unsubscribed"]
        case .heldBack(let beat): ["event": "heldBack", "beat": Int(beat)]
        }
    }
}

/// One line to stdout at once: the report's text, or with --json its JSON object.
func say(_ report: Report) { report.write() }
