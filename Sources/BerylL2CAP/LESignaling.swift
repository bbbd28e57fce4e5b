import BerylCore

/// The LE signalling channel (CID 0x0005), sans-IO (Core Vol 3 Part A §4).
public struct LESignaling {
    public enum Code: UInt8, Sendable {
        case commandReject = 0x01
        case disconnectionRequest = 0x06
        case disconnectionResponse = 0x07
        case connectionParameterUpdateRequest = 0x12
        case connectionParameterUpdateResponse = 0x13
        case leCreditBasedConnectionRequest = 0x14
        case leCreditBasedConnectionResponse = 0x15
        case flowControlCredit = 0x16
        case creditBasedConnectionRequest = 0x17
        case creditBasedConnectionResponse = 0x18
        case creditBasedReconfigureRequest = 0x19
        case creditBasedReconfigureResponse = 0x1A
    }

    public enum RejectReason: UInt16, Sendable {
        case commandNotUnderstood = 0x0000
        case signalingMTUExceeded = 0x0001
        case invalidCIDInRequest = 0x0002
    }

    public enum Output: Equatable, Sendable {
        /// A signalling packet to send on CID 0x0005.
        case send([UInt8])
        /// The peripheral asks the central's host for new parameters; answer with `respondToParameterUpdate`.
        case parameterUpdateRequested(identifier: UInt8, ConnectionParameters)
        /// The central answered our request.
        case parameterUpdateAnswered(accepted: Bool)
        case log(String)
    }

    /// LE signalling MTU: at least 23 (Core Vol 3 Part A §4).
    public static let mtu = 23
    public let isCentral: Bool
    private var identifiers = SignalingIdentifiers()
    private var pendingUpdate: UInt8?

    public init(isCentral: Bool) {
        self.isCentral = isCentral
    }

    public mutating func receive(_ payload: [UInt8]) -> [Output] {
        var reader = ByteReader(payload)
        guard let code = try? reader.u8(), let identifier = try? reader.u8(), let length = try? reader.u16() else {
            return [.log("signalling packet too short (\(payload.count) bytes); dropped")]
        }
        guard identifier != 0 else { return [.log("signalling identifier 0 is invalid; dropped")] }
        guard payload.count <= Self.mtu else { return [reject(identifier, .signalingMTUExceeded, data: [UInt8(Self.mtu), 0])] }
        guard let body = try? reader.take(Int(length)), reader.isAtEnd else { return [reject(identifier, .commandNotUnderstood)] }
        switch Code(rawValue: code) {
        case .connectionParameterUpdateRequest?:
            // Only a peripheral may ask, and only the central answers (Core Vol 3 Part A §4.20).
            guard isCentral, body.count == 8 else { return [reject(identifier, .commandNotUnderstood)] }
            var fields = ByteReader(body)
            guard let min = try? fields.u16(), let max = try? fields.u16(), let latency = try? fields.u16(), let timeout = try? fields.u16() else {
                return [reject(identifier, .commandNotUnderstood)]
            }
            let parameters = ConnectionParameters(intervalMin: min, intervalMax: max, latency: latency, timeout: timeout)
            guard parameters.isValid else { return [respondToParameterUpdate(identifier: identifier, accepted: false)] }
            return [.parameterUpdateRequested(identifier: identifier, parameters)]
        case .connectionParameterUpdateResponse?:
            guard !isCentral, body.count == 2, identifier == pendingUpdate else { return [.log("unexpected parameter update response; ignored")] }
            pendingUpdate = nil
            return [.parameterUpdateAnswered(accepted: body[0] == 0 && body[1] == 0)]
        case .commandReject?:
            if identifier == pendingUpdate {
                pendingUpdate = nil
                return [.parameterUpdateAnswered(accepted: false)]
            }
            return [.log("peer rejected signalling command \(identifier)")]
        case .disconnectionRequest?:
            // No dynamic channel is ever open, so every one named is invalid; the data is the request's
            // destination (our end) then its source (Core Vol 3 Part A §4.1, §4.6).
            guard body.count == 4 else { return [reject(identifier, .commandNotUnderstood)] }
            return [reject(identifier, .invalidCIDInRequest, data: Array(body))]
        case .leCreditBasedConnectionRequest?:
            // No SPSM is registered: refused with SPSM Not Supported and zeroed fields (Core Vol 3 Part A §4.23).
            guard body.count == 10 else { return [reject(identifier, .commandNotUnderstood)] }
            return [.send(Self.packet(.leCreditBasedConnectionResponse, identifier, [UInt8](repeating: 0, count: 8) + [0x02, 0x00]))]
        case .disconnectionResponse?, .leCreditBasedConnectionResponse?, .flowControlCredit?:
            // Answers to requests never sent, and credits for channels that do not exist, are dropped (§4.24).
            return [.log("signalling code 0x\(String(code, radix: 16)) for no channel of ours; ignored")]
        default:
            return [reject(identifier, .commandNotUnderstood)]
        }
    }

    public func respondToParameterUpdate(identifier: UInt8, accepted: Bool) -> Output {
        .send(Self.packet(.connectionParameterUpdateResponse, identifier, accepted ? [0, 0] : [1, 0]))
    }

    /// A peripheral's request for new parameters; nil (and nothing sent) while one is outstanding.
    public mutating func requestParameterUpdate(_ parameters: ConnectionParameters) -> Output? {
        guard !isCentral, pendingUpdate == nil else { return nil }
        let identifier = identifiers.next()
        pendingUpdate = identifier
        var body = ByteWriter()
        for value in [parameters.intervalMin, parameters.intervalMax, parameters.latency, parameters.timeout] { body.u16(value) }
        return .send(Self.packet(.connectionParameterUpdateRequest, identifier, body.bytes))
    }

    private func reject(_ identifier: UInt8, _ reason: RejectReason, data: [UInt8] = []) -> Output {
        .send(Self.rejectPacket(identifier, reason, data: data))
    }

    /// A Command Reject (Core Vol 3 Part A §4.1).
    static func rejectPacket(_ identifier: UInt8, _ reason: RejectReason, data: [UInt8] = []) -> [UInt8] {
        packet(.commandReject, identifier, [UInt8(reason.rawValue & 0xFF), UInt8(reason.rawValue >> 8)] + data)
    }

    static func packet(_ code: Code, _ identifier: UInt8, _ body: [UInt8]) -> [UInt8] {
        [code.rawValue, identifier, UInt8(body.count & 0xFF), UInt8(body.count >> 8)] + body
    }
}

/// The identifiers of this end's signalling requests: 1 to 255, never 0 (Core Vol 3 Part A §4). One link's requests
/// should come from one of these, so that an answer names one request.
struct SignalingIdentifiers: Sendable {
    private var last: UInt8 = 0

    mutating func next() -> UInt8 {
        last = last == 255 ? 1 : last + 1
        return last
    }
}
