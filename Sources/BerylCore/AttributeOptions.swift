/// Core Bluetooth's CBCharacteristicProperties: the declaration's eight bits (Core Vol 3 Part G §3.3.1.1) and two of
/// Core Bluetooth's own above them, which a published characteristic carries as notify and indicate on the air with a
/// Client Characteristic Configuration only an encrypted link may write.
public struct CharacteristicProperties: OptionSet, Sendable, Hashable {
    public let rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }
    /// As a characteristic declaration carries them.
    public init(declared byte: UInt8) { rawValue = UInt16(byte) }
    public static let broadcast = CharacteristicProperties(rawValue: 0x01)
    public static let read = CharacteristicProperties(rawValue: 0x02)
    public static let writeWithoutResponse = CharacteristicProperties(rawValue: 0x04)
    public static let write = CharacteristicProperties(rawValue: 0x08)
    public static let notify = CharacteristicProperties(rawValue: 0x10)
    public static let indicate = CharacteristicProperties(rawValue: 0x20)
    public static let authenticatedSignedWrites = CharacteristicProperties(rawValue: 0x40)
    public static let extendedProperties = CharacteristicProperties(rawValue: 0x80)
    public static let notifyEncryptionRequired = CharacteristicProperties(rawValue: 0x100)
    public static let indicateEncryptionRequired = CharacteristicProperties(rawValue: 0x200)

    /// The declaration's byte.
    public var declared: UInt8 {
        UInt8(truncatingIfNeeded: rawValue) | (contains(.notifyEncryptionRequired) ? 0x10 : 0) | (contains(.indicateEncryptionRequired) ? 0x20 : 0)
    }
}

public struct AttributePermissions: OptionSet, Sendable, Hashable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    public static let readable = AttributePermissions(rawValue: 0x01)
    public static let writeable = AttributePermissions(rawValue: 0x02)
    public static let readEncryptionRequired = AttributePermissions(rawValue: 0x04)
    public static let writeEncryptionRequired = AttributePermissions(rawValue: 0x08)
    public static let readAuthenticationRequired = AttributePermissions(rawValue: 0x10)
    public static let writeAuthenticationRequired = AttributePermissions(rawValue: 0x20)
}
