import BerylCore
import BerylDaemonKit
import BerylHCI
import BerylIPC
import BerylSupervisor
import Foundation

public struct GATTThroughput: Codable, Sendable {
    public var valueBytes: Int
    public var perSecond: Double
    public var bytesPerSecond: Double

    public init(valueBytes: Int, perSecond: Double, bytesPerSecond: Double) {
        self.valueBytes = valueBytes
        self.perSecond = perSecond
        self.bytesPerSecond = bytesPerSecond
    }
}

public struct GATTReadLatency: Codable, Sendable {
    public var count: Int
    public var p50Microseconds: Double
    public var p99Microseconds: Double

    public init(count: Int, p50Microseconds: Double, p99Microseconds: Double) {
        self.count = count
        self.p50Microseconds = p50Microseconds
        self.p99Microseconds = p99Microseconds
    }
}

public struct GATTBenchmarkResult: Codable, Sendable {
    public var beryl: [GATTThroughput]
    public var berylRead: GATTReadLatency
    /// CPU per 10,000 notifications of 20 bytes, per daemon (peripheral attd and hcid, central hcid and attd).
    public var cpuMillisecondsPer10kNotifications: [String: Double]
    public var bumble: [GATTThroughput]?
    public var bumbleRead: GATTReadLatency?
    public var bumbleNote: String
    public var note: String
}

/// `beryl bench gatt`: notifications and reads between two Beryl stacks (hcid + attd each) on berylsim, and the same
/// between two Bumble hosts on Bumble's software controllers, measured in the same run.
public enum GATTBenchmark {
    public static func run(seconds: Double = 2, reads: Int = 300, bumble: Bool = true) throws -> GATTBenchmarkResult {
        let scratch = try Scratch()
        defer { scratch.stopAll() }
        let sim = scratch.root + "/sim"
        try scratch.start("berylsim", [Executables.path("berylsim"), "--dir", sim, "--controllers", "2", "--log-level", "warning"],
                          socket: sim + "/control.sock")
        for index in 0...1 {
            let runtime = "\(scratch.root)/run\(index)"
            let common = ["--runtime-dir", runtime, "--state-dir", "\(scratch.root)/state\(index)", "--log-level", "warning"]
            try scratch.start("hcid\(index)", [Executables.path("hcid")] + common + ["--transport", "unix:\(sim)/controller-\(index).sock"],
                              socket: runtime + "/hcid.sock")
            let deadline = ContinuousClock.now + .seconds(10)
            while StackProbe.controllerInfo(at: runtime + "/hcid.sock")?.state != .poweredOn {
                guard ContinuousClock.now < deadline else { throw StackError.controllerNotReady(after: .seconds(10), state: "not poweredOn", detail: "") }
                usleep(20_000)
            }
            try scratch.start("attd\(index)", [Executables.path("attd")] + common, socket: runtime + "/attd.sock")
        }
        let centralHCI = try IPCClient(path: "\(scratch.root)/run0/hcid.sock")
        let peripheralHCI = try IPCClient(path: "\(scratch.root)/run1/hcid.sock")
        let central = try IPCClient(path: "\(scratch.root)/run0/attd.sock")
        let publisher = try IPCClient(path: "\(scratch.root)/run1/attd.sock")

        // The peripheral's service: a notifying value and a 20-byte value attd serves itself.
        var publish = Request()
        publish.att.publishService.service = .with {
            $0.uuid = "B0000001-0000-1000-8000-00805F9B34FB"
            $0.primary = true
            $0.characteristics = [
                .with { $0.uuid = "B0000002-0000-1000-8000-00805F9B34FB"; $0.properties = 0x10; $0.permissions = 0x01; $0.cached = true; $0.value = Data([0]) },
                .with { $0.uuid = "B0000003-0000-1000-8000-00805F9B34FB"; $0.properties = 0x02; $0.permissions = 0x01; $0.cached = true
                    $0.value = Data((0..<20).map { UInt8($0) }) },
            ]
        }
        let handles = try publisher.call(publish).att.servicePublished.valueHandles
        guard handles.count == 2 else { throw StackError.notReady(after: .zero, log: "the service was not published") }

        // Connect at 7.5 ms with 251-byte data length, as the HCI benchmark does.
        try HCIBenchmark.subscribe(centralHCI)
        try HCIBenchmark.subscribe(peripheralHCI)
        _ = try HCIBenchmark.command(peripheralHCI, HCICommands.leSetAdvertisingParameters(interval: 0x20))
        _ = try HCIBenchmark.command(peripheralHCI, HCICommands.leSetAdvertisingEnable(true))
        guard let address = StackProbe.controllerInfo(at: "\(scratch.root)/run1/hcid.sock").flatMap({ DeviceAddress($0.address) }) else {
            throw StackError.controllerNotReady(after: .zero, state: "no address", detail: "")
        }
        _ = try HCIBenchmark.command(centralHCI, HCICommands.leCreateConnection(peer: address, scanInterval: 0x10, scanWindow: 0x10, interval: 6,
                                                                                supervisionTimeout: 100))
        let link = try HCIBenchmark.waitForHandle(centralHCI)
        _ = try HCIBenchmark.waitForHandle(peripheralHCI)
        _ = try HCIBenchmark.command(centralHCI, HCICommands.leSetDataLength(handle: link, octets: 251, time: 2120))

        // attd exchanges the MTU on its own as central; wait until the bearer carries 244-byte values.
        let mtuDeadline = ContinuousClock.now + .seconds(5)
        while ContinuousClock.now < mtuDeadline {
            var bearers = Request()
            bearers.att.getBearers = .init()
            if let bearer = try central.call(bearers).att.bearers.bearers.first(where: { $0.connectionHandle == UInt32(link) }), bearer.attMtu >= 247 { break }
            usleep(20_000)
        }
        var subscribe = Request()
        subscribe.att.gattSubscribe = .with {
            $0.connectionHandle = UInt32(link)
            $0.valueHandle = handles[0]
            $0.cccdHandle = handles[0] + 1
            $0.enable = true
        }
        _ = try central.call(subscribe)

        let pids = ["peripheral attd": scratch.pid(of: "attd1"), "peripheral hcid": scratch.pid(of: "hcid1"),
                    "central hcid": scratch.pid(of: "hcid0"), "central attd": scratch.pid(of: "attd0")]
        var cpu: [String: Double] = [:]
        var throughput: [GATTThroughput] = []
        for size in [20, 244] {
            let before = pids.mapValues { $0.flatMap(ProcessStats.cpuTime) ?? .zero }
            let (count, elapsed) = try notify(publisher, central, valueHandle: handles[0], size: size, seconds: seconds)
            throughput.append(GATTThroughput(valueBytes: size, perSecond: Double(count) / elapsed, bytesPerSecond: Double(count * size) / elapsed))
            if size == 20, count > 0 {
                for (name, pid) in pids {
                    let used = (pid.flatMap(ProcessStats.cpuTime) ?? .zero) - (before[name] ?? .zero)
                    cpu[name] = HCIBenchmark.durationSeconds(used) * 1000 * 10_000 / Double(count)
                }
            }
        }

        var samples: [Double] = []
        let clock = ContinuousClock()
        var read = Request()
        read.att.gattRead = .with { $0.connectionHandle = UInt32(link); $0.handle = handles[1] }
        for _ in 0..<reads {
            let start = clock.now
            let value = try central.call(read).att.gattValue.value
            samples.append(HCIBenchmark.durationSeconds(clock.now - start) * 1e6)
            guard value.count == 20 else { throw StackError.notReady(after: .zero, log: "read returned \(value.count) bytes, not 20") }
        }
        samples.sort()
        let berylRead = GATTReadLatency(count: reads, p50Microseconds: samples[samples.count / 2], p99Microseconds: samples[min(samples.count - 1, samples.count * 99 / 100)])

        var result = GATTBenchmarkResult(
            beryl: throughput, berylRead: berylRead, cpuMillisecondsPer10kNotifications: cpu, bumble: nil, bumbleRead: nil,
            bumbleNote: "not run",
            note: "two Beryl stacks (hcid + attd, separate processes) on berylsim, 7.5 ms connection interval, 251-byte data length, ATT_MTU 517; "
                + "a read waits for the next connection events, so its round trip is bounded below by the interval")
        if bumble { addBumble(to: &result, seconds: seconds, reads: reads) }
        return result
    }

    /// Publishes values as fast as attd takes them (pausing when it says busy) while counting what the central receives.
    private static func notify(_ publisher: IPCClient, _ central: IPCClient, valueHandle: UInt32, size: Int, seconds: Double) throws -> (Int, Double) {
        _ = central.takeEvents()
        let clock = ContinuousClock()
        let start = clock.now
        let end = start + .milliseconds(Int(seconds * 1000))
        var received = 0
        var outstanding = 0
        var value = [UInt8](repeating: 0, count: size)
        var counter: UInt32 = 0
        while clock.now < end {
            // A window of Notify requests in flight, so the pipeline never runs dry on the publisher's side.
            while outstanding < 16 {
                counter &+= 1
                value[0] = UInt8(truncatingIfNeeded: counter)
                var request = Request()
                request.att.notify = .with { $0.valueHandle = valueHandle; $0.value = Data(value) }
                _ = try publisher.send(request)
                outstanding += 1
            }
            var busy = false
            while outstanding > 0, let envelope = try? publisher.receive(timeout: .milliseconds(1)) {
                guard envelope.requestID != 0 else { continue }
                outstanding -= 1
                if case .error(let error)? = envelope.response.kind, error.code == .busy { busy = true }
            }
            while let envelope = try? central.receive(timeout: busy ? .milliseconds(1) : .zero) {
                if case .gattNotification(let notification)? = envelope.event.att.kind, notification.handle == valueHandle { received += 1 }
            }
        }
        let elapsed = HCIBenchmark.durationSeconds(clock.now - start)
        // Let the pipeline drain so the next measurement starts clean.
        while outstanding > 0, let envelope = try? publisher.receive(timeout: .milliseconds(200)) { if envelope.requestID != 0 { outstanding -= 1 } }
        while (try? central.receive(timeout: .milliseconds(100))) != nil {}
        return (received, elapsed)
    }

    /// Runs Benchmarks/bumble_gatt_bench.py with the interop venv's Python, when both are there.
    private static func addBumble(to result: inout GATTBenchmarkResult, seconds: Double, reads: Int) {
        let environment = ProcessInfo.processInfo.environment
        // The repository the binaries were built in: the nearest directory up with a Package.swift.
        var root = Executables.directory()
        while root.count > 1, !FileManager.default.fileExists(atPath: root + "/Package.swift") { root = (root as NSString).deletingLastPathComponent }
        let python = environment["BERYL_BUMBLE_PYTHON"] ?? root + "/.venv-interop/bin/python"
        let script = environment["BERYL_BUMBLE_BENCH"] ?? root + "/Benchmarks/bumble_gatt_bench.py"
        guard FileManager.default.isExecutableFile(atPath: python), FileManager.default.fileExists(atPath: script) else {
            result.bumbleNote = "Bumble not found (\(python), \(script)); ci/setup installs it"
            return
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: python)
        process.arguments = [script, "--seconds", String(seconds), "--reads", String(reads)]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        do { try process.run() } catch {
            result.bumbleNote = "Bumble did not start: \(error)"
            return
        }
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        struct BumbleReport: Decodable {
            var notifications: [GATTThroughput]?
            var readRTT: GATTReadLatency?
            var note: String?
            var error: String?
        }
        guard let report = try? JSONDecoder().decode(BumbleReport.self, from: data), report.error == nil, let notifications = report.notifications else {
            result.bumbleNote = "Bumble's run failed: \(String(decoding: data, as: UTF8.self).prefix(300))"
            return
        }
        result.bumble = notifications
        result.bumbleRead = report.readRTT
        result.bumbleNote = report.note ?? "two Bumble hosts on Bumble software controllers"
    }
}
