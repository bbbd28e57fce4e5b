// The door-lock central of the programming guide's restoration chapter, in its foreground form: connect to the
// lock (a connection that never times out), read its state — encryption required, so the stack pairs first —
// and unlock it. Restoration (relaunch with the preserved connection) comes with app manifests.
//
//   door-lock-central [--runtime-dir DIR] [--unlock] [--json]
//
// With --json each line is a JSON object naming its event (what the tests read).
import Beryl
import Dispatch
import ExampleReports
import Foundation

let lockService = BluetoothUUID(string: "D00D0001-0000-1000-8000-00805F9B34FB")
let lockState = BluetoothUUID(string: "D00D0002-0000-1000-8000-00805F9B34FB")
let lockCommand = BluetoothUUID(string: "D00D0003-0000-1000-8000-00805F9B34FB")

/// What the central reports: a line of text, or (--json) a JSON object with the event's name, fields and text.
enum Report: ExampleReport {
    case connected(name: String?, identifier: UUID)
    case lockSays(String)
    case unlockSent

    var text: String {
        switch self {
        case .connected(let name, let identifier): "connected to \(name ?? "the lock") (\(identifier))"
        case .lockSays(let state): "lock says \"\(state)\""
        case .unlockSent: "unlock sent"
        }
    }

    var fields: [String: Any] {
        switch self {
        case .connected(let name, let identifier): ["event": "connected", "name": name ?? NSNull(), "identifier": identifier.uuidString]
        case .lockSays(let state): ["event": "lockState", "state": state]
        case .unlockSent: ["event": "unlockSent"]
        }
    }
}

func say(_ report: Report) { report.write() }

func fail(_ why: String) -> Never {
    FileHandle.standardError.write(Data("door-lock-central: \(why)\n".utf8))
    exit(1)
}

final class DoorLockCentral: NSObject, CentralManagerDelegate, PeripheralDelegate {
    var centralManager: CentralManager!
    var lock: Peripheral?
    var command: Characteristic?
    let unlock: Bool

    init(unlock: Bool, socketPath: String?) {
        self.unlock = unlock
        super.init()
        centralManager = CentralManager(delegate: self, queue: nil, options: nil, appID: "com.example.doorlock", socketPath: socketPath)
    }

    func centralManagerDidUpdateState(_ central: CentralManager) {
        guard central.state == .poweredOn else { return }
        central.scanForPeripherals(withServices: [lockService], options: nil)
    }

    func centralManager(_ central: CentralManager, didDiscover peripheral: Peripheral, advertisementData: [String: Any], rssi RSSI: NSNumber) {
        guard lock == nil else { return }
        lock = peripheral
        central.stopScan()
        central.connect(peripheral, options: nil)
    }

    func centralManager(_ central: CentralManager, didConnect peripheral: Peripheral) {
        say(.connected(name: peripheral.name, identifier: peripheral.identifier))
        peripheral.delegate = self
        peripheral.discoverServices([lockService])
    }

    func peripheral(_ peripheral: Peripheral, didDiscoverServices error: Error?) {
        if let error = error { fail("discovery failed: \(error.localizedDescription)") }
        guard let service = peripheral.services?.first(where: { $0.uuid == lockService }) else { fail("not a door lock") }
        peripheral.discoverCharacteristics([lockState, lockCommand], for: service)
    }

    func peripheral(_ peripheral: Peripheral, didDiscoverCharacteristicsFor service: Service, error: Error?) {
        guard let state = service.characteristics?.first(where: { $0.uuid == lockState }) else { fail("not a door lock") }
        command = service.characteristics?.first { $0.uuid == lockCommand }
        // Encryption required: the stack pairs first, then reads.
        peripheral.readValue(for: state)
    }

    func peripheral(_ peripheral: Peripheral, didUpdateValueFor characteristic: Characteristic, error: Error?) {
        if let error = error { fail("reading the lock failed: \(error.localizedDescription)") }
        say(.lockSays(String(decoding: characteristic.value ?? Data(), as: UTF8.self)))
        guard unlock, let command else { return finish(peripheral) }
        peripheral.writeValue(Data("unlock".utf8), for: command, type: .withResponse)
    }

    func peripheral(_ peripheral: Peripheral, didWriteValueFor characteristic: Characteristic, error: Error?) {
        if let error = error { fail("the lock refused: \(error.localizedDescription)") }
        say(.unlockSent)
        finish(peripheral)
    }

    func finish(_ peripheral: Peripheral) {
        centralManager.cancelPeripheralConnection(peripheral)
        exit(0)
    }
}

var runtimeDir: String?
var unlock = false
var arguments = CommandLine.arguments.dropFirst().makeIterator()
while let argument = arguments.next() {
    switch argument {
    case "--runtime-dir": runtimeDir = arguments.next()
    case "--unlock": unlock = true
    case "--json": break  // ReportFormat.json
    default:
        FileHandle.standardError.write(Data("usage: door-lock-central [--runtime-dir DIR] [--unlock] [--json]\n".utf8))
        exit(64)
    }
}
let central = DoorLockCentral(unlock: unlock, socketPath: runtimeDir.map { $0 + "/managerd.sock" })
DispatchQueue.main.asyncAfter(deadline: .now() + 30) { fail("the lock did not answer in 30 s") }
dispatchMain()
