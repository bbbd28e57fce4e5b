@testable import BerylSim
import XCTest

/// What the simulator sent a host, parsed by hand from H4 bytes (deliberately not with Beryl's own codec).
enum RawPacket: Equatable {
    case event(code: UInt8, parameters: [UInt8])
    case acl(handle: UInt16, boundary: UInt8, data: [UInt8])
}

func le16(_ value: UInt16) -> [UInt8] { [UInt8(value & 0xFF), UInt8(value >> 8)] }

/// A bare host on one simulated controller: writes raw H4, reads raw H4.
final class RawHost {
    let index: Int
    unowned let harness: SimHarness
    var packets: [RawPacket] = []
    private var pending: [UInt8] = []

    init(index: Int, harness: SimHarness) {
        self.index = index
        self.harness = harness
    }

    func send(_ bytes: [UInt8]) { harness.air.receive(fromHost: bytes, controller: index, at: harness.now) }

    static func commandBytes(_ opcode: UInt16, _ parameters: [UInt8]) -> [UInt8] {
        [0x01] + le16(opcode) + [UInt8(parameters.count)] + parameters
    }

    func sendCommand(_ opcode: UInt16, _ parameters: [UInt8] = []) { send(Self.commandBytes(opcode, parameters)) }

    func sendACL(handle: UInt16, boundary: UInt8 = 0b00, _ data: [UInt8]) {
        send([0x02] + le16(handle | UInt16(boundary) << 12) + le16(UInt16(data.count)) + data)
    }

    /// Sends a command and runs the air until its Command Complete or Command Status; returns that event's parameters.
    @discardableResult
    func call(_ opcode: UInt16, _ parameters: [UInt8] = [], file: StaticString = #filePath, line: UInt = #line) -> [UInt8] {
        let before = packets.count
        sendCommand(opcode, parameters)
        var answer: [UInt8]?
        harness.run(until: {
            for packet in self.packets[before...] {
                if case .event(0x0E, let p) = packet, p.count >= 3, UInt16(p[1]) | UInt16(p[2]) << 8 == opcode { answer = p; return true }
                if case .event(0x0F, let p) = packet, p.count >= 4, UInt16(p[2]) | UInt16(p[3]) << 8 == opcode { answer = p; return true }
            }
            return false
        }, timeout: .seconds(1))
        guard let answer else {
            XCTFail("no Command Complete/Status for 0x\(String(opcode, radix: 16))", file: file, line: line)
            return []
        }
        return answer
    }

    /// Status of a Command Complete (byte 3) or Command Status (byte 0).
    func status(_ opcode: UInt16, _ parameters: [UInt8] = [], file: StaticString = #filePath, line: UInt = #line) -> UInt8 {
        let answer = call(opcode, parameters, file: file, line: line)
        guard !answer.isEmpty else { return 0xFF }
        return answer.count >= 4 && UInt16(answer[1]) | UInt16(answer[2]) << 8 == opcode ? answer[3] : answer[0]
    }

    func pump() {
        pending += harness.air.takeOutput(controller: index)
        while let first = pending.first {
            if first == 0x04, pending.count >= 3, pending.count >= 3 + Int(pending[2]) {
                let length = Int(pending[2])
                packets.append(.event(code: pending[1], parameters: Array(pending[3..<3 + length])))
                pending.removeFirst(3 + length)
            } else if first == 0x02, pending.count >= 5 {
                let length = Int(pending[3]) | Int(pending[4]) << 8
                guard pending.count >= 5 + length else { return }
                let header = UInt16(pending[1]) | UInt16(pending[2]) << 8
                packets.append(.acl(handle: header & 0x0FFF, boundary: UInt8(header >> 12 & 0x3), data: Array(pending[5..<5 + length])))
                pending.removeFirst(5 + length)
            } else if first == 0x04 || first == 0x02 {
                return
            } else {
                XCTFail("unexpected H4 indicator 0x\(String(first, radix: 16)) from controller \(index)")
                pending.removeAll()
            }
        }
    }

    func events(_ code: UInt8) -> [[UInt8]] {
        packets.compactMap { if case .event(code, let p) = $0 { return p } else { return nil } }
    }

    func leEvents(_ subevent: UInt8) -> [[UInt8]] {
        events(0x3E).filter { $0.first == subevent }.map { Array($0.dropFirst()) }
    }

    var acl: [(handle: UInt16, boundary: UInt8, data: [UInt8])] {
        packets.compactMap { if case .acl(let h, let b, let d) = $0 { return (h, b, d) } else { return nil } }
    }

    /// Reset, then unmask every event including LE meta and the LE subevents up to PHY Update Complete, except the enhanced connection complete.
    func powerOn(leMask: UInt64 = 0x0000_0000_0000_0DFF) {
        XCTAssertEqual(status(0x0C03), 0)
        XCTAssertEqual(status(0x0C01, [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x3F]), 0)
        XCTAssertEqual(status(0x2001, (0..<8).map { UInt8(truncatingIfNeeded: leMask >> (8 * UInt64($0))) }), 0)
    }

    var address: [UInt8] { Array(call(0x1009).suffix(6)) }
}

final class SimHarness {
    let air: SimAir
    var hosts: [RawHost] = []
    var now: Duration = .zero

    init(controllers: Int = 2, seed: UInt64 = 7, config: SimConfig = SimConfig()) {
        air = SimAir(controllerCount: controllers, seed: seed, config: config)
        hosts = (0..<controllers).map { RawHost(index: $0, harness: self) }
    }

    subscript(index: Int) -> RawHost { hosts[index] }

    /// Advances simulated time event by event, letting every host read its output.
    func run(for duration: Duration) {
        let end = now + duration
        run(until: { false }, deadline: end)
    }

    @discardableResult
    func run(until condition: () -> Bool, timeout: Duration) -> Bool {
        run(until: condition, deadline: now + timeout)
    }

    @discardableResult
    private func run(until condition: () -> Bool, deadline: Duration) -> Bool {
        while true {
            hosts.forEach { $0.pump() }
            if condition() { return true }
            guard let next = air.nextDeadline, next <= deadline else {
                now = deadline
                air.advance(to: now)
                hosts.forEach { $0.pump() }
                return condition()
            }
            now = max(now, next)
            air.advance(to: now)
        }
    }

    // Common setups.

    func advertise(_ index: Int, type: UInt8 = 0, intervalUnits: UInt16 = 0x00A0, data: [UInt8] = [], scanResponse: [UInt8] = [],
                   peer: [UInt8] = [0, 0, 0, 0, 0, 0]) {
        let host = self[index]
        XCTAssertEqual(host.status(0x2006, le16(intervalUnits) + le16(intervalUnits) + [type, 0, 0] + peer + [0x07, 0]), 0)
        XCTAssertEqual(host.status(0x2008, [UInt8(data.count)] + data + [UInt8](repeating: 0, count: 31 - data.count)), 0)
        XCTAssertEqual(host.status(0x2009, [UInt8(scanResponse.count)] + scanResponse + [UInt8](repeating: 0, count: 31 - scanResponse.count)), 0)
        XCTAssertEqual(host.status(0x200A, [1]), 0)
    }

    func scan(_ index: Int, active: Bool, duplicates: Bool = false, interval: UInt16 = 0x0060, window: UInt16 = 0x0060) {
        let host = self[index]
        XCTAssertEqual(host.status(0x200B, [active ? 1 : 0] + le16(interval) + le16(window) + [0, 0]), 0)
        XCTAssertEqual(host.status(0x200C, [1, duplicates ? 1 : 0]), 0)
    }

    /// Connects central → peripheral (peripheral advertising ADV_IND); returns (central handle, peripheral handle).
    func connect(central: Int, peripheral: Int, intervalUnits: UInt16 = 24, timeoutUnits: UInt16 = 100) -> (UInt16, UInt16) {
        let peerAddress = self[peripheral].address
        advertise(peripheral)
        let parameters = le16(0x0060) + le16(0x0060) + [0, 0] + peerAddress + [0] + le16(intervalUnits) + le16(intervalUnits)
            + le16(0) + le16(timeoutUnits) + le16(0) + le16(0)
        XCTAssertEqual(self[central].status(0x200D, parameters), 0)
        run(until: { !self[central].leEvents(0x01).isEmpty && !self[peripheral].leEvents(0x01).isEmpty }, timeout: .seconds(2))
        guard let c = self[central].leEvents(0x01).last, let p = self[peripheral].leEvents(0x01).last else {
            XCTFail("no connection")
            return (0, 0)
        }
        return (UInt16(c[1]) | UInt16(c[2]) << 8, UInt16(p[1]) | UInt16(p[2]) << 8)
    }
}
