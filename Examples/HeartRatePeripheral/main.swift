// A heart-rate peripheral, written as the Core Bluetooth Programming Guide's peripheral tasks are:
// build the service, add it once the manager is powered on, advertise, answer reads, notify subscribers.
//
//   heart-rate-peripheral [--runtime-dir DIR] [--seconds N]
import Beryl
import Dispatch
import Foundation
import Synchronization

final class HeartRateMonitor: PeripheralManagerDelegate {
    let measurement = MutableCharacteristic(type: BluetoothUUID(0x2A37), properties: .notify, value: nil, permissions: .readable)
    // Body sensor location "chest", cached: the stack answers reads of it without asking us.
    let location = MutableCharacteristic(type: BluetoothUUID(0x2A38), properties: .read, value: Data([0x01]), permissions: .readable)
    // Heart rate control point: a dynamic, writable value.
    let controlPoint = MutableCharacteristic(type: BluetoothUUID(0x2A39), properties: .write, value: nil, permissions: .writeable)
    private let beat = Mutex<UInt8>(60)
    private let subscribers = Mutex(0)

    func peripheralManagerDidUpdateState(_ peripheral: PeripheralManager) {
        say("state \(peripheral.state)")
        guard peripheral.state == .poweredOn else { return }
        let service = MutableService(type: BluetoothUUID(0x180D), primary: true)
        service.characteristics = [measurement, location, controlPoint]
        peripheral.add(service)
    }

    func peripheralManager(_ peripheral: PeripheralManager, didAdd service: MutableService, error: BerylError?) {
        if let error { return say("could not add the service: \(error)") }
        say("added heart rate service")
        peripheral.startAdvertising(AdvertisingOptions(localName: "Beryl HR", serviceUUIDs: [service.uuid]))
    }

    func peripheralManagerDidStartAdvertising(_ peripheral: PeripheralManager, error: BerylError?) {
        say(error.map { "advertising failed: \($0)" } ?? "advertising as Beryl HR")
    }

    func peripheralManager(_ peripheral: PeripheralManager, didReceiveWrite requests: [ATTRequest]) {
        // 0x01 resets the energy expended; anything else is not supported (Heart Rate Service §3.3.1).
        let accepted = requests.allSatisfy { $0.value == Data([0x01]) }
        say("control point write \(requests.first?.value.map { Array($0) } ?? []) \(accepted ? "accepted" : "refused")")
        peripheral.respond(to: requests[0], withResult: accepted ? .success : ATTError(rawValue: 0x80) ?? .writeNotPermitted)
    }

    func peripheralManager(_ peripheral: PeripheralManager, central: Central, didSubscribeTo characteristic: MutableCharacteristic) {
        subscribers.withLock { $0 += 1 }
        say("central subscribed to heart rate measurement")
    }

    func peripheralManager(_ peripheral: PeripheralManager, central: Central, didUnsubscribeFrom characteristic: MutableCharacteristic) {
        subscribers.withLock { $0 -= 1 }
        say("central unsubscribed")
    }

    /// Called once a second: a new measurement for whoever subscribed.
    func tick(_ peripheral: PeripheralManager) {
        guard subscribers.withLock({ $0 }) > 0 else { return }
        let value = beat.withLock { beat -> UInt8 in
            beat = beat >= 100 ? 60 : beat + 1
            return beat
        }
        // Flags 0: 8-bit heart rate value (Heart Rate Service §3.1.1.1).
        if !peripheral.updateValue(Data([0x00, value]), for: measurement, onSubscribedCentrals: nil) {
            say("transmit queue full; waiting for peripheralManagerIsReady")
        }
    }
}

/// A measurement a second, off the main actor (top-level code is main-actor isolated; the timer is not).
func beatEverySecond(_ monitor: HeartRateMonitor, _ manager: PeripheralManager) -> DispatchSourceTimer {
    let timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "beats"))
    timer.schedule(deadline: .now() + 1, repeating: 1)
    timer.setEventHandler { monitor.tick(manager) }
    timer.resume()
    return timer
}

var runtimeDir: String?
var seconds = 0.0
var arguments = CommandLine.arguments.dropFirst().makeIterator()
while let argument = arguments.next() {
    switch argument {
    case "--runtime-dir": runtimeDir = arguments.next()
    case "--seconds": seconds = Double(arguments.next() ?? "") ?? 0
    default:
        FileHandle.standardError.write(Data("usage: heart-rate-peripheral [--runtime-dir DIR] [--seconds N]\n".utf8))
        exit(64)
    }
}

let monitor = HeartRateMonitor()
let queue = DispatchQueue(label: "heart-rate")
do {
    let manager = try PeripheralManager(delegate: monitor, queue: queue, appID: "com.example.heartrate",
                                        socketPath: runtimeDir.map { $0 + "/managerd.sock" })
    let timer = beatEverySecond(monitor, manager)
    if seconds > 0 { Thread.sleep(forTimeInterval: seconds) } else { dispatchMain() }
    withExtendedLifetime((manager, timer)) {}
} catch {
    FileHandle.standardError.write(Data("heart-rate-peripheral: \(error)\n".utf8))
    exit(69)
}

/// One line to stdout at once (examples are often read through a pipe).
func say(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }
