import BerylCore

/// The btsnoop capture format Wireshark and btmon read: a 16-byte header, then one record per packet, all big-endian.
public enum BTSnoop {
    /// Datalink 1002: HCI UART (H4) — each record keeps its packet-type byte.
    public static let header: [UInt8] = Array("btsnoop".utf8) + [0] + [0, 0, 0, 1] + [0, 0, 0x03, 0xEA]
    /// Microseconds from 0 AD (what btsnoop counts from) to the Unix epoch.
    static let epochOffset: UInt64 = 0x00DC_DDB3_0F2F_8000

    public static func record(h4 packet: [UInt8], received: Bool, unixMicroseconds: UInt64) -> [UInt8] {
        let type = packet.first ?? 0
        let isCommandOrEvent = type == H4PacketType.command.rawValue || type == H4PacketType.event.rawValue
        let flags: UInt32 = (received ? 1 : 0) | (isCommandOrEvent ? 2 : 0)
        var bytes: [UInt8] = []
        for value in [UInt32(packet.count), UInt32(packet.count), flags, 0] { bytes += bigEndian(UInt64(value), count: 4) }
        bytes += bigEndian(unixMicroseconds &+ epochOffset, count: 8)
        return bytes + packet
    }

    private static func bigEndian(_ value: UInt64, count: Int) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: value >> (8 * UInt64(count - 1 - $0))) }
    }

    /// One line per packet, in btmon's spirit: direction, kind, name, length.
    public static func describe(h4 packet: [UInt8], received: Bool) -> String {
        let arrow = received ? ">" : "<"
        guard let type = packet.first.flatMap(H4PacketType.init(rawValue:)) else { return "\(arrow) unknown packet \(Hex.encode(packet))" }
        switch type {
        case .command where packet.count >= 4:
            let opcode = UInt16(packet[1]) | UInt16(packet[2]) << 8
            let name = HCIOpcode(rawValue: opcode).map { "\($0)" } ?? "vendor or unknown"
            return "\(arrow) HCI Command: \(name) (0x\(String(opcode >> 10, radix: 16))|0x\(String(opcode & 0x3FF, radix: 16))) plen \(packet[3])"
        case .event where packet.count >= 3:
            let name = HCIEventCode(rawValue: packet[1]).map { "\($0)" } ?? "event"
            var text = "\(arrow) HCI Event: \(name) (0x\(String(packet[1], radix: 16))) plen \(packet[2])"
            if packet[1] == HCIEventCode.commandComplete.rawValue, packet.count >= 6 {
                let opcode = UInt16(packet[4]) | UInt16(packet[5]) << 8
                text += " for \(HCIOpcode(rawValue: opcode).map { "\($0)" } ?? "0x\(String(opcode, radix: 16))")"
                if packet.count >= 7 { text += " status 0x\(String(packet[6], radix: 16))" }
            } else if packet[1] == HCIEventCode.leMeta.rawValue, packet.count >= 4 {
                text += " subevent \(LESubevent(rawValue: packet[3]).map { "\($0)" } ?? "0x\(String(packet[3], radix: 16))")"
            }
            return text
        case .acl where packet.count >= 5:
            let header = UInt16(packet[1]) | UInt16(packet[2]) << 8
            return "\(arrow) ACL Data \(received ? "RX" : "TX"): handle \(header & 0x0FFF) flags 0x\(String(header >> 12, radix: 16)) dlen \(packet.count - 5)"
        default:
            return "\(arrow) \(type) \(packet.count - 1) bytes"
        }
    }
}
