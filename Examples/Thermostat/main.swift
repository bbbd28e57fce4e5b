// A thermostat peripheral: a readable, writable setpoint (dynamic: the app answers), a notifying temperature, and a
// log stream that a subscribed central receives as fast as the link carries it (the guide's transfer pattern: send
// until updateValue returns false, go on in peripheralManagerIsReady). Each stream value is 20 bytes: the app run's
// epoch and a sequence number (both 32-bit little-endian), so a receiver can tell loss and reordering apart.
//
// With --restore the manager has a restore identifier: when the app dies, the stack keeps its service published
// and advertised, and a central reading or writing the setpoint relaunches it (bluetooth-peripheral background mode).
//
//   thermostat [--runtime-dir DIR] [--restore] [--tick SECONDS] [--json]
//
// With --tick it measures the temperature every SECONDS and notifies subscribed centrals. With --json each line it
// writes is a JSON object (the event, its fields and the text), for tools and tests to read. Launched by managerd, it
// is the app its manifest names (com.example.thermostat otherwise).
import Beryl
import ExampleReports
import Dispatch
import Foundation
import Synchronization

let thermostatService = BluetoothUUID("7E570001-0000-1000-8000-00805F9B34FB")!

final class Thermostat: PeripheralManagerDelegate, Sendable {
    /// Setpoint in tenths of a degree, little-endian (215 = 21.5 °C); allowed 5.0–30.0 °C.
    let setpoint = MutableCharacteristic(type: BluetoothUUID("7E570002-0000-1000-8000-00805F9B34FB")!, properties: [.read, .write],
                                         value: nil, permissions: [.readable, .writeable])
    let temperature = MutableCharacteristic(type: BluetoothUUID(0x2A6E), properties: [.notify], value: nil, permissions: .readable)
    let stream = MutableCharacteristic(type: BluetoothUUID("7E570003-0000-1000-8000-00805F9B34FB")!, properties: [.notify], value: nil,
                                       permissions: .readable)
    private let streaming = Mutex(Stream())
    private struct Stream {
        /// The stream characteristic as published now (see publishedTemperature), when a central subscribes to it.
        var characteristic: MutableCharacteristic?
        let epoch = UInt32.random(in: 1...UInt32.max)
        var next: UInt32 = 0
        /// Said once per subscription: the transmit queue filled and the stream waits for peripheralManagerIsReady.
        var heldBack = false
        /// A batch is on the queue already: one chain of batches at a time.
        var batchQueued = false
    }
    private let target = Mutex<UInt16>(215)
    private let restored = Mutex(false)
    private let measurements = Mutex(0)
    /// The temperature as published now: the app's own once added, the restored service's after a relaunch (the app's
    /// objects were never added then), none between a reset and the service being added again.
    private let publishedTemperature = Mutex<MutableCharacteristic?>(nil)

    /// A measurement the transmit queue had no room for: sent before any more of the stream once there is room.
    private let owedTemperature = Mutex<Data?>(nil)

    /// A new temperature (2A6E: sint16 in 0.01 °C) to whoever subscribed; a newer measurement replaces one still owed.
    func measure(_ peripheral: PeripheralManager) {
        guard publishedTemperature.withLock({ $0 }) != nil else { return }
        let count = measurements.withLock { count in
            count += 1
            return count
        }
        let hundredths = Int16(2000 + count % 100)
        owedTemperature.withLock { $0 = Data([UInt8(truncatingIfNeeded: hundredths), UInt8(truncatingIfNeeded: hundredths >> 8)]) }
        _ = sendOwedTemperature(peripheral)
    }

    /// False while a measurement is still owed (the queue is full).
    private func sendOwedTemperature(_ peripheral: PeripheralManager) -> Bool {
        guard let characteristic = publishedTemperature.withLock({ $0 }), let value = owedTemperature.withLock({ $0 }) else { return true }
        guard peripheral.updateValue(value, for: characteristic, onSubscribedCentrals: nil) else { return false }
        owedTemperature.withLock { $0 = nil }
        return true
    }

    /// A measurement owed first, then stream values until the transmit queue is full; a batch at a time, so that the
    /// manager's queue serves the rest.
    func pump(_ peripheral: PeripheralManager, on queue: DispatchQueue) {
        guard sendOwedTemperature(peripheral) else { return }
        for _ in 0..<64 {
            let next = streaming.withLock { stream -> (MutableCharacteristic, Data)? in
                // Nobody left to take it (a subscriber gone unheard): updateValue would take values for no one.
                guard let characteristic = stream.characteristic, characteristic.subscribedCentrals?.isEmpty == false else { return nil }
                var value = Data(count: 20)
                withUnsafeBytes(of: stream.epoch.littleEndian) { value.replaceSubrange(0..<4, with: $0) }
                withUnsafeBytes(of: stream.next.littleEndian) { value.replaceSubrange(4..<8, with: $0) }
                return (characteristic, value)
            }
            guard let (characteristic, value) = next else { return }
            guard peripheral.updateValue(value, for: characteristic, onSubscribedCentrals: nil) else {
                let heldBackAt = streaming.withLock { stream -> UInt32? in
                    defer { stream.heldBack = true }
                    return stream.heldBack ? nil : stream.next
                }
                if let heldBackAt { say(.streamHeldBack(at: heldBackAt)) }
                return
            }
            streaming.withLock { $0.next &+= 1 }
        }
        let queueBatch = streaming.withLock { stream in
            defer { stream.batchQueued = true }
            return !stream.batchQueued
        }
        guard queueBatch else { return }
        queue.async {
            self.streaming.withLock { $0.batchQueued = false }
            self.pump(peripheral, on: queue)
        }
    }

    func peripheralManagerIsReady(toUpdateSubscribers peripheral: PeripheralManager) {
        pump(peripheral, on: streamQueue)
    }

    func peripheralManager(_ peripheral: PeripheralManager, willRestoreState dict: [String: Any]) {
        let state = RestoredPeripheralState(dict)
        restored.withLock { $0 = true }
        let restoredCharacteristics = state.services.flatMap { $0.characteristics ?? [] }
        publishedTemperature.withLock { $0 = restoredCharacteristics.first { $0.uuid == temperature.uuid } }
        // A central that subscribed before the app died still is: the stream goes on once the manager is powered on.
        let restoredStream = restoredCharacteristics.first { $0.uuid == stream.uuid }
        if let restoredStream, restoredStream.subscribedCentrals?.isEmpty == false {
            streaming.withLock { $0.characteristic = restoredStream }
        }
        say(.restored(services: state.services.count, characteristics: restoredCharacteristics.map(\.uuid.description),
                      advertisingAs: state.advertisementData.map { $0.localName ?? "-" }))
    }

    func peripheralManagerDidUpdateState(_ peripheral: PeripheralManager) {
        guard peripheral.state == .poweredOn else {
            publishedTemperature.withLock { $0 = nil }
            streaming.withLock { $0.characteristic = nil }
            return say(.state("\(peripheral.state)"))
        }
        // A restored manager's service is still published and advertised: nothing to add. After a reset of the stack
        // (resetting, then poweredOn again) the services are gone, as after bluetoothd restarts, and are added again.
        guard !restored.withLock({ restored in
            defer { restored = false }
            return restored
        }) else { return pump(peripheral, on: streamQueue) }
        let service = MutableService(type: thermostatService, primary: true)
        service.characteristics = [setpoint, temperature, stream]
        peripheral.add(service)
    }

    func peripheralManager(_ peripheral: PeripheralManager, didAdd service: Service, error: Error?) {
        if let error { return say(.notAdded(error: "\(error)")) }
        publishedTemperature.withLock { $0 = temperature }
        peripheral.startAdvertising(AdvertisingOptions(localName: "Beryl Thermostat", serviceUUIDs: [thermostatService]))
    }

    func peripheralManagerDidStartAdvertising(_ peripheral: PeripheralManager, error: Error?) {
        say(.advertising(as: "Beryl Thermostat", error: error.map { "\($0)" }))
    }

    func peripheralManager(_ peripheral: PeripheralManager, central: Central, didSubscribeTo characteristic: Characteristic) {
        guard characteristic.uuid == stream.uuid else {
            return say(.subscribed(stream: false, central: "\(central.identifier)"))
        }
        say(.subscribed(stream: true, central: "\(central.identifier)"))
        streaming.withLock {
            $0.characteristic = characteristic
            $0.heldBack = false
        }
        pump(peripheral, on: streamQueue)
    }

    func peripheralManager(_ peripheral: PeripheralManager, central: Central, didUnsubscribeFrom characteristic: Characteristic) {
        guard characteristic.uuid == stream.uuid, characteristic.subscribedCentrals?.isEmpty != false else { return }
        say(.streamUnsubscribed)
        streaming.withLock { $0.characteristic = nil }
    }

    func peripheralManager(_ peripheral: PeripheralManager, didReceiveRead request: ATTRequest) {
        let value = target.withLock { $0 }
        say(.setpointRead(central: "\(request.central.identifier)"))
        let bytes = Data([UInt8(value & 0xFF), UInt8(value >> 8)])
        // Core Bluetooth's rule for long reads: an offset past the value is Invalid Offset.
        guard request.offset <= bytes.count else { return peripheral.respond(to: request, withResult: .invalidOffset) }
        request.value = bytes.subdata(in: request.offset..<bytes.count)
        peripheral.respond(to: request, withResult: .success)
    }

    func peripheralManager(_ peripheral: PeripheralManager, didReceiveWrite requests: [ATTRequest]) {
        // All or nothing: every write in the batch is checked before any is applied.
        guard requests.allSatisfy({ $0.offset == 0 && $0.value?.count == 2 }) else {
            return peripheral.respond(to: requests[0], withResult: .invalidAttributeValueLength)
        }
        let values = requests.map { UInt16($0.value![0]) | UInt16($0.value![1]) << 8 }
        guard values.allSatisfy({ (50...300).contains($0) }) else { return peripheral.respond(to: requests[0], withResult: ATTError.Code(rawValue: 0x80)!) }
        target.withLock { $0 = values.last! }
        say(.setpointWritten(tenths: Int(values.last!)))
        peripheral.respond(to: requests[0], withResult: .success)
    }
}

/// Not main-actor code: the timer fires on the manager's queue.
nonisolated func measure(with manager: PeripheralManager, _ thermostat: Thermostat, on queue: DispatchQueue, every seconds: Double) -> any DispatchSourceTimer {
    let timer = DispatchSource.makeTimerSource(queue: queue)
    timer.schedule(deadline: .now() + seconds, repeating: seconds)
    timer.setEventHandler { if manager.state == .poweredOn { thermostat.measure(manager) } }
    timer.resume()
    return timer
}

let streamQueue = DispatchQueue(label: "thermostat")

/// What the thermostat reports: a line of text, or (--json) a JSON object with the event's name, fields and text.
enum Report: ExampleReport {
    case relaunched(restoring: [String])
    case restored(services: Int, characteristics: [String], advertisingAs: String?)
    case state(String)
    case notAdded(error: String)
    case advertising(as: String, error: String?)
    case subscribed(stream: Bool, central: String)
    case streamUnsubscribed
    case streamHeldBack(at: UInt32)
    case setpointRead(central: String)
    case setpointWritten(tenths: Int)

    var text: String {
        switch self {
        case .relaunched(let restoring): "relaunched by the stack to restore \(restoring.joined(separator: ", "))"
        case .restored(let services, let characteristics, let name):
            "restored \(services) services (\(characteristics.joined(separator: ", "))), " + (name.map { "advertising as \($0)" } ?? "not advertising")
        case .state(let state): "state \(state)"
        case .notAdded(let error): "could not add the service: \(error)"
        case .advertising(let name, let error): error.map { "advertising failed: \($0)" } ?? "advertising as \(name)"
        case .subscribed(let stream, let central): "\(stream ? "stream" : "temperature") subscribed by \(central)"
        case .streamUnsubscribed: "stream unsubscribed"
        case .streamHeldBack(let at): "stream held back at \(at): waiting for peripheralManagerIsReady"
        case .setpointRead(let central): "setpoint read by \(central)"
        case .setpointWritten(let tenths): "setpoint \(Double(tenths) / 10) °C"
        }
    }

    var fields: [String: Any] {
        switch self {
        case .relaunched(let restoring): ["event": "relaunched", "restoring": restoring]
        case .restored(let services, let characteristics, let name):
            ["event": "restored", "services": services, "characteristics": characteristics, "advertisingAs": name ?? NSNull()]
        case .state(let state): ["event": "state", "state": state]
        case .notAdded(let error): ["event": "notAdded", "error": error]
        case .advertising(let name, let error): ["event": "advertising", "localName": name, "error": error ?? NSNull()]
        case .subscribed(let stream, let central): ["event": "subscribed", "characteristic": stream ? "stream" : "temperature", "central": central]
        case .streamUnsubscribed: ["event": "streamUnsubscribed"]
        case .streamHeldBack(let at): ["event": "streamHeldBack", "sequence": Int(at)]
        case .setpointRead(let central): ["event": "setpointRead", "central": central]
        case .setpointWritten(let tenths): ["event": "setpointWritten", "tenths": tenths]
        }
    }
}

/// One line to stdout at once: the report's text, or with --json its JSON object.
func say(_ report: Report) { report.write() }

var runtimeDir: String?
var restore = false
var tick: Double?
var arguments = CommandLine.arguments.dropFirst().makeIterator()
while let argument = arguments.next() {
    if argument == "--restore" || argument == "--json" {
        restore = restore || argument == "--restore"
        continue
    }
    switch (argument, arguments.next()) {
    case ("--runtime-dir", let value?):
        runtimeDir = value
    case ("--tick", let value?) where Double(value).map({ (0.05...3600).contains($0) }) == true:
        tick = Double(value)
    default:
        FileHandle.standardError.write(Data("usage: thermostat [--runtime-dir DIR] [--restore] [--tick SECONDS (0.05-3600)] [--json]\n".utf8))
        exit(64)
    }
}
let thermostat = Thermostat()
let launch = LaunchOptions.current
if launch.isRelaunch { say(.relaunched(restoring: launch.peripherals)) }
let queue = streamQueue
let manager = PeripheralManager(delegate: thermostat, queue: queue,
                                options: restore ? [PeripheralManagerOptionRestoreIdentifierKey: "thermostat"] : nil,
                                appID: launch.appID ?? "com.example.thermostat", socketPath: runtimeDir.map { $0 + "/managerd.sock" })
let timer = tick.map { measure(with: manager, thermostat, on: queue, every: $0) }
withExtendedLifetime((manager, timer)) { dispatchMain() }
