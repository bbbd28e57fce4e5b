import BerylATT
import BerylCore
import BerylGATT
import BerylHCI
import BerylL2CAP

/// Everything one LE link carries, sans-IO: L2CAP reassembly, then ATT (server and client) and the signalling
/// channel. SMP PDUs are handed out as they are, for the shell's security manager.
public final class LinkSession {
    public enum Output: Equatable, Sendable {
        /// An L2CAP PDU for hcid to fragment onto the link.
        case send([UInt8])
        case server(ATTServerOutput)
        case client(ATTClientOutput)
        case parameterUpdateRequested(identifier: UInt8, ConnectionParameters)
        /// A PDU on the Security Manager's fixed channel (Core Vol 3 Part H §3.2).
        case security([UInt8])
        case log(String)
    }

    public let handle: UInt16
    public let isCentral: Bool
    public let server: ATTServer
    public let client = ATTClient()
    /// The GATT client's procedures, over `client`.
    public let gatt: GATTClient
    private var reassembler = L2CAPReassembler()
    private var signaling: LESignaling

    public init(handle: UInt16, isCentral: Bool, database: AttributeDatabase, serverMTU: UInt16 = 517) {
        self.handle = handle
        self.isCentral = isCentral
        server = ATTServer(database: database, serverMTU: serverMTU)
        gatt = GATTClient(bearer: client)
        signaling = LESignaling(isCentral: isCentral)
    }

    public func receive(boundary: ACLBoundary, data: [UInt8]) -> [Output] {
        var outputs: [Output] = []
        for outcome in reassembler.feed(boundary: boundary, data: data) {
            switch outcome {
            case .dropped(let why):
                outputs.append(.log("link 0x\(String(handle, radix: 16)): \(why)"))
            case .frame(let frame):
                outputs += dispatch(frame)
            }
        }
        return outputs
    }

    private func dispatch(_ frame: L2CAPFrame) -> [Output] {
        switch FixedChannel(rawValue: frame.channel) {
        case .att?:
            // One fixed channel carries both roles: what only a server sends belongs to our client (Core Vol 3 Part F §3.2.11).
            if let opcode = frame.payload.first.flatMap(ATTOpcode.init(rawValue:)), opcode.isSentByServer {
                let outputs = clientOutputs(client.receive(frame.payload, at: now))
                server.adopt(mtu: client.mtu)
                return outputs
            }
            let isExchange = frame.payload.first == ATTOpcode.exchangeMTURequest.rawValue
            defer { if isExchange { client.agree(mtu: server.mtu) } else { client.adopt(mtu: server.mtu) } }
            return server.receive(frame.payload).map { output in
                if case .send(let bytes) = output { return .send(L2CAPFrame(.att, payload: bytes).pdu) }
                return .server(output)
            }
        case .leSignaling?:
            return signaling.receive(frame.payload).map { output in
                switch output {
                case .send(let bytes): .send(L2CAPFrame(.leSignaling, payload: bytes).pdu)
                case .parameterUpdateRequested(let identifier, let parameters): .parameterUpdateRequested(identifier: identifier, parameters)
                case .parameterUpdateAnswered(let accepted): .log("parameter update \(accepted ? "accepted" : "rejected")")
                case .log(let message): .log(message)
                }
            }
        case .smp?:
            return [.security(frame.payload)]
        case nil:
            return [.log("frame for unknown channel 0x\(String(frame.channel, radix: 16)) dropped")]
        }
    }

    public func answerParameterUpdate(identifier: UInt8, accepted: Bool) -> [UInt8] {
        guard case .send(let bytes) = signaling.respondToParameterUpdate(identifier: identifier, accepted: accepted) else { return [] }
        return L2CAPFrame(.leSignaling, payload: bytes).pdu
    }

    public func attPDU(_ bytes: [UInt8]) -> [UInt8] { L2CAPFrame(.att, payload: bytes).pdu }

    /// The time as the shell last gave it, for the client's transaction timeout.
    public var now: Duration = .zero

    public func smpPDU(_ bytes: [UInt8]) -> [UInt8] { L2CAPFrame(.smp, payload: bytes).pdu }

    /// Client outputs with their PDUs framed for the link.
    public func clientOutputs(_ outputs: [ATTClientOutput]) -> [Output] {
        outputs.map { if case .send(let bytes) = $0 { return .send(attPDU(bytes)) } else { return .client($0) } }
    }
}
