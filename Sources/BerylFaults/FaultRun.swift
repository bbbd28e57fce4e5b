import BerylCore
import BerylDaemonKit
import BerylIPC
import BerylSupervisor
import Foundation
import Synchronization

/// One fault in one phase with one seed, and whether the stacks came back whole.
public struct FaultOutcome: Sendable {
    public var fault: Fault
    public var phase: Phase
    public var seed: UInt64
    public var side: Side
    public var failures: [String]
    /// From the end of the fault until every invariant held.
    public var recovery: Duration
    public var passed: Bool { failures.isEmpty }
}

extension FaultLab {
    /// The side a fault hits: chosen by the seed where either makes sense.
    func side(for fault: Fault, in phase: Phase, random: inout FaultRandom) -> Side {
        switch fault {
        case .roguePDU: return .peripheral  // the rogue connects to the advertising stack
        case .oversizedValue, .deadHandle: return .central  // sent by the central's apps, answered by the peripheral
        case .killApp where phase == .restoring: return .peripheral  // the central app is already dead
        default: return random.side()
        }
    }

    public func run(_ fault: Fault, in phase: Phase, seed: UInt64, rogue: [String]?) -> FaultOutcome {
        var random = FaultRandom(seed: seed)
        let side = side(for: fault, in: phase, random: &random)
        var failures: [String] = []
        let pidsBefore = Dictionary(uniqueKeysWithValues: Side.allCases.map { ($0, daemonPIDs($0)) })

        // Into the phase.
        var burst: Thread?
        let burstResults = BurstResults()
        var streamer: Thread?
        let firstStream = StreamRun()
        switch phase {
        case .subscribed:
            break
        case .serving:
            let values = (0..<4).map { 50 + Int((seed &* 4 &+ UInt64($0)) % 250) }
            let before = values.map { setpointsApplied($0) }
            burstResults.expect(values: values, appliedBefore: before)
            let thread = Thread { [self] in
                for value in values {
                    let written = beryl(["gatt", "--peer", thermostatIdentifier, "write", Self.setpoint, Self.hex(value), "--json", "--timeout", "20"], on: .central)
                    burstResults.record(value: value, run: written)
                }
                burstResults.finish()
            }
            thread.start()
            burst = thread
            usleep(UInt32(random.int(100_000...600_000)))
        case .connecting:
            // The central out of range: its app's connection request pending, the peripheral still advertising (so a
            // rogue remote device can reach it).
            _ = sim(["range", "0", "out"])
            if !eventually(.seconds(10), { self.airLinks() == 0 }) { failures.append("phase: the link did not drop out of range") }
        case .restoring:
            // The next notification relaunches it at once (within the thermostat's 200 ms tick): the fault hits while
            // managerd holds the app's preserved manager and relaunches it.
            let killed = appPIDs(Self.doorlockID, on: .central)
            for pid in killed { kill(pid, SIGKILL) }
            if !eventually(.seconds(10), { Set(self.appPIDs(Self.doorlockID, on: .central)).isDisjoint(with: killed) }) {
                failures.append("phase: the doorlock app did not die")
            }
        case .streaming:
            // Subscribed through the fault; the thermostat says when its transmit queue first fills.
            let heldBack = streamHoldBacks()
            let thread = Thread { [self] in
                firstStream.finish(beryl(["gatt", "--peer", thermostatIdentifier, "subscribe", Self.stream, "--count", "100000", "--json",
                                          "--timeout", "6"], on: .central))
            }
            thread.start()
            streamer = thread
            if !eventually(.seconds(5), { self.streamHoldBacks() > heldBack }) {
                failures.append("phase: the stream never filled the thermostat's transmit queue: \(tail(thermostatLog, lines: 3))")
            }
        }
        usleep(UInt32(random.int(0...500_000)))

        failures += inject(fault, on: side, random: &random, rogue: rogue)

        // Out of the phase: whatever the fault, the world is put back as the phase found it.
        _ = sim(["range", "0", "in"])
        _ = sim(["range", "1", "in"])
        let recovered = ContinuousClock.now
        var remaining: [String] = []
        let healthy = eventually(.seconds(60)) {
            remaining = self.invariants(seed: seed)
            return remaining.isEmpty
        }
        if !healthy { failures += remaining }
        let recovery = ContinuousClock.now - recovered

        if let streamer {
            while !streamer.isFinished && firstStream.result == nil { usleep(50_000) }
            // H4 carries no checksum (Core Vol 4 Part A): bytes corrupted on the wire reach the app as values, so only
            // the stream after that fault is checked.
            failures += streamAfterFault(first: fault == .corruptHCI ? nil : firstStream.result, checkFirst: fault != .corruptHCI,
                                         gapless: fault == .killManagerd)
        }
        if let burst {
            while !burst.isFinished && !burstResults.isFinished { usleep(50_000) }
            failures += burstResults.problems(appliedAfter: { self.setpointsApplied($0) })
        }
        // A daemon the fault did not kill kept its pid: a crash would be hidden by the supervisor's restart.
        let pidsAfter = Dictionary(uniqueKeysWithValues: Side.allCases.map { ($0, daemonPIDs($0)) })
        for checked in Side.allCases {
            for name in StackProbe.daemonNames {
                let killed = checked == side && fault.killedDaemons.contains(name)
                guard let before = pidsBefore[checked]?[name], let after = pidsAfter[checked]?[name] else { continue }
                if killed, before == after { failures.append("\(checked) \(name) was to be killed but kept pid \(before)") }
                if !killed, before != after {
                    failures.append("\(checked) \(name) restarted (pid \(before) → \(after)): \(tail(paths(checked).logFile(name), lines: 5))")
                }
            }
        }
        return FaultOutcome(fault: fault, phase: phase, seed: seed, side: side, failures: failures, recovery: recovery)
    }

    // MARK: Faults

    private func inject(_ fault: Fault, on side: Side, random: inout FaultRandom, rogue: [String]?) -> [String] {
        let controller = "\(side.rawValue)"
        switch fault {
        case .killHcid, .killAttd, .killManagerd:
            guard let pid = daemonPIDs(side)[fault.killedDaemons[0]] else { return ["\(side) \(fault.killedDaemons[0]) was not running"] }
            kill(pid, SIGKILL)
        case .killApp:
            let pids = appPIDs(Self.appID(on: side), on: side)
            // Already dead (a peripheral app relaunched only when a central asks for it) is fine: nothing to kill.
            for pid in pids { kill(pid, SIGKILL) }
        case .killAll:
            let targets = Array(daemonPIDs(side).values) + appPIDs(Self.appID(on: side), on: side)
            for pid in targets { kill(pid, SIGKILL) }
        case .killHcidThenApp:
            guard let pid = daemonPIDs(side)["hcid"] else { return ["\(side) hcid was not running"] }
            let apps = appPIDs(Self.appID(on: side), on: side)
            kill(pid, SIGKILL)
            // Long enough, in some seeds, for managerd to hear hcid go and tell the app; in others the app asks again first.
            usleep(UInt32(random.int(0...40_000)))
            for app in apps { kill(app, SIGKILL) }
        case .outOfRange:
            _ = sim(["range", controller, "out"])
            usleep(3_000_000)  // past the 2 s supervision timeout: the link drops
            _ = sim(["range", controller, "in"])
        case .linkLoss:
            let rate = random.double(0.1...0.3)
            _ = sim(["drop", String(format: "%.3f", rate)])
            usleep(5_000_000)
            _ = sim(["drop", "0"])
        case .frozenController:
            _ = sim(["freeze", controller])
            usleep(UInt32(random.int(1_000_000...3_000_000)))
            _ = sim(["thaw", controller])
        case .corruptHCI:
            let rate = random.double(0.001...0.01)
            _ = sim(["corrupt", controller, String(format: "%.4f", rate)])
            usleep(1_000_000)
            _ = sim(["corrupt", controller, "0"])
        case .rogueIPC:
            return rogueIPC(on: side, random: &random)
        case .roguePDU:
            guard let rogue else { return ["no rogue remote device (Bumble) to run"] }
            let port = tcpBase + 2
            let run = (try? runTool(rogue[0], Array(rogue.dropFirst()) + ["--transport", "tcp-client:127.0.0.1:\(port)", "--peer", peripheralAddress,
                                                                          "--seed", "\(random.next() % 1_000_000)"]))
            guard let run else { return ["the rogue remote device did not start"] }
            let verdict = run.stdout.split(separator: "\n").last.flatMap { json(String($0)) }
            if run.status != 0 || verdict?["stillServing"] as? Bool != true {
                return ["the rogue remote device says the peripheral stopped serving (exit \(run.status)): \(run.stdout.suffix(400)) \(run.stderr.suffix(400))"]
            }
        case .oversizedValue:
            return oversizedWrites(random: &random)
        case .deadHandle:
            return deadHandleRequests(random: &random)
        }
        return []
    }

    private func rogueIPC(on side: Side, random: inout FaultRandom) -> [String] {
        var failures: [String] = []
        for name in StackProbe.daemonNames {
            var nonsense: [Request] = []
            switch name {
            case "managerd":
                nonsense.append(.with { $0.manager.hello.appID = "beryl.rogue" })
                nonsense.append(.with { $0.manager.gatt = .with { $0.peripheral = "not an identifier"; $0.read.handle = 3 } })
                nonsense.append(.with { $0.manager.gatt = .with { $0.peripheral = UUID().uuidString; $0.read.handle = 0xFFF0 } })
                nonsense.append(.with { $0.manager.respond = .with { $0.id = 0xDEAD_BEEF } })
                nonsense.append(.with { $0.manager.updateValue = .with { $0.manager = 77; $0.valueHandle = 0xFFF0 } })
                nonsense.append(.with { $0.manager.connect = .with { $0.peripheral = "" } })
            case "attd":
                nonsense.append(.with { $0.att.gattRead = .with { $0.connectionHandle = 0x0EFF; $0.handle = 1 } })
                nonsense.append(.with { $0.att.publishService = .init() })
            default:
                nonsense.append(.with { $0.hci.sendAcl = .with { $0.handle = 0x0EFF; $0.pdu = Data([1, 2, 3]) } })
            }
            failures += RogueClient.abuse(socket: paths(side).socket(name), daemon: "\(side) \(name)", random: &random, nonsense: nonsense)
        }
        return failures
    }

    /// Values longer than the setpoint takes, and longer than an attribute may be (512 bytes, Core Vol 3 Part F
    /// §3.2.9): the CLI refuses what no attribute can hold before sending it; sent anyway over managerd's socket, the
    /// long write reaches the peripheral and is refused with Invalid Attribute Value Length. Nothing is applied.
    private func oversizedWrites(random: inout FaultRandom) -> [String] {
        var failures: [String] = []
        let applied = 0xA5A5  // what any of them would read as, taken as a setpoint
        let before = setpointsApplied(applied)
        for length in [3, random.int(200...512), 513, random.int(600...2000)] {
            let value = String(repeating: "a5", count: length)
            let written = beryl(["gatt", "--peer", thermostatIdentifier, "write", Self.setpoint, value, "--json", "--timeout", "20"], on: .central)
            let said = written.stderr + written.stdout
            if written.status == 0 { failures.append("a \(length)-byte write to the 2-byte setpoint succeeded") }
            let failed = JSONLines.events("failed", in: written.stdout)
            // The connecting phase: refused for that, as the failed step says.
            let outOfRange = airLinks() == 0 && failed.contains { $0["operation"] as? String == "connect" }
            // Past 512 bytes the CLI refuses the argument (a usage error, 64); within, the thermostat answers Invalid
            // Attribute Value Length (0x0D, Core Vol 3 Part F §3.4.1.1), which `--json` reports as the failed event's attError.
            let refused = outOfRange || (length > 512 ? written.status == 64 : failed.contains { $0["attError"] as? Int == 0x0D })
            if !refused { failures.append("a \(length)-byte write was not refused for its length: \(said.suffix(200))") }
        }
        // On the wire: a prepared write of 600 bytes, as a client that ignores the limit would send it.
        let (session, reason) = connectedAppSession("beryl.oversized")
        guard let client = session else { return airLinks() == 0 ? failures : failures + ["oversized: \(reason)"] }
        let discovered = try? client.call(.with {
            $0.manager.gatt.peripheral = thermostatIdentifier
            $0.manager.gatt.discover = .with { $0.serviceUuids = [Self.thermostatService] }
        }, timeout: .seconds(20))
        let handle = discovered?.manager.gatt.database.services.flatMap(\.characteristics).first { BluetoothUUID($0.uuid) == BluetoothUUID(Self.setpoint) }?.valueHandle
        guard let handle else { return failures + ["the setpoint was not found by discovery: \(String(describing: discovered))"] }
        do {
            _ = try client.call(.with {
                $0.manager.gatt.peripheral = thermostatIdentifier
                $0.manager.gatt.write = .with { $0.handle = handle; $0.value = Data(repeating: 0xA5, count: 600) }
            }, timeout: .seconds(20))
            failures.append("a 600-byte write on the wire succeeded")
        } catch .remote(let code, let message, _, let detail) {
            // The peer's Invalid Attribute Value Length, or a refusal by this stack before the wire.
            if detail.attError != 0x0D && code != .invalidArgument { failures.append("a 600-byte write on the wire: \(message)") }
        } catch {
            failures.append("a 600-byte write on the wire: \(error)")
        }
        if setpointsApplied(applied) != before { failures.append("an oversized write changed the setpoint") }
        return failures
    }

    /// Reads and writes of handles the peripheral does not have, sent through managerd as an app would: each answered
    /// with the peer's Invalid Handle (0x01) as a typed error.
    private func deadHandleRequests(random: inout FaultRandom) -> [String] {
        let (session, reason) = connectedAppSession("beryl.deadhandles")
        guard let client = session else { return airLinks() == 0 ? [] : ["dead handles: \(reason)"] }  // out of range: nothing to ask
        var failures: [String] = []
        for _ in 0..<4 {
            let handle = UInt32(random.int(0xFF00...0xFFFF))
            let write = random.next() % 2 == 0
            let request = Request.with {
                $0.manager.gatt.peripheral = thermostatIdentifier
                if write {
                    $0.manager.gatt.write = .with { $0.handle = handle; $0.value = Data([1]) }
                } else {
                    $0.manager.gatt.read.handle = handle
                }
            }
            do {
                _ = try client.call(request, timeout: .seconds(20))
                failures.append("a \(write ? "write" : "read") of dead handle 0x\(String(handle, radix: 16)) succeeded")
            } catch .remote(_, let message, _, let detail) {
                if detail.attError != 0x01 {
                    failures.append("dead handle 0x\(String(handle, radix: 16)): \(message), not Invalid Handle")
                }
            } catch {
                failures.append("dead handle 0x\(String(handle, radix: 16)): \(error)")
            }
        }
        return failures
    }

    /// A session with the central's managerd as an app that has connected to the thermostat (the link is shared with
    /// the doorlock app's): what Core Bluetooth asks before GATT. Nil when the thermostat cannot be reached (the
    /// connecting phase), with the reason.
    private func connectedAppSession(_ appID: String) -> (client: IPCClient?, reason: String) {
        guard let client = try? IPCClient(path: paths(.central).socket("managerd")) else { return (nil, "cannot reach the central's managerd") }
        do {
            _ = try client.call(.with { $0.manager.hello.appID = appID })
            _ = try client.call(.with { $0.manager.connect = .with { $0.manager = 1; $0.peripheral = thermostatIdentifier } })
        } catch {
            return (nil, "\(error)")
        }
        let deadline = ContinuousClock.now + .seconds(5)
        while ContinuousClock.now < deadline {
            guard let envelope = try? client.receive(timeout: .milliseconds(500)) else { continue }
            if case .connected? = envelope.event.manager.kind { return (client, "") }
        }
        return (nil, "not connected")
    }

    /// The stream through the fault lost no order; after it, a new subscriber takes 300 values in order: whatever the
    /// fault took down, the stack's flow control came back with it (a credit or a ready left owed would stall it).
    private func streamAfterFault(first: ToolRun?, checkFirst: Bool, gapless: Bool) -> [String] {
        var failures: [String] = []
        if let first {
            let before = StreamCheck(subscribeOutput: first.stdout, gapless: gapless)
            failures += before.problems.prefix(3).map { "the stream through the fault: \($0)" }
        } else if checkFirst {
            failures.append("the first subscriber never finished")
        }
        let after = beryl(["gatt", "--peer", thermostatIdentifier, "subscribe", Self.stream, "--count", "300", "--json", "--timeout", "20"], on: .central)
        let check = StreamCheck(subscribeOutput: after.stdout)
        if after.status != 0 || check.received != 300 {
            failures.append("after the fault the stream delivered \(check.received) of 300 values (exit \(after.status)): \(after.stderr.suffix(200)) "
                            + tail(thermostatLog, lines: 3))
        }
        failures += check.problems.prefix(3).map { "the stream after the fault: \($0)" }
        return failures
    }

    static func hex(_ value: Int) -> String { String(format: "%02x%02x", value & 0xFF, value >> 8) }

    // MARK: Invariants

    /// What must hold once the fault is over; empty when it all does.
    func invariants(seed: UInt64) -> [String] {
        var failures: [String] = []
        for side in Side.allCases {
            let pids = daemonPIDs(side)
            for name in StackProbe.daemonNames where pids[name] == nil { failures.append("\(side) \(name) is not answering") }
        }
        guard failures.isEmpty else { return failures }
        if bondCount(.central) != 1 || bondCount(.peripheral) != 1 {
            failures.append("bond torn: central has \(bondCount(.central) ?? -1), peripheral has \(bondCount(.peripheral) ?? -1)")
        }
        // The peripheral app's service is there and answers, exactly once per request (relaunched if it must be).
        let value = 50 + Int(seed % 250)
        let appliedBefore = setpointsApplied(value)
        let written = beryl(["gatt", "--peer", thermostatIdentifier, "write", Self.setpoint, Self.hex(value), "--json", "--timeout", "10"], on: .central)
        guard written.status == 0 else { return failures + ["the setpoint write failed: \(written.stderr.suffix(200))"] }
        let read = beryl(["gatt", "--peer", thermostatIdentifier, "read", Self.setpoint, "--json", "--timeout", "10"], on: .central)
        if readValues(read.stdout) != [Self.hex(value)] { failures.append("the setpoint read back \(read.stdout.suffix(120)) \(read.stderr.suffix(120))") }
        let applied = setpointsApplied(value) - appliedBefore
        if applied != 1 { failures.append("one setpoint write was applied \(applied) times") }
        // The link is up on the air and both apps see it; the central app's subscription delivers again.
        if airLinks() != 1 { failures.append("\(airLinks()) links on the air between the stacks") }
        if appPIDs(Self.doorlockID, on: .central).count != 1 { failures.append("doorlock runs \(appPIDs(Self.doorlockID, on: .central).count) times") }
        if appPIDs(Self.thermostatID, on: .peripheral).count != 1 { failures.append("thermostat runs \(appPIDs(Self.thermostatID, on: .peripheral).count) times") }
        let connected = JSONLines.events(in: beryl(["peripherals", "--connected", "--json"], on: .central).stdout).compactMap { $0["identifier"] as? String }
        if !connected.contains(thermostatIdentifier) { failures.append("the central's stack does not list the thermostat as connected") }
        let taken = notificationCount()
        if !eventually(.seconds(3), { self.notificationCount() >= taken + 2 }) {
            failures.append("the doorlock app's subscription delivers nothing: \(tail(doorlockLog, lines: 3))")
        }
        return failures
    }
}

/// What the serving phase's writes got back, collected on their own thread.
final class BurstResults: Sendable {
    private struct State {
        var values: [Int] = []
        var appliedBefore: [Int] = []
        var runs: [Int: ToolRun] = [:]
        var done = false
    }
    private let state = Mutex(State())

    func expect(values: [Int], appliedBefore: [Int]) {
        state.withLock {
            $0.values = values
            $0.appliedBefore = appliedBefore
        }
    }
    func record(value: Int, run: ToolRun) { state.withLock { $0.runs[value] = run } }
    func finish() { state.withLock { $0.done = true } }
    var isFinished: Bool { state.withLock { $0.done } }

    /// Each write answered once (success, or a clean error), and applied at most once — exactly once if it succeeded.
    func problems(appliedAfter: (Int) -> Int) -> [String] {
        let (values, before, runs) = state.withLock { ($0.values, $0.appliedBefore, $0.runs) }
        var problems: [String] = []
        for (index, value) in values.enumerated() {
            guard let run = runs[value] else {
                problems.append("write of \(value) never finished")
                continue
            }
            let applied = appliedAfter(value) - before[index]
            if applied > 1 { problems.append("write of \(value) applied \(applied) times") }
            if run.status == 0, applied != 1 { problems.append("write of \(value) succeeded but was applied \(applied) times") }
            if run.status != 0, run.stderr.isEmpty { problems.append("write of \(value) failed (exit \(run.status)) without saying why") }
        }
        return problems
    }
}
