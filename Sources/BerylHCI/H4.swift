import BerylCore

/// The one-byte packet indicator that precedes each HCI packet on a UART-style stream (Core Vol 4 Part A §2).
public enum H4PacketType: UInt8, Sendable {
    case command = 0x01
    case acl = 0x02
    case sco = 0x03
    case event = 0x04
    case iso = 0x05
}

public struct HCICommandPacket: Equatable, Sendable {
    public var opcode: UInt16
    public var parameters: [UInt8]

    public init(opcode: UInt16, parameters: [UInt8] = []) {
        self.opcode = opcode
        self.parameters = parameters
    }

    public init(_ opcode: HCIOpcode, parameters: [UInt8] = []) {
        self.init(opcode: opcode.rawValue, parameters: parameters)
    }
}

public struct HCIEventPacket: Equatable, Sendable {
    public var code: UInt8
    public var parameters: [UInt8]

    public init(code: UInt8, parameters: [UInt8]) {
        self.code = code
        self.parameters = parameters
    }

    public init(_ code: HCIEventCode, parameters: [UInt8]) {
        self.init(code: code.rawValue, parameters: parameters)
    }
}

/// Packet_Boundary_Flag of an ACL data packet (Core Vol 4 Part E §5.4.2).
public enum ACLBoundary: UInt8, Sendable {
    case firstNonFlushable = 0b00
    case continuing = 0b01
    case firstFlushable = 0b10
    case complete = 0b11
}

public struct ACLPacket: Equatable, Sendable {
    public var handle: UInt16
    public var boundary: ACLBoundary
    public var broadcast: UInt8
    public var data: [UInt8]

    public init(handle: UInt16, boundary: ACLBoundary, broadcast: UInt8 = 0, data: [UInt8]) {
        self.handle = handle
        self.boundary = boundary
        self.broadcast = broadcast
        self.data = data
    }
}

public enum HCIPacket: Equatable, Sendable {
    case command(HCICommandPacket)
    case acl(ACLPacket)
    case event(HCIEventPacket)
    /// SCO and ISO are framed (so the stream stays in step) but not otherwise interpreted.
    case other(type: H4PacketType, bytes: [UInt8])

    /// The packet with its H4 indicator, as it travels on a UART or socket.
    public var h4Bytes: [UInt8] {
        var writer = ByteWriter()
        switch self {
        case .command(let command):
            writer.u8(H4PacketType.command.rawValue)
            writer.u16(command.opcode)
            writer.u8(UInt8(command.parameters.count))
            writer.append(command.parameters)
        case .acl(let acl):
            writer.u8(H4PacketType.acl.rawValue)
            writer.u16(acl.handle & 0x0FFF | UInt16(acl.boundary.rawValue) << 12 | UInt16(acl.broadcast & 0x3) << 14)
            writer.u16(UInt16(acl.data.count))
            writer.append(acl.data)
        case .event(let event):
            writer.u8(H4PacketType.event.rawValue)
            writer.u8(event.code)
            writer.u8(UInt8(event.parameters.count))
            writer.append(event.parameters)
        case .other(let type, let bytes):
            writer.u8(type.rawValue)
            writer.append(bytes)
        }
        return writer.bytes
    }
}

/// Splits an H4 byte stream into packets. A byte that is not a packet indicator where one must be
/// is reported and skipped, so the framer resynchronises at the next plausible packet instead of
/// misreading the rest of the stream or stalling. So is an ACL header announcing more than the
/// controller can send: H4 has no checksum, and a flipped length byte would otherwise make the
/// framer swallow every packet that follows while it waits for one that never comes.
public struct H4Framer {
    public enum Output: Equatable, Sendable {
        case packet(HCIPacket)
        case invalidIndicator(UInt8)
        case implausibleLength(H4PacketType, Int)
    }

    private var buffer: [UInt8] = []
    private var start = 0
    /// The longest ACL payload the other side can send; longer headers are corruption.
    public var maximumACLPayload: Int

    public init(maximumACLPayload: Int = 0xFFFF) {
        self.maximumACLPayload = maximumACLPayload
    }

    public var bufferedByteCount: Int { buffer.count - start }

    public mutating func reset() {
        buffer.removeAll(keepingCapacity: true)
        start = 0
    }

    public mutating func feed(_ bytes: [UInt8]) -> [Output] {
        buffer.append(contentsOf: bytes)
        var outputs: [Output] = []
        while start < buffer.count {
            guard let type = H4PacketType(rawValue: buffer[start]) else {
                outputs.append(.invalidIndicator(buffer[start]))
                start += 1
                continue
            }
            guard let (headerLength, payloadLength) = lengths(of: type) else { break }
            if type == .acl, payloadLength > maximumACLPayload {
                outputs.append(.implausibleLength(type, payloadLength))
                start += 1
                continue
            }
            let total = 1 + headerLength + payloadLength
            guard buffer.count - start >= total else { break }
            let packetBytes = Array(buffer[(start + 1)..<(start + total)])
            start += total
            outputs.append(.packet(Self.decode(type, packetBytes)))
        }
        if start > 4096 || start == buffer.count {
            buffer.removeFirst(start)
            start = 0
        }
        return outputs
    }

    /// Header and payload lengths of the packet at `start`, or nil until the header has arrived.
    private func lengths(of type: H4PacketType) -> (Int, Int)? {
        let available = buffer.count - start - 1
        let at = start + 1
        switch type {
        case .command:
            guard available >= 3 else { return nil }
            return (3, Int(buffer[at + 2]))
        case .event:
            guard available >= 2 else { return nil }
            return (2, Int(buffer[at + 1]))
        case .acl:
            guard available >= 4 else { return nil }
            return (4, Int(buffer[at + 2]) | Int(buffer[at + 3]) << 8)
        case .sco:
            guard available >= 3 else { return nil }
            return (3, Int(buffer[at + 2]))
        case .iso:
            guard available >= 4 else { return nil }
            return (4, (Int(buffer[at + 2]) | Int(buffer[at + 3]) << 8) & 0x3FFF)
        }
    }

    private static func decode(_ type: H4PacketType, _ bytes: [UInt8]) -> HCIPacket {
        switch type {
        case .command:
            return .command(HCICommandPacket(opcode: UInt16(bytes[0]) | UInt16(bytes[1]) << 8, parameters: Array(bytes[3...])))
        case .event:
            return .event(HCIEventPacket(code: bytes[0], parameters: Array(bytes[2...])))
        case .acl:
            let header = UInt16(bytes[0]) | UInt16(bytes[1]) << 8
            return .acl(ACLPacket(handle: header & 0x0FFF, boundary: ACLBoundary(rawValue: UInt8((header >> 12) & 0x3))!,
                                  broadcast: UInt8(header >> 14), data: Array(bytes[4...])))
        case .sco, .iso:
            return .other(type: type, bytes: bytes)
        }
    }
}
