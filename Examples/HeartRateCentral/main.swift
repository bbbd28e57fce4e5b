// A heart-rate central, written as the Core Bluetooth Programming Guide's central tasks are: scan for the
// service, connect, discover, read the sensor location, subscribe to measurements, write the control point.
//
//   heart-rate-central [--runtime-dir DIR] [--count N]
import Beryl
import Dispatch
import Foundation

var runtimeDir: String?
var wanted = 5
var arguments = CommandLine.arguments.dropFirst().makeIterator()
while let argument = arguments.next() {
    switch argument {
    case "--runtime-dir": runtimeDir = arguments.next()
    case "--count": wanted = Int(arguments.next() ?? "") ?? 5
    default:
        FileHandle.standardError.write(Data("usage: heart-rate-central [--runtime-dir DIR] [--count N]\n".utf8))
        exit(64)
    }
}


let heartRate = BluetoothUUID(0x180D)
func run(runtimeDir: String?, wanted: Int) async throws {
    let central = try CentralManager(delegate: nil, queue: DispatchQueue(label: "central"), appID: "com.example.heartrate-central",
                                     socketPath: runtimeDir.map { $0 + "/managerd.sock" })
    let deadline = Date().addingTimeInterval(10)
    while central.state != .poweredOn {
        guard Date() < deadline else { throw BerylError.notPoweredOn }
        try await Task.sleep(for: .milliseconds(50))
    }
    var found: Discovery?
    for await discovery in central.scan(withServices: [heartRate]) {
        found = discovery
        break
    }
    guard let discovery = found else { throw BerylError.unknownPeripheral }
    say("discovered \(discovery.advertisementData.localName ?? "a heart rate monitor") (RSSI \(discovery.rssi))")
    let peripheral = discovery.peripheral
    try await central.connect(peripheral)
    say("connected")
    let measurements = Measurements(wanted: wanted)
    peripheral.delegate = measurements
    peripheral.discoverServices([heartRate])
    while peripheral.services == nil { try await Task.sleep(for: .milliseconds(20)) }
    guard let service = peripheral.services?.first(where: { $0.uuid == heartRate }), let characteristics = service.characteristics else {
        throw BerylError.failed("the peripheral has no heart rate service")
    }
    say("discovered \(characteristics.count) characteristics")
    if let location = characteristics.first(where: { $0.uuid == BluetoothUUID(0x2A38) }) {
        let value = try await peripheral.readValue(for: location)
        say("sensor location \(value.first.map { $0 == 1 ? "chest" : "code \($0)" } ?? "?")")
    }
    if let measurement = characteristics.first(where: { $0.uuid == BluetoothUUID(0x2A37) }) {
        peripheral.setNotifyValue(true, for: measurement)
        await measurements.waitForAll()
    }
    if let control = characteristics.first(where: { $0.uuid == BluetoothUUID(0x2A39) }) {
        try await peripheral.writeValue(Data([0x01]), for: control)
        say("reset energy expended")
    }
    central.cancelPeripheralConnection(peripheral)
    say("done")
}

/// Counts measurements as they are notified.
final class Measurements: PeripheralDelegate {
    let wanted: Int
    private let stream: AsyncStream<Int>
    private let continuation: AsyncStream<Int>.Continuation

    init(wanted: Int) {
        self.wanted = wanted
        (stream, continuation) = AsyncStream<Int>.makeStream()
    }

    func peripheral(_ peripheral: Peripheral, didUpdateValueFor characteristic: Characteristic, error: BerylError?) {
        guard characteristic.uuid == BluetoothUUID(0x2A37), let value = characteristic.value, value.count >= 2 else { return }
        say("heart rate \(value[value.startIndex + 1]) bpm")
        continuation.yield(Int(value[value.startIndex + 1]))
    }

    func waitForAll() async {
        var seen = 0
        for await _ in stream {
            seen += 1
            if seen >= wanted { break }
        }
    }
}

do {
    try await run(runtimeDir: runtimeDir, wanted: wanted)
} catch {
    FileHandle.standardError.write(Data("heart-rate-central: \(error)\n".utf8))
    exit(1)
}

/// One line to stdout at once (examples are often read through a pipe).
func say(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }
