import Beryl
import BerylBench
import BerylDaemonKit
import BerylHCI
import BerylIPC
import BerylSupervisor
import Dispatch
import Foundation
import Synchronization

/// `beryl bench gatt --apps`: the same figures app to app, through managerd and the Beryl library on both sides
/// (a peripheral app answering dynamic reads itself, a central app subscribing), plus each daemon's memory idle and loaded.
struct GATTAppFigures: Codable {
    var link: BenchLink
    var linkSummary: String
    var notifications: [NotificationFigures]
    var reads: [GATTReadLatency]
    /// Per stack and daemon ("central managerd pss"...): resident and proportional memory, idle and after the load.
    var memory: [String: [String: UInt64]]
}

let benchServiceUUID = BluetoothUUID("B0000011-0000-1000-8000-00805F9B34FB")!
let benchNotifyingUUID = BluetoothUUID("B0000012-0000-1000-8000-00805F9B34FB")!
let benchReadValue = Data((0..<20).map { UInt8($0) })

final class BenchPeripheralApp: PeripheralManagerDelegate, Sendable {
    let notifying = MutableCharacteristic(type: benchNotifyingUUID, properties: .notify, value: nil, permissions: .readable)
    /// Served by the stack from its copy (Core Bluetooth's cached value).
    let fixed = MutableCharacteristic(type: BluetoothUUID("B0000013-0000-1000-8000-00805F9B34FB")!, properties: .read, value: benchReadValue, permissions: .readable)
    /// Asked of this app at each read.
    let dynamic = MutableCharacteristic(type: BluetoothUUID("B0000014-0000-1000-8000-00805F9B34FB")!, properties: .read, value: nil, permissions: .readable)
    let ready = DispatchSemaphore(value: 0)
    let subscribed = DispatchSemaphore(value: 0)
    let readyToUpdate = DispatchSemaphore(value: 0)
    func peripheralManagerDidUpdateState(_ peripheral: PeripheralManager) { if peripheral.state == .poweredOn { ready.signal() } }
    func peripheralManager(_ peripheral: PeripheralManager, didReceiveRead request: ATTRequest) {
        request.value = benchReadValue
        peripheral.respond(to: request, withResult: .success)
    }
    func peripheralManager(_ peripheral: PeripheralManager, central: Central, didSubscribeTo characteristic: Characteristic) { subscribed.signal() }
    func peripheralManagerIsReady(toUpdateSubscribers peripheral: PeripheralManager) { readyToUpdate.signal() }
}

final class BenchCentralApp: CentralManagerDelegate, PeripheralDelegate, Sendable {
    let ready = DispatchSemaphore(value: 0)
    let received = Mutex(SequenceTally())
    func centralManagerDidUpdateState(_ central: CentralManager) { if central.state == .poweredOn { ready.signal() } }
    func peripheral(_ peripheral: Peripheral, didUpdateValueFor characteristic: Characteristic, error: Error?) {
        guard characteristic.uuid == benchNotifyingUUID, let value = characteristic.value else { return }
        let now = ContinuousClock.now
        received.withLock { $0.received(value, at: now) }
    }
}

enum GATTAppBenchmark {
    static func run(on link: BenchLink, seconds: Double, reads: Int) throws -> GATTAppFigures {
        let scratch = try Scratch()
        defer { scratch.stopAll() }
        let sim = scratch.root + "/sim"
        try scratch.start("berylsim", [Executables.path("berylsim"), "--dir", sim, "--controllers", "2", "--log-level", "warning"] + link.simArguments,
                          socket: sim + "/control.sock")
        for (index, side) in ["central", "peripheral"].enumerated() {
            let run = "\(scratch.root)/\(side)"
            let common = ["--runtime-dir", run, "--state-dir", run + "-state", "--log-level", "warning"]
            try scratch.start("\(side) hcid", [Executables.path("hcid")] + common + ["--transport", "unix:\(sim)/controller-\(index).sock"], socket: run + "/hcid.sock")
            try scratch.start("\(side) attd", [Executables.path("attd")] + common, socket: run + "/attd.sock")
            try scratch.start("\(side) managerd", [Executables.path("managerd")] + common, socket: run + "/managerd.sock")
        }
        let daemons = ["central", "peripheral"].flatMap { side in ["hcid", "attd", "managerd"].map { "\(side) \($0)" } }
        func memory() -> [String: UInt64] {
            var figures: [String: UInt64] = [:]
            for name in daemons {
                guard let pid = scratch.pid(of: name) else { continue }
                figures["\(name) rss"] = ProcessStats.residentBytes(pid: pid) ?? 0
                figures["\(name) pss"] = ProcessStats.proportionalBytes(pid: pid) ?? 0
                figures["\(name) uss"] = ProcessStats.privateBytes(pid: pid) ?? 0
            }
            return figures
        }
        usleep(500_000)
        let idle = memory()

        let queue = DispatchQueue(label: "bench.apps")
        let peripheralApp = BenchPeripheralApp()
        let peripheralManager = PeripheralManager(delegate: peripheralApp, queue: queue, socketPath: "\(scratch.root)/peripheral/managerd.sock")
        guard peripheralApp.ready.wait(timeout: .now() + 10) == .success else { throw BenchFailure("the app benchmark stopped at: peripheral poweredOn") }
        let service = MutableService(type: benchServiceUUID, primary: true)
        service.characteristics = [peripheralApp.notifying, peripheralApp.fixed, peripheralApp.dynamic]
        let added = DispatchSemaphore(value: 0)
        Task { try? await peripheralManager.add(service); added.signal() }
        guard added.wait(timeout: .now() + 10) == .success else { throw BenchFailure("the app benchmark stopped at: add service") }
        peripheralManager.startAdvertising(AdvertisingOptions(localName: "Bench", serviceUUIDs: [service.uuid]))

        // The bench sets the link up as the stack benchmark does: it watches the central's controller for the link.
        var watchers: [IPCClient] = try ["central", "peripheral"].map { try IPCClient(path: "\(scratch.root)/\($0)/hcid.sock") }
        for watcher in watchers { try HCIBenchmark.subscribe(watcher, acl: false) }

        let centralApp = BenchCentralApp()
        let central = CentralManager(delegate: centralApp, queue: queue, socketPath: "\(scratch.root)/central/managerd.sock")
        guard centralApp.ready.wait(timeout: .now() + 10) == .success else { throw BenchFailure("the app benchmark stopped at: central poweredOn") }
        let found = Mutex<Peripheral?>(nil)
        let discovered = DispatchSemaphore(value: 0)
        Task {
            for await discovery in central.scan(withServices: [service.uuid]) {
                found.withLock { $0 = discovery.peripheral }
                break
            }
            discovered.signal()
        }
        guard discovered.wait(timeout: .now() + 10) == .success, let peripheral = found.withLock({ $0 }) else { throw BenchFailure("the app benchmark stopped at: discovery") }
        peripheral.delegate = centralApp
        let connected = DispatchSemaphore(value: 0)
        Task { try? await central.connected(to: peripheral); connected.signal() }
        guard connected.wait(timeout: .now() + 10) == .success else { throw BenchFailure("the app benchmark stopped at: connect") }
        if link == .airTime {
            try link.setUp(central: (watchers[0], try HCIBenchmark.waitForHandle(watchers[0])),
                           peripheral: (watchers[1], try HCIBenchmark.waitForHandle(watchers[1])))
        }
        watchers = []  // closed: no copy of the links' events goes to the bench from now on

        peripheral.discoverServices([service.uuid])
        let deadline = Date().addingTimeInterval(10)
        while peripheral.services?.first == nil, Date() < deadline { usleep(10_000) }
        if let discovered = peripheral.services?.first { peripheral.discoverCharacteristics(nil, for: discovered) }
        while peripheral.services?.first?.characteristics == nil, Date() < deadline { usleep(10_000) }
        guard let characteristics = peripheral.services?.first?.characteristics, characteristics.count == 3 else { throw BenchFailure("the app benchmark stopped at: discover services") }
        peripheral.setNotifyValue(true, for: characteristics[0])
        guard peripheralApp.subscribed.wait(timeout: .now() + 10) == .success else { throw BenchFailure("the app benchmark stopped at: subscribe") }
        while peripheral.maximumWriteValueLength(for: .withoutResponse) < 244, Date() < deadline { usleep(10_000) }

        var pids = Dictionary(uniqueKeysWithValues: daemons.compactMap { name in scratch.pid(of: name).map { (name, $0) } })
        pids["berylsim"] = scratch.pid(of: "berylsim")
        pids["both apps (this process)"] = getpid()
        let notifications = try GATTBenchmark.sizes.map { size in
            var figures = try stream(size: size, seconds: seconds, peripheralManager, peripheralApp, centralApp, pids: pids)
            figures.physicalLimitPerSecond = link.physicalLimit(valueBytes: size)
            return figures
        }

        func timeReads(_ characteristic: Characteristic, _ name: String) throws -> [Double] {
            var samples: [Double] = []
            for index in 0..<(reads + GATTReadLatency.warmUpReads) {
                let done = DispatchSemaphore(value: 0)
                let value = Mutex<Data?>(nil)
                let clock = ContinuousClock()
                let start = clock.now
                Task {
                    let read = try? await peripheral.readValue(for: characteristic)
                    value.withLock { $0 = read }
                    done.signal()
                }
                guard done.wait(timeout: .now() + 10) == .success else { throw BenchFailure("the app benchmark stopped at: \(name) read \(index)") }
                if index >= GATTReadLatency.warmUpReads { samples.append(HCIBenchmark.durationSeconds(clock.now - start) * 1e6) }
                guard value.withLock({ $0 }) == benchReadValue else { throw BenchFailure("the app benchmark stopped at: \(name) read \(index) returned another value") }
            }
            return samples
        }
        // The stack's ten crossings, plus app to managerd and back on the central; a dynamic value also goes attd →
        // managerd → the peripheral app and back.
        let readings = [try GATTReadLatency.measure("static", crossings: 10, pids: pids) { try timeReads(characteristics[1], "static") },
                        try GATTReadLatency.measure("dynamic", crossings: 12, pids: pids) { try timeReads(characteristics[2], "dynamic") }]
        let loaded = memory()
        withExtendedLifetime((peripheralManager, central)) {}
        var figures: [String: [String: UInt64]] = [:]
        for (key, value) in idle { figures[key, default: [:]]["idle"] = value }
        for (key, value) in loaded { figures[key, default: [:]]["loaded"] = value }
        return GATTAppFigures(link: link, linkSummary: link.summary, notifications: notifications, reads: readings, memory: figures)
    }

    /// updateValue as fast as the stack takes it: on false the same value waits for peripheralManagerIsReady, as
    /// Core Bluetooth's documentation asks; each value carries a sequence number the central app checks.
    private static func stream(size: Int, seconds: Double, _ manager: PeripheralManager, _ app: BenchPeripheralApp, _ receiver: BenchCentralApp,
                               pids: [String: Int32]) throws -> NotificationFigures {
        while app.readyToUpdate.wait(timeout: .now()) == .success {}
        receiver.received.withLock { $0 = .init() }
        let clock = ContinuousClock()
        let warmEnd = clock.now + GATTBenchmark.warmUp
        var windowEnd: ContinuousClock.Instant?
        var cpu = ProcessCPU(pids: pids)
        var value = Data(repeating: 0x5A, count: size)
        var sequence: UInt32 = 0
        var refused = 0
        while windowEnd.map({ clock.now < $0 }) ?? true {
            if windowEnd == nil, clock.now >= warmEnd {
                let start = clock.now
                windowEnd = start + .milliseconds(Int(seconds * 1000))
                cpu.startWindow()
                receiver.received.withLock { $0.window = start..<windowEnd! }
            }
            SequenceTally.stamp(sequence, into: &value)
            if manager.updateValue(value, for: app.notifying, onSubscribedCentrals: nil) {
                sequence += 1
            } else {
                refused += 1
                guard app.readyToUpdate.wait(timeout: .now() + 2) == .success else { throw BenchFailure("the app benchmark stopped at: no peripheralManagerIsReady within 2 s of a refused update") }
            }
        }
        let used = cpu.usedSinceStart()
        // Drain: what was accepted arrives, or counts as lost once nothing has come for 300 ms.
        var last = receiver.received.withLock { $0.total }
        var quietSince = clock.now
        while clock.now - quietSince < .milliseconds(300) {
            usleep(20_000)
            let now = receiver.received.withLock { $0.total }
            if now != last { (last, quietSince) = (now, clock.now) }
        }
        return NotificationFigures(valueBytes: size, seconds: seconds, tally: receiver.received.withLock { $0 }, accepted: Int(sequence), refused: refused,
                                   cpu: used)
    }
}
