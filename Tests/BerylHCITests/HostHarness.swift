import BerylCore
@testable import BerylHCI
import BerylSim
import XCTest

/// HCIHost cores attached to simulated controllers, run in simulated time: hcid's logic against a strict controller.
final class HostHarness {
    let air: SimAir
    var hosts: [HCIHost]
    var now: Duration = .zero
    var answers: [[(client: HCIClientID, token: UInt64, event: HCIEventPacket)]]
    var failures: [[(client: HCIClientID, token: UInt64, reason: HCICommandFailure)]]
    var events: [[HCIEventPacket]]
    var acl: [[ACLPacket]]
    var states: [[ControllerState]]
    /// State changes and events in the order the host gave them.
    enum Traced: Equatable {
        case state(ControllerState)
        case event(code: UInt8)
    }
    var stateAndEventOrder: [[Traced]]
    var maxInFlight: [Int]
    var baudSwitches: [[Int]]
    var logs: [[String]]
    /// Credit grants each host reported, in order, with the buffer size that prices them.
    var credits: [[(client: HCIClientID, grants: [ACLCreditGrant], mtu: Int)]]
    /// The opcodes of the commands each host wrote to its controller, in order.
    var commandsSent: [[UInt16]]
    private var sentFramers: [H4Framer]
    /// Events a controller sends that its host never sees, as a corrupted stream loses them: (controller, event code).
    var lose: ((Int, UInt8) -> Bool)?
    /// Rewrites a controller's H4 output on its way to the host, as corruption would: (controller, bytes) → bytes.
    var rewrite: ((Int, [UInt8]) -> [UInt8])?
    /// A Broadcom radio behind a UART for a controller: bytes cross only when both ends run at one speed.
    var uarts: [Int: BroadcomUART] = [:]

    init(controllers: Int = 2, config: SimConfig = SimConfig(), makeHost: (Int) -> HCIHost = { _ in HCIHost() }) {
        air = SimAir(controllerCount: controllers, seed: 3, config: config)
        hosts = (0..<controllers).map(makeHost)
        answers = Array(repeating: [], count: controllers)
        failures = Array(repeating: [], count: controllers)
        events = Array(repeating: [], count: controllers)
        acl = Array(repeating: [], count: controllers)
        states = Array(repeating: [], count: controllers)
        stateAndEventOrder = Array(repeating: [], count: controllers)
        maxInFlight = Array(repeating: 0, count: controllers)
        baudSwitches = Array(repeating: [], count: controllers)
        logs = Array(repeating: [], count: controllers)
        credits = Array(repeating: [], count: controllers)
        commandsSent = Array(repeating: [], count: controllers)
        sentFramers = Array(repeating: H4Framer(), count: controllers)
    }

    func startAll() {
        for (index, host) in hosts.enumerated() {
            host.start(at: now)
            route(index)
        }
        run(until: { self.hosts.allSatisfy { $0.state == .poweredOn } }, timeout: .seconds(2))
    }

    /// Routes a host's outputs now (what a shell does after each call into its core).
    func route(_ index: Int) {
        let host = hosts[index]
        for output in host.takeOutputs() {
            switch output {
            case .toController(let bytes):
                var vendor = false
                for case .packet(.command(let command)) in sentFramers[index].feed(bytes) {
                    commandsSent[index].append(command.opcode)
                    vendor = command.opcode >= 0xFC00
                }
                if let uart = uarts[index] {
                    if uart.fromHost(bytes, vendor: vendor, at: now) { air.receive(fromHost: bytes, controller: index, at: now) }
                } else {
                    air.receive(fromHost: bytes, controller: index, at: now)
                }
            case .commandAnswered(let client, let token, let event): answers[index].append((client, token, event))
            case .commandFailed(let client, let token, let reason): failures[index].append((client, token, reason))
            case .event(let event):
                events[index].append(event)
                stateAndEventOrder[index].append(.event(code: event.code))
            case .aclReceived(let packet): acl[index].append(packet)
            case .stateChanged(let state):
                states[index].append(state)
                stateAndEventOrder[index].append(.state(state))
            case .switchTransportBaud(let baud):
                baudSwitches[index].append(baud)
                uarts[index]?.hostBaud = baud
            case .log(let line): logs[index].append(line)
            case .aclCredits(let client, let grants, let mtu): credits[index].append((client, grants, mtu))
            }
        }
        maxInFlight[index] = max(maxInFlight[index], host.aclInFlight)
    }

    private func exchange() {
        for index in hosts.indices {
            var bytes = withoutLostEvents(air.takeOutput(controller: index), from: index)
            if let uart = uarts[index] { bytes = uart.toHost(bytes) }
            if let rewrite, !bytes.isEmpty { bytes = rewrite(index, bytes) }
            if !bytes.isEmpty { hosts[index].controllerBytes(bytes, at: now) }
            hosts[index].tick(at: now)
            route(index)
        }
    }

    /// The controller's H4 output (whole packets) less the events `lose` picks.
    private func withoutLostEvents(_ bytes: [UInt8], from index: Int) -> [UInt8] {
        guard let lose else { return bytes }
        return Self.keeping(bytes) { !($0[0] == 0x04 && lose(index, $0[1])) }
    }

    /// H4 bytes of whole packets less those `keep` refuses; what follows the last whole header passes as it is.
    static func keeping(_ bytes: [UInt8], where keep: ([UInt8]) -> Bool) -> [UInt8] {
        var kept: [UInt8] = []
        var at = 0
        while at < bytes.count {
            let length: Int
            switch bytes[at] {
            case 0x04 where at + 2 < bytes.count: length = 3 + Int(bytes[at + 2])
            case 0x02 where at + 4 < bytes.count: length = 5 + (Int(bytes[at + 3]) | Int(bytes[at + 4]) << 8)
            default: return kept + bytes[at...]
            }
            let packet = Array(bytes[at..<min(at + length, bytes.count)])
            if keep(packet) { kept += packet }
            at += length
        }
        return kept
    }

    @discardableResult
    func run(until condition: () -> Bool, timeout: Duration) -> Bool {
        let deadline = now + timeout
        while true {
            exchange()
            if condition() { return true }
            let answering = uarts.values.contains { $0.hasAnswers } ? now : nil
            let next = ([air.nextDeadline, answering] + hosts.map(\.nextDeadline)).compactMap { $0 }.min()
            guard let next, next <= deadline else {
                now = deadline
                air.advance(to: now)
                exchange()
                return condition()
            }
            now = max(now, next)
            air.advance(to: now)
        }
    }

    func run(for duration: Duration) { run(until: { false }, timeout: duration) }

    /// Submits a PDU on the bounded lane as a tool would: when the link's queue is full, waits for it to drain.
    @discardableResult
    func submit(_ index: Int, handle: UInt16, _ pdu: [UInt8]) -> ACLSubmission {
        var result = hosts[index].submitACL(handle: handle, pdu: pdu, at: now)
        while result == .busy, run(until: { hosts[index].aclQueuedFragments(for: handle) < HCIHost.boundedFragmentsPerLink }, timeout: .seconds(1)) {
            result = hosts[index].submitACL(handle: handle, pdu: pdu, at: now)
        }
        return result
    }

    /// Sends a command as client `client` and waits for its answer; returns the event's parameters.
    @discardableResult
    func command(_ index: Int, _ opcode: HCIOpcode, _ parameters: [UInt8] = [], client: HCIClientID = 1) -> [UInt8] {
        let token = UInt64.random(in: 1...UInt64.max)
        hosts[index].submitCommand(HCICommandPacket(opcode, parameters: parameters), client: client, token: token, at: now)
        route(index)
        run(until: { self.answers[index].contains { $0.token == token } || self.failures[index].contains { $0.token == token } },
            timeout: .seconds(5))
        return answers[index].first { $0.token == token }?.event.parameters ?? []
    }

    /// Controller 1 advertises, controller 0 connects; returns both handles.
    func connect() -> (UInt16, UInt16) {
        command(1, .leSetAdvertisingParameters, [0x20, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7, 0])
        command(1, .leSetAdvertisingEnable, [1])
        var create = ByteWriter()
        create.u16(0x10)
        create.u16(0x10)
        create.u8(0)
        create.u8(0)
        create.append(hosts[1].facts.address.bytes)
        create.u8(0)
        for value: UInt16 in [6, 6, 0, 100, 0, 0] { create.u16(value) }
        command(0, .leCreateConnection, create.bytes)
        run(until: { self.hosts[0].acl.isOpen(self.handle(0) ?? 0xFFFF) && self.handle(1) != nil }, timeout: .seconds(2))
        return (handle(0) ?? 0, handle(1) ?? 0)
    }

    func handle(_ index: Int) -> UInt16? {
        for event in events[index] where event.code == 0x3E && event.parameters.first == 0x0A && event.parameters[1] == 0 {
            return UInt16(event.parameters[2]) | UInt16(event.parameters[3]) << 8
        }
        return nil
    }
}

/// A Broadcom controller's UART as hcid meets it on a Pi: the vendor commands of a profile and a .hcd patch are its to
/// answer (the simulated controller behind it knows none); Update_UART_Baud_Rate answers at the old speed and then
/// moves; Launch_RAM answers, then the firmware boots for a while, deaf, and comes up at the boot speed.
final class BroadcomUART {
    var hostBaud: Int
    private(set) var controllerBaud: Int
    let bootBaud: Int
    private var bootingUntil: Duration?
    /// Vendor answers on their way to the host, each at the speed it was sent at.
    private var answers: [(bytes: [UInt8], baud: Int)] = []
    private(set) var garbled = 0
    /// Answers wait for the next exchange, not for a deadline: the harness runs again at once.
    var hasAnswers: Bool { !answers.isEmpty }

    init(bootBaud: Int = 115_200) {
        self.bootBaud = bootBaud
        hostBaud = bootBaud
        controllerBaud = bootBaud
    }

    /// True when the bytes reach the simulated controller as they are.
    func fromHost(_ bytes: [UInt8], vendor: Bool, at now: Duration) -> Bool {
        if let until = bootingUntil, now < until { garbled += 1; return false }
        bootingUntil = nil
        guard hostBaud == controllerBaud else { garbled += 1; return false }
        guard vendor, bytes.count >= 4 else { return true }
        let opcode = UInt16(bytes[1]) | UInt16(bytes[2]) << 8
        answers.append(([0x04, 0x0E, 4, 1, bytes[1], bytes[2], 0x00], controllerBaud))
        switch opcode {
        case 0xFC18 where bytes.count >= 10:  // Update_UART_Baud_Rate: 2 reserved octets, then the speed
            controllerBaud = Int(bytes[6]) | Int(bytes[7]) << 8 | Int(bytes[8]) << 16 | Int(bytes[9]) << 24
        case VendorStep.broadcomLaunchRAM:
            controllerBaud = bootBaud
            bootingUntil = now + .milliseconds(200)
        default:
            break
        }
        return false
    }

    func toHost(_ bytes: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        for answer in answers where answer.baud == hostBaud { out += answer.bytes }
        garbled += answers.filter { $0.baud != hostBaud }.count
        answers.removeAll()
        guard !bytes.isEmpty else { return out }
        guard hostBaud == controllerBaud else { garbled += 1; return out }
        return out + bytes
    }
}
