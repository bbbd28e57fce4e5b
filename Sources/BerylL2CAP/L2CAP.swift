import BerylCore
import BerylHCI

/// LE fixed channels (Core Vol 3 Part A §2.1).
public enum FixedChannel: UInt16, Sendable {
    case att = 0x0004
    case leSignaling = 0x0005
    case smp = 0x0006
}

/// One complete L2CAP basic-mode frame: the channel and its information payload (Core Vol 3 Part A §3.1).
public struct L2CAPFrame: Equatable, Sendable {
    public var channel: UInt16
    public var payload: [UInt8]

    public init(channel: UInt16, payload: [UInt8]) {
        self.channel = channel
        self.payload = payload
    }

    public init(_ channel: FixedChannel, payload: [UInt8]) {
        self.init(channel: channel.rawValue, payload: payload)
    }

    /// The PDU with its basic L2CAP header (length, channel ID), ready for hcid to fragment.
    public var pdu: [UInt8] {
        var writer = ByteWriter(capacity: payload.count + 4)
        writer.u16(UInt16(payload.count))
        writer.u16(channel)
        writer.append(payload)
        return writer.bytes
    }
}

/// Reassembles one connection's inbound ACL fragments into L2CAP frames, with bounds: a remote device
/// that sends a malformed or oversized PDU has it dropped (and reported), never buffered without limit.
public struct L2CAPReassembler {
    public enum Outcome: Equatable, Sendable {
        case frame(L2CAPFrame)
        case dropped(String)
    }

    /// The largest information payload accepted; larger PDUs are dropped whole.
    public let maxPayload: Int
    private var partial: [UInt8] = []
    private var expected: Int?
    private var discarding = false

    public init(maxPayload: Int = 517 + 4) {
        self.maxPayload = maxPayload
    }

    public var isIdle: Bool { partial.isEmpty && !discarding }

    public mutating func feed(boundary: ACLBoundary, data: [UInt8]) -> [Outcome] {
        var outcomes: [Outcome] = []
        if boundary == .continuing {
            guard !partial.isEmpty || discarding else { return [.dropped("continuation fragment with no PDU started")] }
            if discarding { return [] }
            partial += data
        } else {
            if !partial.isEmpty { outcomes.append(.dropped("new PDU started before the previous one completed (\(partial.count) bytes lost)")) }
            partial = data
            expected = nil
            discarding = false
        }
        if expected == nil, partial.count >= 4 {
            let length = Int(partial[0]) | Int(partial[1]) << 8
            if length > maxPayload {
                outcomes.append(.dropped("PDU of \(length) bytes exceeds the \(maxPayload)-byte limit"))
                partial.removeAll()
                discarding = true
                return outcomes
            }
            expected = length + 4
        }
        guard let expected, partial.count >= expected else { return outcomes }
        if partial.count > expected {
            outcomes.append(.dropped("PDU longer (\(partial.count - 4) bytes) than its header says (\(expected - 4))"))
            partial.removeAll()
            self.expected = nil
            return outcomes
        }
        let channel = UInt16(partial[2]) | UInt16(partial[3]) << 8
        outcomes.append(.frame(L2CAPFrame(channel: channel, payload: Array(partial[4...]))))
        partial.removeAll()
        self.expected = nil
        return outcomes
    }
}
