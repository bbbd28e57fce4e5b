import BerylCore
import BerylCrypto

/// Resolvable private addresses (Core Vol 6 Part B §1.3.2.3): the low 24 bits are ah(IRK, prand).
public enum AddressResolution {
    /// Whether `address` was made from `irk` (wire order).
    public static func resolves(_ address: BDAddress, irk: [UInt8]) -> Bool {
        guard address.randomKind == .resolvablePrivate, irk.count == 16 else { return false }
        let hash = Array(address.bytes[0..<3].reversed())
        let prand = Array(address.bytes[3..<6].reversed())
        return (try? SMPToolbox.ah(k: irk.reversed(), r: prand)) == hash
    }

    /// A fresh resolvable private address for `irk`.
    public static func make(irk: [UInt8], random: [UInt8] = SecureRandom.bytes(3)) throws -> BDAddress {
        var prand = Array(random.prefix(3))
        prand[0] = (prand[0] & 0x3F) | 0x40
        let hash = try SMPToolbox.ah(k: irk.reversed(), r: prand)
        return BDAddress(wire: hash.reversed() + prand.reversed())
    }
}
