/// ATT data signing (Core Vol 3 Part H §2.4.5, Part C §10.4.1): the 12-octet Authentication Signature of a Signed
/// Write Command, SignCounter followed by the 64 most significant bits of AES-CMAC_CSRK(m || SignCounter). Unlike the
/// toolbox, everything here is in wire order (least significant byte first), as the PDU and the SMP Signing
/// Information carry it.
public enum DataSigning {
    public static func signature(csrk: [UInt8], message: [UInt8], counter: UInt32) throws(CryptoError) -> [UInt8] {
        let counterBytes = (0..<4).map { UInt8(truncatingIfNeeded: counter >> (8 * UInt32($0))) }
        // The algorithm reads m as one number, most significant octet first.
        let mac = try AES.cmac(key: Array(csrk.reversed()), message: Array((message + counterBytes).reversed()))
        return counterBytes + Array(mac.prefix(8).reversed())
    }

    /// Whether `signature` (the PDU's last 12 octets) signs `message` with this CSRK.
    public static func verify(csrk: [UInt8], message: [UInt8], signature: [UInt8]) -> (valid: Bool, counter: UInt32) {
        guard signature.count == 12 else { return (false, 0) }
        let counter = signature.prefix(4).enumerated().reduce(UInt32(0)) { $0 | UInt32($1.element) << (8 * UInt32($1.offset)) }
        guard let expected = try? Self.signature(csrk: csrk, message: message, counter: counter) else { return (false, counter) }
        // Constant time: a forged MAC learns nothing from where it first differs.
        let difference = zip(expected, signature).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) }
        return (difference == 0, counter)
    }
}
