// The door-lock central of the programming guide's restoration chapter, in its foreground form: connect to the
// lock (a connection that never times out), read its state — encryption required, so the stack pairs first —
// and unlock it. Restoration (relaunch with the preserved connection) comes with app manifests.
//
//   door-lock-central [--runtime-dir DIR] [--unlock]
import Beryl
import Dispatch
import Foundation

let lockService = BluetoothUUID("D00D0001-0000-1000-8000-00805F9B34FB")!
let lockState = BluetoothUUID("D00D0002-0000-1000-8000-00805F9B34FB")!
let lockCommand = BluetoothUUID("D00D0003-0000-1000-8000-00805F9B34FB")!

func say(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }

func run(runtimeDir: String?, unlock: Bool) async throws {
    let central = try CentralManager(delegate: nil, queue: DispatchQueue(label: "door-lock"), appID: "com.example.doorlock",
                                     socketPath: runtimeDir.map { $0 + "/managerd.sock" })
    while central.state != .poweredOn { try await Task.sleep(for: .milliseconds(50)) }
    var lock: Peripheral?
    for await discovery in central.scan(withServices: [lockService]) {
        lock = discovery.peripheral
        break
    }
    guard let lock else { throw BerylError.unknownPeripheral }
    try await central.connect(lock)
    say("connected to \(lock.name ?? "the lock") (\(lock.identifier))")
    lock.discoverServices([lockService])
    while lock.services == nil { try await Task.sleep(for: .milliseconds(20)) }
    guard let characteristics = lock.services?.first?.characteristics,
          let state = characteristics.first(where: { $0.uuid == lockState }) else { throw BerylError.failed("not a door lock") }
    let value = try await lock.readValue(for: state)
    say("lock says \"\(String(decoding: value, as: UTF8.self))\"")
    if unlock, let command = characteristics.first(where: { $0.uuid == lockCommand }) {
        try await lock.writeValue(Data("unlock".utf8), for: command)
        say("unlock sent")
    }
    central.cancelPeripheralConnection(lock)
}

var runtimeDir: String?
var unlock = false
var arguments = CommandLine.arguments.dropFirst().makeIterator()
while let argument = arguments.next() {
    switch argument {
    case "--runtime-dir": runtimeDir = arguments.next()
    case "--unlock": unlock = true
    default:
        FileHandle.standardError.write(Data("usage: door-lock-central [--runtime-dir DIR] [--unlock]\n".utf8))
        exit(64)
    }
}
do {
    try await run(runtimeDir: runtimeDir, unlock: unlock)
} catch {
    FileHandle.standardError.write(Data("door-lock-central: \(error)\n".utf8))
    exit(1)
}
