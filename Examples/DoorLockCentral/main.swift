// The door-lock central of the programming guide's restoration chapter. Foreground form: connect to the lock (a
// connection that never times out), read its state — encryption required, so the stack pairs first — and unlock
// it. With --restore, the chapter's app: a central manager with a restore identifier that keeps a connection to
// the lock pending for as long as it takes; when the lock comes back while the app is not running, managerd
// relaunches it (from its manifest), hands back the peripheral in willRestoreState, and the app reads and unlocks.
//
//   door-lock-central [--runtime-dir DIR] [--unlock] [--restore]
import Beryl
import Dispatch
import Foundation
import Synchronization

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

/// The restoration chapter's app, delegate style: every step starts from a callback, so a relaunched process picks
/// up wherever the preserved manager was.
final class RestorableDoorLock: CentralManagerDelegate, PeripheralDelegate {
    let unlock: Bool
    let relaunched: Bool
    private let restoredLock = Mutex<Peripheral?>(nil)
    /// One use per connection, whether it arrives restored as connected or as a didConnect.
    private let inUse = Mutex(false)

    init(unlock: Bool, relaunched: Bool) {
        self.unlock = unlock
        self.relaunched = relaunched
    }

    func centralManager(_ central: CentralManager, willRestoreState state: RestoredCentralState) {
        for peripheral in state.peripherals {
            peripheral.delegate = self
            restoredLock.withLock { $0 = peripheral }
            let notifying = (peripheral.services ?? []).flatMap { $0.characteristics ?? [] }.filter(\.isNotifying).count
            say("restored \(peripheral.identifier) (\(peripheral.state), \(peripheral.services?.count ?? 0) services known, \(notifying) notifying)")
        }
        if state.isScanning { say("restored a scan for \(state.scanServices?.map(\.description) ?? ["everything"])") }
    }

    func centralManagerDidUpdateState(_ central: CentralManager) {
        guard central.state == .poweredOn else { return }
        if let lock = restoredLock.withLock({ $0 }) {
            // A restored pending connection goes on by itself; a restored live one is used at once.
            if lock.state == .connected { useLock(lock, central) }
            return
        }
        // A relaunch is for an event managerd queued; it arrives next.
        guard !relaunched else { return }
        say("looking for the lock")
        central.scanForPeripherals(withServices: [lockService])
    }

    func centralManager(_ central: CentralManager, didDiscover peripheral: Peripheral, advertisementData: AdvertisementData, rssi: Int) {
        central.stopScan()
        peripheral.delegate = self
        restoredLock.withLock { $0 = peripheral }
        say("found the lock; connecting (this never times out)")
        central.connect(peripheral)
    }

    func centralManager(_ central: CentralManager, didConnect peripheral: Peripheral) {
        say("connected to the lock")
        useLock(peripheral, central)
    }

    func centralManager(_ central: CentralManager, didDisconnectPeripheral peripheral: Peripheral, error: BerylError?) {
        // The lock went out of range: ask again, and let the stack wait for it, whether or not this process lives on.
        inUse.withLock { $0 = false }
        say("the lock went away (\(error.map { "\($0)" } ?? "cleanly")); waiting for it")
        central.connect(peripheral)
        central.reportApplicationState(.background)
    }

    private func useLock(_ lock: Peripheral, _ central: CentralManager) {
        guard inUse.withLock({ busy in defer { busy = true }; return !busy }) else { return }
        Task {
            do {
                let services = try await lock.services(discovering: [lockService])
                guard let characteristics = services.first?.characteristics,
                      let state = characteristics.first(where: { $0.uuid == lockState }) else { throw BerylError.failed("not a door lock") }
                let value = try await lock.readValue(for: state)
                say("lock says \"\(String(decoding: value, as: UTF8.self))\"")
                if unlock, let command = characteristics.first(where: { $0.uuid == lockCommand }) {
                    try await lock.writeValue(Data("unlock".utf8), for: command)
                    say("unlock sent")
                }
            } catch {
                say("the lock did not answer: \(error)")
            }
            // Done with what woke us: back to idle in the background (the stack keeps the link).
            central.reportApplicationState(.background)
        }
    }
}

var runtimeDir: String?
var unlock = false
var restore = false
var arguments = CommandLine.arguments.dropFirst().makeIterator()
while let argument = arguments.next() {
    switch argument {
    case "--runtime-dir": runtimeDir = arguments.next()
    case "--unlock": unlock = true
    case "--restore": restore = true
    default:
        FileHandle.standardError.write(Data("usage: door-lock-central [--runtime-dir DIR] [--unlock] [--restore]\n".utf8))
        exit(64)
    }
}
if restore {
    let launch = LaunchOptions.current
    say(launch.isRelaunch ? "relaunched by the stack to restore \(launch.centrals.joined(separator: ", "))" : "started")
    let app = RestorableDoorLock(unlock: unlock, relaunched: launch.isRelaunch)
    let central: CentralManager
    do {
        central = try CentralManager(delegate: app, queue: DispatchQueue(label: "door-lock"), options: CentralManagerOptions(restoreIdentifier: "door-lock-central"),
                                     socketPath: runtimeDir.map { $0 + "/managerd.sock" })
    } catch {
        FileHandle.standardError.write(Data("door-lock-central: \(error)\n".utf8))
        exit(1)
    }
    central.apiMisuseHandler = { say("refused: \($0)") }
    // Runs until the system terminates it (or the user quits it): the stack keeps the lock's connection either way.
    withExtendedLifetime((central, app)) { dispatchMain() }
}
do {
    try await run(runtimeDir: runtimeDir, unlock: unlock)
} catch {
    FileHandle.standardError.write(Data("door-lock-central: \(error)\n".utf8))
    exit(1)
}
