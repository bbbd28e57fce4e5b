/// A Bluetooth UUID. Stored as the full 128-bit value; 16- and 32-bit forms are aliases onto the
/// Bluetooth Base UUID 00000000-0000-1000-8000-00805F9B34FB (Core Vol 3 Part B §2.5.1).
public struct BluetoothUUID: Sendable, Hashable, CustomStringConvertible {
    /// Big-endian (text order) 16 bytes.
    public let uuid128: [UInt8]

    static let baseSuffix: [UInt8] = [0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0x80, 0x5F, 0x9B, 0x34, 0xFB]

    public init(_ short: UInt16) {
        self.init(uint32: UInt32(short))
    }

    public init(uint32 value: UInt32) {
        uuid128 = [UInt8(value >> 24), UInt8((value >> 16) & 0xFF), UInt8((value >> 8) & 0xFF), UInt8(value & 0xFF)] + Self.baseSuffix
    }

    public init?(bigEndian bytes: [UInt8]) {
        guard bytes.count == 16 else { return nil }
        uuid128 = bytes
    }

    /// Decodes the little-endian ATT/GAP encoding of 2, 4 or 16 bytes.
    public init?(wire bytes: [UInt8]) {
        switch bytes.count {
        case 2: self.init(UInt16(bytes[0]) | UInt16(bytes[1]) << 8)
        case 4: self.init(uint32: bytes.reversed().reduce(0) { $0 << 8 | UInt32($1) })
        case 16: self.init(bigEndian: bytes.reversed())
        default: return nil
        }
    }

    /// Accepts "180D", "0000180D" and "0000180D-0000-1000-8000-00805F9B34FB", in any case.
    public init?(_ text: String) {
        let hex = text.filter { $0 != "-" }
        switch (text.count, hex.count) {
        case (4, 4):
            guard let value = UInt16(hex, radix: 16) else { return nil }
            self.init(value)
        case (8, 8):
            guard let value = UInt32(hex, radix: 16) else { return nil }
            self.init(uint32: value)
        case (36, 32):
            let dashes = text.enumerated().filter { $0.element == "-" }.map(\.offset)
            guard dashes == [8, 13, 18, 23], let bytes = Hex.decode(hex) else { return nil }
            self.init(bigEndian: bytes)
        default:
            return nil
        }
    }

    public var isBluetoothBase: Bool { Array(uuid128[4...]) == Self.baseSuffix }

    /// The 16-bit alias, when this UUID has one.
    public var uuid16: UInt16? {
        guard isBluetoothBase, uuid128[0] == 0, uuid128[1] == 0 else { return nil }
        return UInt16(uuid128[2]) << 8 | UInt16(uuid128[3])
    }

    public var uuid32: UInt32? {
        guard isBluetoothBase else { return nil }
        return uuid128[0..<4].reduce(0) { $0 << 8 | UInt32($1) }
    }

    /// The shortest encoding ATT may use: 2 bytes for 16-bit aliases, otherwise 16 (ATT has no 32-bit form, Vol 3 Part F §3.2.1).
    public var attWire: [UInt8] {
        if let short = uuid16 { return [UInt8(short & 0xFF), UInt8(short >> 8)] }
        return uuid128.reversed()
    }

    public var wire128: [UInt8] { uuid128.reversed() }

    /// Short form for Bluetooth-base UUIDs ("180D"), the full form otherwise, upper case as Core Bluetooth prints.
    public var description: String {
        if let short = uuid16 { return hex(short, digits: 4) }
        if let value = uuid32 { return hex(value, digits: 8) }
        return fullString
    }

    public var fullString: String {
        let text = Hex.encode(uuid128).uppercased()
        let characters = Array(text)
        return [0..<8, 8..<12, 12..<16, 16..<20, 20..<32].map { String(characters[$0]) }.joined(separator: "-")
    }

    private func hex<T: BinaryInteger>(_ value: T, digits: Int) -> String {
        let text = String(value, radix: 16, uppercase: true)
        return String(repeating: "0", count: max(0, digits - text.count)) + text
    }
}

/// Written as its text (`"180D"`, or the full form), so that stored records read as Core Bluetooth prints them.
extension BluetoothUUID: Codable {
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let text = try container.decode(String.self)
        guard let uuid = BluetoothUUID(text) else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "not a Bluetooth UUID: \(text)")
        }
        self = uuid
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}

extension BluetoothUUID {
    /// Every string as a UUID, or nil when any one is not: a request's UUID list is taken whole or refused.
    public static func list(_ strings: [String]) -> [BluetoothUUID]? {
        let parsed = strings.compactMap(BluetoothUUID.init)
        return parsed.count == strings.count ? parsed : nil
    }
}
