import BerylCore
import Foundation

/// Core Bluetooth's CBUUID API on BluetoothUUID.
extension BluetoothUUID {
    /// "180D", "0000180D" or a full UUID string. As `CBUUID(string:)`, a string that is not a UUID is a programming
    /// error and stops the program; `BluetoothUUID(_:)` is the failable form for text from outside.
    public init(string: String) {
        guard let parsed = BluetoothUUID(string) else { preconditionFailure("BluetoothUUID(string:): '\(string)' is not a Bluetooth UUID") }
        self = parsed
    }

    /// Two, four or sixteen bytes, most significant first, as `CBUUID(data:)` takes them.
    public init(data: Data) {
        let bytes = Array(data)
        switch bytes.count {
        case 2: self.init(UInt16(bytes[0]) << 8 | UInt16(bytes[1]))
        case 4: self.init(uint32: bytes.reduce(0) { $0 << 8 | UInt32($1) })
        case 16: self.init(bigEndian: bytes)!
        default: preconditionFailure("BluetoothUUID(data:): a UUID is 2, 4 or 16 bytes, not \(bytes.count)")
        }
    }

    public init(nsuuid: UUID) {
        let value = nsuuid.uuid
        self.init(bigEndian: [value.0, value.1, value.2, value.3, value.4, value.5, value.6, value.7,
                              value.8, value.9, value.10, value.11, value.12, value.13, value.14, value.15])!
    }

    /// The short form for a Bluetooth-base alias ("180D"), the full one otherwise, as `CBUUID.uuidString`.
    public var uuidString: String { description }

    /// The shortest big-endian form: two bytes for a 16-bit alias, four for a 32-bit one, sixteen otherwise.
    public var data: Data {
        if uuid16 != nil { return Data(uuid128[2..<4]) }
        if uuid32 != nil { return Data(uuid128[0..<4]) }
        return Data(uuid128)
    }
}
