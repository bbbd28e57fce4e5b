import BerylCore

public enum ATTClientOutput: Equatable, Sendable {
    case send([UInt8])
    case response(id: UInt64, ATTPDU)
    case notification(handle: UInt16, value: [UInt8])
    /// Already confirmed (the confirmation is in a `.send` beside it).
    case indication(handle: UInt16, value: [UInt8])
    /// The server did not answer within 30 s: this request failed and the bearer is now unusable.
    case timedOut(id: UInt64)
    case log(String)
}

/// The client side of an ATT bearer (Core Vol 3 Part F §3.3): one request outstanding at a time,
/// the rest queued; a 30-second transaction timeout after which no further PDU may be sent (§3.3.3).
public final class ATTClient {
    public static let transactionTimeout: Duration = .seconds(30)
    public private(set) var mtu: UInt16 = 23
    public private(set) var isUsable = true
    private typealias Outstanding = (id: UInt64, request: ATTPDU, sentAt: Duration)
    private var outstanding: Outstanding?
    private var queue: [(id: UInt64, request: ATTPDU)] = []
    private var nextID: UInt64 = 1
    private var now: Duration = .zero

    public init() {}

    public var nextDeadline: Duration? { outstanding.map { $0.sentAt + Self.transactionTimeout } }
    public var queuedRequests: Int { queue.count + (outstanding == nil ? 0 : 1) }

    /// Queues a request (sent when none is outstanding) or sends a command now. Returns the request's id.
    public func submit(_ pdu: ATTPDU, at time: Duration) -> (id: UInt64, outputs: [ATTClientOutput]) {
        now = max(now, time)
        let id = nextID
        nextID += 1
        guard isUsable else { return (id, [.timedOut(id: id)]) }
        guard pdu.opcode.isRequest else { return (id, [.send(pdu.encoded)]) }
        queue.append((id, pdu))
        return (id, pump())
    }

    public func receive(_ bytes: [UInt8], at time: Duration) -> [ATTClientOutput] {
        now = max(now, time)
        guard isUsable else { return [.log("PDU after the transaction timeout ignored")] }
        guard case .success(let pdu) = ATTPDU.decode(bytes) else {
            if let outstanding, let opcode = bytes.first, mayAnswer(opcode, outstanding.request) {
                return fail(outstanding, garbled: "a malformed \(ATTOpcode(rawValue: opcode).map { "\($0)" } ?? "response")")
            }
            return [.log("malformed PDU from the server dropped")]
        }
        switch pdu {
        case .handleValueNotification(let handle, let value):
            return [.notification(handle: handle, value: value)]
        case .handleValueIndication(let handle, let value):
            return [.indication(handle: handle, value: value), .send(ATTPDU.handleValueConfirmation.encoded)]
        default:
            guard let outstanding, answers(pdu, outstanding.request) else { return [.log("\(pdu.opcode) answers no outstanding request; dropped")] }
            self.outstanding = nil
            if case .exchangeMTUResponse(let serverMTU) = pdu, case .exchangeMTURequest(let clientMTU) = outstanding.request {
                mtu = max(23, min(serverMTU, clientMTU))
            }
            return [.response(id: outstanding.id, pdu)] + pump()
        }
    }

    /// The outstanding request's response (its opcode, or an Error Response) that does not decode is that answer
    /// garbled (a rogue server, or bytes corrupted on the way): the request fails now with Invalid PDU, where waiting
    /// would only end the bearer at the 30 s timeout (Core Vol 3 Part F §3.3.3). A well-formed PDU of another opcode
    /// is dropped instead: it may be a notification garbled into a response, and the real answer may still come.
    private func fail(_ outstanding: Outstanding, garbled what: String) -> [ATTClientOutput] {
        self.outstanding = nil
        let failed = ATTPDU.errorResponse(request: outstanding.request.opcode.rawValue, handle: 0, error: .invalidPDU)
        return [.log("\(what) cannot answer \(outstanding.request.opcode); failing it"), .response(id: outstanding.id, failed)] + pump()
    }

    /// ATT_MTU is one value per bearer (Core Vol 3 Part F §3.4.2): an exchange our server answered sets it for our client too.
    public func adopt(mtu newMTU: UInt16) { mtu = max(mtu, min(newMTU, 517)) }
    /// The ATT_MTU our server just agreed with the peer's client: one value for both roles, even when a peer's second
    /// exchange (which it shall not send, Core Vol 3 Part F §3.4.2.1) lowered it.
    public func agree(mtu newMTU: UInt16) { mtu = max(23, min(newMTU, 517)) }

    public func tick(at time: Duration) -> [ATTClientOutput] {
        now = max(now, time)
        guard let outstanding, now - outstanding.sentAt >= Self.transactionTimeout else { return [] }
        self.outstanding = nil
        isUsable = false
        let failed = [outstanding.id] + queue.map(\.id)
        queue.removeAll()
        return failed.map { .timedOut(id: $0) }
    }

    private func pump() -> [ATTClientOutput] {
        guard outstanding == nil, !queue.isEmpty else { return [] }
        let (id, request) = queue.removeFirst()
        outstanding = (id, request, now)
        return [.send(request.encoded)]
    }

    /// A response answers the request whose opcode is one less, or is an Error Response naming it.
    private func answers(_ response: ATTPDU, _ request: ATTPDU) -> Bool {
        if case .errorResponse(let opcode, _, _) = response { return opcode == request.opcode.rawValue }
        return mayAnswer(response.opcode.rawValue, request)
    }

    /// The opcodes an answer to `request` can have: its response's, one more than its own, or Error Response's.
    private func mayAnswer(_ opcode: UInt8, _ request: ATTPDU) -> Bool {
        opcode == ATTOpcode.errorResponse.rawValue || opcode == request.opcode.rawValue + 1
    }
}
