import Beryl
import BerylBench
import BerylDaemonKit
import BerylSupervisor
import Dispatch
import Foundation
import Synchronization

/// `beryl bench gatt --apps`: the same figures app to app, through managerd and the Beryl library on both sides
/// (a peripheral app answering reads itself, a central app subscribing), plus each daemon's memory idle and loaded.
struct GATTAppFigures: Codable {
    var notifications: [GATTThroughput]
    var read: GATTReadLatency
    /// Per stack and daemon ("central managerd"...): resident and proportional memory, idle and after the load.
    var memory: [String: [String: UInt64]]
}

final class BenchPeripheralApp: PeripheralManagerDelegate, Sendable {
    let notifying = MutableCharacteristic(type: BluetoothUUID("B0000012-0000-1000-8000-00805F9B34FB")!, properties: .notify, value: nil, permissions: .readable)
    let dynamic = MutableCharacteristic(type: BluetoothUUID("B0000013-0000-1000-8000-00805F9B34FB")!, properties: .read, value: nil, permissions: .readable)
    let ready = DispatchSemaphore(value: 0)
    let subscribed = DispatchSemaphore(value: 0)
    func peripheralManagerDidUpdateState(_ peripheral: PeripheralManager) { if peripheral.state == .poweredOn { ready.signal() } }
    func peripheralManager(_ peripheral: PeripheralManager, didReceiveRead request: ATTRequest) {
        request.value = Data((0..<20).map { UInt8($0) })
        peripheral.respond(to: request, withResult: .success)
    }
    func peripheralManager(_ peripheral: PeripheralManager, central: Central, didSubscribeTo characteristic: Characteristic) { subscribed.signal() }
}

final class BenchCentralApp: CentralManagerDelegate, PeripheralDelegate, Sendable {
    let ready = DispatchSemaphore(value: 0)
    let received = Mutex(0)
    func centralManagerDidUpdateState(_ central: CentralManager) { if central.state == .poweredOn { ready.signal() } }
    func peripheral(_ peripheral: Peripheral, didUpdateValueFor characteristic: Characteristic, error: Error?) {
        if characteristic.uuid == BluetoothUUID("B0000012-0000-1000-8000-00805F9B34FB")! { received.withLock { $0 += 1 } }
    }
}

enum GATTAppBenchmark {
    enum Failure: Error, CustomStringConvertible {
        case step(String)
        var description: String { if case .step(let what) = self { "the app benchmark stopped at: \(what)" } else { "" } }
    }

    static func run(seconds: Double, reads: Int) throws -> GATTAppFigures {
        let scratch = try Scratch()
        defer { scratch.stopAll() }
        let sim = scratch.root + "/sim"
        try scratch.start("berylsim", [Executables.path("berylsim"), "--dir", sim, "--controllers", "2", "--log-level", "warning"], socket: sim + "/control.sock")
        for (index, side) in ["central", "peripheral"].enumerated() {
            let run = "\(scratch.root)/\(side)"
            let common = ["--runtime-dir", run, "--state-dir", run + "-state", "--log-level", "warning"]
            try scratch.start("\(side) hcid", [Executables.path("hcid")] + common + ["--transport", "unix:\(sim)/controller-\(index).sock"], socket: run + "/hcid.sock")
            try scratch.start("\(side) attd", [Executables.path("attd")] + common, socket: run + "/attd.sock")
            try scratch.start("\(side) managerd", [Executables.path("managerd")] + common, socket: run + "/managerd.sock")
        }
        func memory() -> [String: UInt64] {
            var figures: [String: UInt64] = [:]
            for side in ["central", "peripheral"] {
                for daemon in ["hcid", "attd", "managerd"] {
                    guard let pid = scratch.pid(of: "\(side) \(daemon)") else { continue }
                    figures["\(side) \(daemon) rss"] = ProcessStats.residentBytes(pid: pid) ?? 0
                    figures["\(side) \(daemon) pss"] = ProcessStats.proportionalBytes(pid: pid) ?? 0
                }
            }
            return figures
        }
        usleep(500_000)
        let idle = memory()

        let queue = DispatchQueue(label: "bench.apps")
        let peripheralApp = BenchPeripheralApp()
        let peripheralManager = PeripheralManager(delegate: peripheralApp, queue: queue, socketPath: "\(scratch.root)/peripheral/managerd.sock")
        guard peripheralApp.ready.wait(timeout: .now() + 10) == .success else { throw Failure.step("peripheral poweredOn") }
        let service = MutableService(type: BluetoothUUID("B0000011-0000-1000-8000-00805F9B34FB")!, primary: true)
        service.characteristics = [peripheralApp.notifying, peripheralApp.dynamic]
        let added = DispatchSemaphore(value: 0)
        Task { try? await peripheralManager.add(service); added.signal() }
        guard added.wait(timeout: .now() + 10) == .success else { throw Failure.step("add service") }
        peripheralManager.startAdvertising(AdvertisingOptions(localName: "Bench", serviceUUIDs: [service.uuid]))

        let centralApp = BenchCentralApp()
        let central = CentralManager(delegate: centralApp, queue: queue, socketPath: "\(scratch.root)/central/managerd.sock")
        guard centralApp.ready.wait(timeout: .now() + 10) == .success else { throw Failure.step("central poweredOn") }
        let found = Mutex<Peripheral?>(nil)
        let discovered = DispatchSemaphore(value: 0)
        Task {
            for await discovery in central.scan(withServices: [service.uuid]) {
                found.withLock { $0 = discovery.peripheral }
                break
            }
            discovered.signal()
        }
        guard discovered.wait(timeout: .now() + 10) == .success, let peripheral = found.withLock({ $0 }) else { throw Failure.step("discovery") }
        peripheral.delegate = centralApp
        let connected = DispatchSemaphore(value: 0)
        Task { try? await central.connected(to: peripheral); connected.signal() }
        guard connected.wait(timeout: .now() + 10) == .success else { throw Failure.step("connect") }
        peripheral.discoverServices([service.uuid])
        let deadline = Date().addingTimeInterval(10)
        while peripheral.services?.first == nil, Date() < deadline { usleep(10_000) }
        if let discovered = peripheral.services?.first { peripheral.discoverCharacteristics(nil, for: discovered) }
        while peripheral.services?.first?.characteristics == nil, Date() < deadline { usleep(10_000) }
        guard let characteristics = peripheral.services?.first?.characteristics, characteristics.count == 2 else { throw Failure.step("discover services") }
        peripheral.setNotifyValue(true, for: characteristics[0])
        guard peripheralApp.subscribed.wait(timeout: .now() + 10) == .success else { throw Failure.step("subscribe") }

        var notifications: [GATTThroughput] = []
        for size in [20, 244] {
            centralApp.received.withLock { $0 = 0 }
            let clock = ContinuousClock()
            let start = clock.now
            let end = start + .milliseconds(Int(seconds * 1000))
            let value = Data(repeating: 0x5A, count: size)
            while clock.now < end {
                // updateValue answers false when the queue is full; the ready callback follows, a pause does here.
                if !peripheralManager.updateValue(value, for: peripheralApp.notifying, onSubscribedCentrals: nil) { usleep(1000) }
            }
            let elapsed = HCIBenchmark.durationSeconds(clock.now - start)
            let count = centralApp.received.withLock { $0 }
            notifications.append(GATTThroughput(valueBytes: size, perSecond: Double(count) / elapsed, bytesPerSecond: Double(count * size) / elapsed))
            usleep(300_000)  // let the queue drain before the next size
        }

        var samples: [Double] = []
        for _ in 0..<reads {
            let done = DispatchSemaphore(value: 0)
            let clock = ContinuousClock()
            let start = clock.now
            Task {
                _ = try? await peripheral.readValue(for: characteristics[1])
                done.signal()
            }
            guard done.wait(timeout: .now() + 10) == .success else { throw Failure.step("read") }
            samples.append(HCIBenchmark.durationSeconds(clock.now - start) * 1e6)
        }
        samples.sort()
        let loaded = memory()
        withExtendedLifetime((peripheralManager, central)) {}
        var figures: [String: [String: UInt64]] = [:]
        for (key, value) in idle { figures[key, default: [:]]["idle"] = value }
        for (key, value) in loaded { figures[key, default: [:]]["loaded"] = value }
        return GATTAppFigures(notifications: notifications,
                              read: GATTReadLatency(count: reads, p50Microseconds: samples[samples.count / 2],
                                                    p99Microseconds: samples[min(samples.count - 1, samples.count * 99 / 100)]),
                              memory: figures)
    }
}
