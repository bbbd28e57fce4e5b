/// How a device's address is to be interpreted (Core Vol 6 Part B §1.3; HCI encodings Vol 4 Part E §7.8.5).
public enum AddressType: UInt8, Sendable, Hashable, CaseIterable {
    case `public` = 0x00
    case random = 0x01
    /// A resolved resolvable private address whose identity is public (controller-based privacy).
    case publicIdentity = 0x02
    case randomIdentity = 0x03

    public var isRandom: Bool { self == .random || self == .randomIdentity }
}

/// The sub-kind of a random address, from its two most significant bits (Core Vol 6 Part B §1.3.2).
public enum RandomAddressKind: Sendable, Hashable {
    case `static`
    case resolvablePrivate
    case nonResolvablePrivate
    case reserved
}

/// A 48-bit Bluetooth device address. `bytes` is in wire (little-endian) order; text is most significant first.
public struct BDAddress: Sendable, Hashable, CustomStringConvertible, Comparable {
    public let bytes: [UInt8]

    public init(wire bytes: [UInt8]) {
        precondition(bytes.count == 6, "BD_ADDR is 6 bytes")
        self.bytes = bytes
    }

    /// Parses "AA:BB:CC:DD:EE:FF" (or with dashes); nil when malformed.
    public init?(_ text: String) {
        let parts = text.split(whereSeparator: { $0 == ":" || $0 == "-" })
        guard parts.count == 6 else { return nil }
        var wire: [UInt8] = []
        for part in parts.reversed() {
            guard part.count == 2, let byte = UInt8(part, radix: 16) else { return nil }
            wire.append(byte)
        }
        bytes = wire
    }

    public static let zero = BDAddress(wire: [0, 0, 0, 0, 0, 0])

    public var description: String {
        bytes.reversed().map { byte in
            let digits = String(byte, radix: 16, uppercase: true)
            return digits.count == 1 ? "0" + digits : digits
        }.joined(separator: ":")
    }

    public var randomKind: RandomAddressKind {
        switch bytes[5] >> 6 {
        case 0b11: .static
        case 0b01: .resolvablePrivate
        case 0b00: .nonResolvablePrivate
        default: .reserved
        }
    }

    public static func < (lhs: BDAddress, rhs: BDAddress) -> Bool {
        lhs.bytes.reversed().lexicographicallyPrecedes(rhs.bytes.reversed())
    }
}

/// An address together with its type: what identifies a device on the air.
public struct DeviceAddress: Sendable, Hashable, CustomStringConvertible {
    public var address: BDAddress
    public var type: AddressType

    public init(_ address: BDAddress, type: AddressType) {
        self.address = address
        self.type = type
    }

    /// "AA:BB:CC:DD:EE:FF" (public) or "AA:BB:CC:DD:EE:FF/random".
    public init?(_ text: String) {
        let pieces = text.split(separator: "/", maxSplits: 1)
        guard let first = pieces.first, let address = BDAddress(String(first)) else { return nil }
        var type = AddressType.public
        if pieces.count == 2 {
            switch pieces[1] {
            case "public": type = .public
            case "random": type = .random
            default: return nil
            }
        }
        self.init(address, type: type)
    }

    public var description: String {
        type.isRandom ? "\(address)/random" : address.description
    }
}

/// An address as a person types it, the type perhaps left out ("AA:BB:CC:DD:EE:FF"): what they mean is the device
/// they just heard with it, whichever its type, so a query without one is resolved against the devices heard.
public struct AddressQuery: Sendable, Hashable, CustomStringConvertible {
    public var address: BDAddress
    /// nil: not said.
    public var type: AddressType?

    public init(_ address: BDAddress, type: AddressType?) {
        self.address = address
        self.type = type
    }

    /// "AA:BB:CC:DD:EE:FF", "AA:BB:CC:DD:EE:FF/public" or "AA:BB:CC:DD:EE:FF/random".
    public init?(_ text: String) {
        guard let typed = DeviceAddress(text) else { return nil }
        self.init(typed.address, type: text.contains("/") ? typed.type : nil)
    }

    public var description: String { type.map { DeviceAddress(address, type: $0).description } ?? address.description }
}

/// A static random address (the lab's RANDOM procedures; the identity of a controller with no public address): the
/// two most significant bits set, the rest neither all zeros nor all ones (Core Vol 6 Part B §1.3.2.1).
public func makeStaticRandomAddress(_ random: () -> UInt8) -> BDAddress {
    while true {
        var bytes = (0..<6).map { _ in random() }  // wire order: the last byte is the most significant
        bytes[5] |= 0xC0
        let rest = bytes[0..<5] + [bytes[5] & 0x3F]
        if rest.allSatisfy({ $0 == 0 }) || (rest.dropLast().allSatisfy({ $0 == 0xFF }) && rest.last == 0x3F) { continue }
        return BDAddress(wire: bytes)
    }
}
