import BerylCore
import BerylDaemonKit
import BerylHCI
import BerylIPC
import BerylSupervisor
import BerylTools
import Foundation

public struct HCIBenchmarkResult: Codable, Sendable {
    public var commandRoundTripsPerSecond: Double
    public var aclBytesPerSecond: Double
    public var aclPDUBytes: Int
    public var aclPackets: Int
    public var hcidCPUMillisecondsPer10kACLPackets: Double
    public var note: String
}

/// `beryl bench hci`: berylsim with two controllers, an hcid on each, measured through hcid's socket.
public enum HCIBenchmark {
    public static func run(seconds: Double = 2, pduBytes: Int = 1000) throws -> HCIBenchmarkResult {
        let scratch = try Scratch()
        defer { scratch.stopAll() }
        let sim = scratch.root + "/sim"
        try scratch.start("berylsim", [Executables.path("berylsim"), "--dir", sim, "--controllers", "2", "--log-level", "warning"],
                          socket: sim + "/control.sock")
        var clients: [IPCClient] = []
        for index in 0...1 {
            let runtime = "\(scratch.root)/run\(index)"
            try scratch.start("hcid\(index)", [Executables.path("hcid"), "--runtime-dir", runtime, "--state-dir", "\(scratch.root)/state\(index)",
                                               "--transport", "unix:\(sim)/controller-\(index).sock", "--log-level", "warning"],
                              socket: runtime + "/hcid.sock")
            let deadline = ContinuousClock.now + .seconds(10)
            while StackProbe.controllerInfo(at: runtime + "/hcid.sock")?.state != .poweredOn {
                guard ContinuousClock.now < deadline else { throw StackError.controllerNotReady(after: .seconds(10), state: "not poweredOn", detail: "") }
                usleep(20_000)
            }
            clients.append(try IPCClient(path: runtime + "/hcid.sock"))
        }
        let (central, peripheral) = (clients[0], clients[1])
        let clock = ContinuousClock()

        // Command round trips: LE Rand, one at a time, through hcid to the controller and back.
        var rounds = 0
        let commandEnd = clock.now + .milliseconds(Int(seconds * 1000))
        let commandStart = clock.now
        while clock.now < commandEnd {
            try command(central, HCICommands.leRand)
            rounds += 1
        }
        let commandRate = Double(rounds) / durationSeconds(clock.now - commandStart)

        // ACL: connect at a 7.5 ms interval with 251-byte data length, then keep hcid's queue fed.
        for client in clients { try subscribe(client) }
        try command(peripheral, HCICommands.leSetAdvertisingParameters(interval: 0x20))
        try command(peripheral, HCICommands.leSetAdvertisingEnable(true))
        guard let address = StackProbe.controllerInfo(at: "\(scratch.root)/run1/hcid.sock").flatMap({ DeviceAddress($0.address) }) else {
            throw StackError.controllerNotReady(after: .zero, state: "no address", detail: "")
        }
        try command(central, HCICommands.leCreateConnection(peer: address, scanInterval: 0x10, scanWindow: 0x10, interval: 6, supervisionTimeout: 100))
        let handle = try waitForHandle(central)
        _ = try waitForHandle(peripheral)
        try command(central, HCICommands.leSetDataLength(handle: handle, octets: 251, time: 2120))
        usleep(100_000)

        let hcidPid = scratch.pid(of: "hcid0") ?? 0
        let cpuBefore = ProcessStats.cpuTime(pid: hcidPid) ?? .zero
        let pdu = [UInt8](repeating: 0x5A, count: pduBytes)
        var sent = 0
        var received = 0
        let start = clock.now
        let end = start + .milliseconds(Int(seconds * 1000))
        while clock.now < end {
            // Keep about 16 PDUs ahead of the receiver; hcid paces them to the controller's credits.
            while sent - received / pduBytes < 16 {
                var request = Request()
                request.hci.sendAcl.handle = UInt32(handle)
                request.hci.sendAcl.pdu = Data(pdu)
                _ = try central.call(request)
                sent += 1
            }
            while let envelope = try? peripheral.receive(timeout: .milliseconds(5)) {
                if case .acl(let acl)? = envelope.event.hci.kind { received += acl.data.count }
            }
        }
        let elapsed = durationSeconds(clock.now - start)
        let cpu = (ProcessStats.cpuTime(pid: hcidPid) ?? .zero) - cpuBefore
        let packets = (received + 250) / 251
        return HCIBenchmarkResult(
            commandRoundTripsPerSecond: commandRate, aclBytesPerSecond: Double(received) / elapsed, aclPDUBytes: pduBytes, aclPackets: packets,
            hcidCPUMillisecondsPer10kACLPackets: packets > 0 ? durationSeconds(cpu) * 1000 * 10_000 / Double(packets) : 0,
            note: "berylsim without the air-time model; 7.5 ms interval; the controller holds 8 × 251-byte buffers, freed once per connection event")
    }

    /// A Command Complete's return parameters after its status (none for a command answered by Command Status); a
    /// status other than Success is thrown, since the figures would then measure a setup the benchmark did not ask for
    /// (a link at the old data length, no advertising).
    @discardableResult
    public static func command(_ client: IPCClient, _ packet: HCICommandPacket) throws -> [UInt8] {
        let answer = try client.call(.hci(packet)).hci.commandResult
        guard answer.status == 0x00 else { throw CommandRefused(opcode: packet.opcode, status: answer.status) }
        return Array(answer.statusAndReturnParameters.dropFirst())
    }

    public struct CommandRefused: Error, Equatable, CustomStringConvertible {
        public let opcode: UInt16
        /// The controller's status (Core Vol 1 Part F); nil when its answer carried none.
        public let status: UInt8?

        public var description: String {
            "the controller refused HCI command 0x\(String(opcode, radix: 16))"
                + (status.map { " with status 0x\(String($0, radix: 16))" } ?? " without a status")
        }
    }

    public static func subscribe(_ client: IPCClient, acl: Bool = true) throws {
        var request = Request()
        request.hci.subscribe.events = true
        request.hci.subscribe.acl = acl
        _ = try client.call(request)
    }

    public static func waitForHandle(_ client: IPCClient) throws -> UInt16 {
        let deadline = ContinuousClock.now + .seconds(5)
        while ContinuousClock.now < deadline {
            guard let envelope = try? client.receive(timeout: .milliseconds(100)) else { continue }
            if case .connected(let handle, _, _)? = envelope.event.linkEvent { return handle }
        }
        throw StackError.controllerNotReady(after: .seconds(5), state: "no connection", detail: "")
    }

    public static func durationSeconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}
