import BerylCore
import BerylDaemonKit
import BerylHCI
import BerylIPC
import BerylSim
import BerylSupervisor
import Foundation

/// Where a benchmark stopped, and why.
public struct BenchFailure: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// One value size's notifications over one window, as the receiver counted them.
public struct NotificationFigures: Codable, Sendable {
    public var valueBytes: Int
    /// Received inside the window, per second of it.
    public var perSecond: Double
    public var bytesPerSecond: Double
    /// Values the stack accepted from the sender, warm-up and window together.
    public var sent: Int
    /// Accepted but never received, after the link drained.
    public var lost: Int
    /// Received with a sequence number below one received before.
    public var outOfOrder: Int
    /// Values the stack refused (busy) and the sender sent again after the ready signal.
    public var refused: Int
    /// CPU time per notification received in the window, per process.
    public var cpuMicrosecondsPerNotification: [String: Double]
    /// The most notifications per second the link's air time allows, when the link models it.
    public var physicalLimitPerSecond: Double?

    public init(valueBytes: Int, perSecond: Double, bytesPerSecond: Double, sent: Int, lost: Int, outOfOrder: Int, refused: Int,
                cpuMicrosecondsPerNotification: [String: Double], physicalLimitPerSecond: Double? = nil) {
        self.valueBytes = valueBytes
        self.perSecond = perSecond
        self.bytesPerSecond = bytesPerSecond
        self.sent = sent
        self.lost = lost
        self.outOfOrder = outOfOrder
        self.refused = refused
        self.cpuMicrosecondsPerNotification = cpuMicrosecondsPerNotification
        self.physicalLimitPerSecond = physicalLimitPerSecond
    }
}

public struct GATTReadLatency: Codable, Sendable {
    /// "static": a value the server holds; "dynamic": one its publisher makes for each read.
    public var value: String
    public var count: Int
    public var p50Microseconds: Double
    public var p99Microseconds: Double
    /// Process boundaries one read crosses (each a wake-up of the next process).
    public var processCrossings: Int?
    /// CPU each process spent per read, as scheduled.
    public var cpuMicrosecondsPerRead: [String: Double]?
    /// The same reads with every process on one CPU, where a crossing is a context switch rather than a wake-up.
    public var oneCPUP50Microseconds: Double?
    public var oneCPUP99Microseconds: Double?
    public var oneCPUCPUMicrosecondsPerRead: [String: Double]?

    public init(value: String, count: Int, p50Microseconds: Double, p99Microseconds: Double) {
        self.value = value
        self.count = count
        self.p50Microseconds = p50Microseconds
        self.p99Microseconds = p99Microseconds
    }

    public init(value: String, samples: [Double]) {
        self.value = value
        count = samples.count
        (p50Microseconds, p99Microseconds) = Self.percentiles(samples)
    }

    /// p50 and p99 of samples, 0 for none.
    static func percentiles(_ samples: [Double]) -> (p50: Double, p99: Double) {
        let sorted = samples.sorted()
        guard !sorted.isEmpty else { return (0, 0) }
        return (sorted[sorted.count / 2], sorted[min(sorted.count - 1, sorted.count * 99 / 100)])
    }
}

/// The link a benchmark runs on: what berylsim is told and what the hosts set up on the connection.
public enum BenchLink: String, Codable, Sendable, CaseIterable {
    /// Delivery and buffer return at once, with Bumble's controller's buffers (27 B × 64): the hosts are the bound.
    case instant
    /// The air-time model at 7.5 ms, 2M PHY, 251-octet data length: the radio is the bound.
    case airTime

    public var simArguments: [String] { self == .instant ? ["--link", "instant", "--acl-buffers", "27:64"] : ["--air-time"] }

    public var summary: String {
        switch self {
        case .instant: "berylsim instant link, 27-byte ACL buffers × 64 (as Bumble's controller)"
        case .airTime: "berylsim air-time model, 7.5 ms interval, 2M PHY, 251-octet data length, 251-byte ACL buffers × 8"
        }
    }

    /// The air-time link's parameters, asked of both controllers: each side's host sets its own transmit data length
    /// (Core Vol 4 Part E §7.8.33), the central the interval and the PHY.
    public func setUp(central: (IPCClient, UInt16), peripheral: (IPCClient, UInt16)) throws {
        guard self == .airTime else { return }
        try HCIBenchmark.command(central.0, HCICommands.leConnectionUpdate(handle: central.1, intervalMin: 6, intervalMax: 6, latency: 0,
                                                                               supervisionTimeout: 100))
        for (client, handle) in [central, peripheral] {
            try HCIBenchmark.command(client, HCICommands.leSetDataLength(handle: handle, octets: 251, time: 2120))
        }
        try HCIBenchmark.command(central.0, HCICommands.leSetPHY(handle: central.1, phy: 2))
    }

    /// Notifications of `valueBytes` per second the air allows: one per data PDU (the ATT and L2CAP headers add 7).
    public func physicalLimit(valueBytes: Int) -> Double? {
        guard self == .airTime else { return nil }
        let octets = min(251, valueBytes + 7)
        return AirTime.maximumThroughput(interval: .microseconds(7500), payload: octets, phy: 2, encrypted: false) / Double(octets)
    }
}

public struct GATTStackFigures: Codable, Sendable {
    public var link: BenchLink
    public var linkSummary: String
    public var notifications: [NotificationFigures]
    public var reads: [GATTReadLatency]
}

public struct GATTBenchmarkResult: Codable, Sendable {
    /// Two Beryl stacks, once per link.
    public var beryl: [GATTStackFigures]
    /// Two Bumble hosts on Bumble's controllers and LocalLink, in the same run.
    public var bumble: GATTStackFigures?
    public var bumbleNote: String
    public var note: String
    /// This machine's bare process-to-process round trip, which bounds a read from below at every crossing.
    public var crossing: CrossingFigures?
}

/// `beryl bench gatt`: notifications and reads between two Beryl stacks (hcid + attd each) on berylsim, and the same
/// between two Bumble hosts on Bumble's software controllers, measured in the same run.
public enum GATTBenchmark {
    public static let sizes = [20, 244]
    public static let warmUp = Duration.milliseconds(250)

    public static func run(seconds: Double = 2, reads: Int = 300, links: [BenchLink] = BenchLink.allCases, bumble: Bool = true) throws -> GATTBenchmarkResult {
        var result = GATTBenchmarkResult(
            beryl: try links.map { try measureStacks(on: $0, seconds: seconds, reads: reads) }, bumble: nil, bumbleNote: "not run",
            note: "two Beryl stacks (hcid + attd, separate processes) on berylsim, ATT_MTU 247; the sender pipelines Notify requests and, "
                + "when refused as busy, waits for ReadyToUpdate and sends the refused values again first; each value carries a sequence "
                + "number the receiver checks; the window opens after \(warmUp) of warm-up; CPU is every process's, berylsim's included")
        if bumble { addBumble(to: &result, seconds: seconds, reads: reads) }
        result.crossing = try? ProcessCrossing.measure()  // the figures stand without it
        return result
    }

    static func measureStacks(on link: BenchLink, seconds: Double, reads: Int) throws -> GATTStackFigures {
        let scratch = try Scratch()
        defer { scratch.stopAll() }
        let sim = scratch.root + "/sim"
        try scratch.start("berylsim", [Executables.path("berylsim"), "--dir", sim, "--controllers", "2", "--log-level", "warning"] + link.simArguments,
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
        // Events only (a copy of every ACL packet would cost hcid CPU the figures count), and closed after set-up.
        var centralHCI: IPCClient! = try IPCClient(path: "\(scratch.root)/run0/hcid.sock")
        var peripheralHCI: IPCClient! = try IPCClient(path: "\(scratch.root)/run1/hcid.sock")
        let central = try IPCClient(path: "\(scratch.root)/run0/attd.sock")
        let publisher = try IPCClient(path: "\(scratch.root)/run1/attd.sock")

        // The peripheral's service: a notifying value, a 20-byte value attd serves itself, and one the publisher makes.
        var publish = Request()
        publish.att.publishService.service = .with {
            $0.uuid = "B0000001-0000-1000-8000-00805F9B34FB"
            $0.primary = true
            $0.characteristics = [
                .with { $0.uuid = "B0000002-0000-1000-8000-00805F9B34FB"; $0.properties = 0x10; $0.permissions = 0x01; $0.cached = true; $0.value = Data([0]) },
                .with { $0.uuid = "B0000003-0000-1000-8000-00805F9B34FB"; $0.properties = 0x02; $0.permissions = 0x01; $0.cached = true
                    $0.value = Data(readValue) },
                .with { $0.uuid = "B0000004-0000-1000-8000-00805F9B34FB"; $0.properties = 0x02; $0.permissions = 0x01; $0.cached = false },
            ]
        }
        let handles = try publisher.call(publish).att.servicePublished.valueHandles
        guard handles.count == 3 else { throw BenchFailure("the service was not published") }

        try HCIBenchmark.subscribe(centralHCI, acl: false)
        try HCIBenchmark.subscribe(peripheralHCI, acl: false)
        try HCIBenchmark.command(peripheralHCI, HCICommands.leSetAdvertisingParameters(interval: 0x20))
        try HCIBenchmark.command(peripheralHCI, HCICommands.leSetAdvertisingEnable(true))
        guard let address = StackProbe.controllerInfo(at: "\(scratch.root)/run1/hcid.sock").flatMap({ DeviceAddress($0.address) }) else {
            throw StackError.controllerNotReady(after: .zero, state: "no address", detail: "")
        }
        try HCIBenchmark.command(centralHCI, HCICommands.leCreateConnection(peer: address, scanInterval: 0x10, scanWindow: 0x10, interval: 6,
                                                                                supervisionTimeout: 100))
        let handle = try HCIBenchmark.waitForHandle(centralHCI)
        let peripheralHandle = try HCIBenchmark.waitForHandle(peripheralHCI)
        if link == .airTime { try link.setUp(central: (centralHCI, handle), peripheral: (peripheralHCI, peripheralHandle)) }
        (centralHCI, peripheralHCI) = (nil, nil)

        // attd exchanges the MTU on its own as central; wait until the bearer carries 244-byte values.
        let mtuDeadline = ContinuousClock.now + .seconds(5)
        while true {
            var bearers = Request()
            bearers.att.getBearers = .init()
            if let bearer = try central.call(bearers).att.bearers.bearers.first(where: { $0.connectionHandle == UInt32(handle) }), bearer.attMtu >= 247 { break }
            guard ContinuousClock.now < mtuDeadline else { throw BenchFailure("ATT_MTU stayed below 247") }
            usleep(20_000)
        }
        var subscribe = Request()
        subscribe.att.gattSubscribe = .with {
            $0.connectionHandle = UInt32(handle)
            $0.valueHandle = handles[0]
            $0.cccdHandle = handles[0] + 1
            $0.enable = true
        }
        _ = try central.call(subscribe)

        let processes = ["berylsim", "peripheral hcid", "peripheral attd", "central hcid", "central attd"]
        let names = ["berylsim": "berylsim", "peripheral hcid": "hcid1", "peripheral attd": "attd1", "central hcid": "hcid0", "central attd": "attd0"]
        let pids = Dictionary(uniqueKeysWithValues: processes.compactMap { name in scratch.pid(of: names[name]!).map { (name, $0) } })
        var stream = NotificationStream(publisher: publisher, central: central, valueHandle: handles[0], pids: pids)
        let notifications = try sizes.map { size in
            var figures = try stream.run(size: size, seconds: seconds)
            figures.physicalLimitPerSecond = link.physicalLimit(valueBytes: size)
            return figures
        }
        // attd, hcid, berylsim, the other hcid and attd, and back; a dynamic value also goes to the publisher and back.
        var readers = pids
        readers["reader and publisher (this process)"] = getpid()
        let readings = [
            try GATTReadLatency.measure("static", crossings: 10, pids: readers) {
                try timeReads(central, publisher, connection: handle, valueHandle: handles[1], count: reads)
            },
            try GATTReadLatency.measure("dynamic", crossings: 12, pids: readers) {
                try timeReads(central, publisher, connection: handle, valueHandle: handles[2], count: reads)
            },
        ]
        return GATTStackFigures(link: link, linkSummary: link.summary, notifications: notifications, reads: readings)
    }

    static let readValue = (0..<20).map { UInt8($0) }

    /// Sequential reads, after ten not timed; the publisher answers those of a dynamic value as they come.
    private static func timeReads(_ central: IPCClient, _ publisher: IPCClient, connection: UInt16, valueHandle: UInt32, count: Int) throws -> [Double] {
        var read = Request()
        read.att.gattRead = .with { $0.connectionHandle = UInt32(connection); $0.handle = valueHandle }
        let clock = ContinuousClock()
        var samples: [Double] = []
        for index in 0..<(count + GATTReadLatency.warmUpReads) {
            let start = clock.now
            let id = try central.send(read)
            var value: Data?
            while value == nil {
                var pollers = [pollfd(fd: central.fd, events: Int16(POLLIN), revents: 0), pollfd(fd: publisher.fd, events: Int16(POLLIN), revents: 0)]
                guard poll(&pollers, 2, 5000) > 0 else { throw BenchFailure("read \(index) was not answered") }
                if pollers[1].revents != 0, case .readRequested(let asked)? = try publisher.receive(timeout: .zero).event.att.kind {
                    var answer = Request()
                    answer.att.answerRead = .with { $0.id = asked.id; $0.connectionHandle = asked.connectionHandle; $0.value = Data(readValue) }
                    try publisher.send(answer)
                }
                if pollers[0].revents != 0 {
                    let envelope = try central.receive(timeout: .zero)
                    guard envelope.requestID == id, case .response(let response)? = envelope.body else { continue }
                    if case .error(let error)? = response.kind { throw BenchFailure("read \(index) failed: \(error.message)") }
                    value = response.att.gattValue.value
                }
            }
            if index >= GATTReadLatency.warmUpReads { samples.append(HCIBenchmark.durationSeconds(clock.now - start) * 1e6) }
            guard value.map(Array.init) == readValue else { throw BenchFailure("read \(index) returned \(value?.count ?? 0) bytes, not the 20 published") }
            _ = central.takeEvents()
            _ = publisher.takeEvents()
        }
        return samples
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
        struct Row: Decodable {
            var valueBytes: Int
            var perSecond: Double
            var bytesPerSecond: Double
            var sent: Int
            var lost: Int
            var outOfOrder: Int
            var cpuMicrosecondsPerNotification: Double
        }
        struct Reads: Decodable { var count: Int; var p50Microseconds: Double; var p99Microseconds: Double }
        struct Report: Decodable {
            var notifications: [Row]?
            var readRTT: Reads?
            var dynamicReadRTT: Reads?
            var note: String?
            var error: String?
        }
        guard let report = try? JSONDecoder().decode(Report.self, from: data), report.error == nil, let rows = report.notifications else {
            result.bumbleNote = "Bumble's run failed: \(String(decoding: data, as: UTF8.self).prefix(300))"
            return
        }
        let reads = [("static", report.readRTT), ("dynamic", report.dynamicReadRTT)].compactMap { value, figures in
            figures.map { GATTReadLatency(value: value, count: $0.count, p50Microseconds: $0.p50Microseconds, p99Microseconds: $0.p99Microseconds) }
        }
        result.bumble = GATTStackFigures(
            link: .instant, linkSummary: "Bumble's LocalLink, Bumble's controllers (27-byte ACL buffers × 64), one Python process",
            notifications: rows.map {
                NotificationFigures(valueBytes: $0.valueBytes, perSecond: $0.perSecond, bytesPerSecond: $0.bytesPerSecond, sent: $0.sent, lost: $0.lost,
                                    outOfOrder: $0.outOfOrder, refused: 0, cpuMicrosecondsPerNotification: ["bumble (whole process)": $0.cpuMicrosecondsPerNotification])
            },
            reads: reads)
        result.bumbleNote = report.note ?? "two Bumble hosts on Bumble software controllers"
    }
}

/// A flow-controlled stream of sequenced notifications from a publisher to a subscribed central, both attd clients.
struct NotificationStream {
    let publisher: IPCClient
    let central: IPCClient
    let valueHandle: UInt32
    let pids: [String: Int32]
    /// Notify requests in flight at once: the IPC is pipelined, as managerd's is.
    let window = 16
    /// The count of the last ReadyToUpdate attd sent the publisher, kept from one run to the next.
    private(set) var readySeen: UInt32 = 0

    mutating func run(size: Int, seconds: Double) throws -> NotificationFigures {
        _ = central.takeEvents()
        _ = publisher.takeEvents()
        let clock = ContinuousClock()
        let warmEnd = clock.now + GATTBenchmark.warmUp
        var windowStart: ContinuousClock.Instant?
        var windowEnd = warmEnd + .milliseconds(Int(seconds * 1000))
        var cpu = ProcessCPU(pids: pids)
        var cpuUsed: [String: Duration] = [:]
        var value = Data(repeating: 0x5A, count: size)
        var next: UInt32 = 0
        var again: [UInt32] = []  // refused, sent again first and in order
        var inFlight: [UInt64: (sequence: UInt32, readySeen: UInt32)] = [:]
        var blocked = false
        var blockedSince = clock.now
        var accepted = 0
        var refused = 0
        var receiver = SequenceTally()

        func send(_ sequence: UInt32) throws {
            SequenceTally.stamp(sequence, into: &value)
            var request = Request()
            // Ordered: what is in flight when a refusal comes is refused too, so that the values sent again keep their place.
            request.att.notify = .with { $0.valueHandle = valueHandle; $0.value = value; $0.ordered = true; $0.readySeen = readySeen }
            inFlight[try publisher.send(request)] = (sequence, readySeen)
        }
        func receiveNotifications() throws {
            while let envelope = try? central.receive(timeout: .zero) {
                guard case .gattNotification(let notification)? = envelope.event.att.kind, notification.handle == valueHandle else { continue }
                receiver.received(notification.value, at: clock.now)
            }
            _ = central.takeEvents()
        }

        let stopAt = { windowStart.map { _ in windowEnd } ?? .now + .seconds(3600) }
        let giveUpAt = warmEnd + .milliseconds(Int(seconds * 1000)) + .seconds(10)
        while clock.now < stopAt() || !inFlight.isEmpty {
            guard clock.now < giveUpAt else { throw BenchFailure("Notify requests went unanswered for 10 s after the window") }
            if windowStart == nil, clock.now >= warmEnd {
                windowStart = clock.now
                windowEnd = clock.now + .milliseconds(Int(seconds * 1000))
                receiver.window = windowStart!..<windowEnd
                cpu.startWindow()
            }
            while !blocked, inFlight.count < window, clock.now < stopAt() {
                if again.isEmpty {
                    // A value sent before the last ReadyToUpdate may still come back refused; nothing new goes ahead of it.
                    guard !inFlight.values.contains(where: { $0.readySeen < readySeen }) else { break }
                    try send(next)
                    next += 1
                } else {
                    try send(again.removeFirst())
                }
            }
            var pollers = [pollfd(fd: publisher.fd, events: Int16(POLLIN), revents: 0), pollfd(fd: central.fd, events: Int16(POLLIN), revents: 0)]
            _ = poll(&pollers, 2, 100)
            if pollers[0].revents != 0 {
                while let envelope = try? publisher.receive(timeout: .zero) {
                    if envelope.requestID != 0, let (sequence, _) = inFlight.removeValue(forKey: envelope.requestID) {
                        if case .error(let error)? = envelope.response.kind {
                            guard error.code == .busy || error.code == .cancelled else { throw BenchFailure("Notify failed: \(error.message)") }
                            refused += 1
                            again.insert(sequence, at: again.firstIndex { $0 > sequence } ?? again.endIndex)
                            // Cancelled: sent before the last ReadyToUpdate, and no other one is owed.
                            guard error.code == .busy else { continue }
                            if !blocked { blockedSince = clock.now }
                            blocked = true
                        } else {
                            accepted += 1
                        }
                    } else if case .readyToUpdate(let ready)? = envelope.event.att.kind {
                        readySeen = ready.count
                        blocked = false
                    }
                }
                _ = publisher.takeEvents()
            }
            if blocked, clock.now - blockedSince > .seconds(2) {
                throw BenchFailure("refused as busy, and no ReadyToUpdate followed")
            }
            try receiveNotifications()
            if windowStart != nil, cpuUsed.isEmpty, clock.now >= windowEnd { cpuUsed = cpu.usedSinceStart() }
        }
        if cpuUsed.isEmpty { cpuUsed = cpu.usedSinceStart() }
        // Drain: what was accepted arrives, or counts as lost once the link has been quiet for 300 ms.
        var quietSince = clock.now
        while clock.now - quietSince < .milliseconds(300) {
            let before = receiver.total
            var poller = pollfd(fd: central.fd, events: Int16(POLLIN), revents: 0)
            _ = poll(&poller, 1, 50)
            try receiveNotifications()
            if receiver.total != before { quietSince = clock.now }
        }
        return NotificationFigures(valueBytes: size, seconds: HCIBenchmark.durationSeconds(windowEnd - (windowStart ?? windowEnd)), tally: receiver,
                                   accepted: accepted, refused: refused, cpu: cpuUsed)
    }
}
