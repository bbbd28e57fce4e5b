/// The security manager's cryptographic toolbox (Core Vol 3 Part H §2.2). Every argument and result is
/// most significant byte first, as the spec writes them; SMP PDUs carry values least significant byte first,
/// and the SMP layer reverses them at the wire.
public enum SMPToolbox {
    /// ah, the random address hash (§2.2.2): e(k, 0^104 || r) mod 2^24.
    public static func ah(k: [UInt8], r: [UInt8]) throws(CryptoError) -> [UInt8] {
        try lengths((r, 3))
        return Array(try AES.encrypt(key: k, block: [UInt8](repeating: 0, count: 13) + r).suffix(3))
    }

    /// c1, the legacy confirm value (§2.2.3). `preq` and `pres` are the 7-byte pairing PDUs, most significant byte first
    /// (the wire bytes reversed); `iat`/`rat` the address types (0 public, 1 random); `ia`/`ra` the 6-byte addresses.
    public static func c1(k: [UInt8], r: [UInt8], preq: [UInt8], pres: [UInt8], iat: UInt8, rat: UInt8, ia: [UInt8], ra: [UInt8]) throws(CryptoError) -> [UInt8] {
        try lengths((r, 16), (preq, 7), (pres, 7), (ia, 6), (ra, 6))
        let p1 = pres + preq + [rat & 1, iat & 1]
        let p2 = [UInt8](repeating: 0, count: 4) + ia + ra
        let first = try AES.encrypt(key: k, block: xor(r, p1))
        return try AES.encrypt(key: k, block: xor(first, p2))
    }

    /// s1, the legacy short-term key (§2.2.4): e(k, r1' || r2'), the low 64 bits of each random.
    public static func s1(k: [UInt8], r1: [UInt8], r2: [UInt8]) throws(CryptoError) -> [UInt8] {
        try lengths((r1, 16), (r2, 16))
        return try AES.encrypt(key: k, block: Array(r1[8...]) + Array(r2[8...]))
    }

    /// f4, the Secure Connections confirm value (§2.2.6): AES-CMAC_X(U || V || Z).
    public static func f4(u: [UInt8], v: [UInt8], x: [UInt8], z: UInt8) throws(CryptoError) -> [UInt8] {
        try lengths((u, 32), (v, 32))
        return try AES.cmac(key: x, message: u + v + [z])
    }

    static let f5Salt: [UInt8] = [0x6C, 0x88, 0x83, 0x91, 0xAA, 0xF5, 0xA5, 0x38, 0x60, 0x37, 0x0B, 0xDB, 0x5A, 0x60, 0x83, 0xBE]

    /// f5, the Secure Connections key generation (§2.2.7): MacKey and LTK from the DHKey `w`.
    /// `a1`/`a2` are 7 bytes: the address type then the 6-byte address.
    public static func f5(w: [UInt8], n1: [UInt8], n2: [UInt8], a1: [UInt8], a2: [UInt8]) throws(CryptoError) -> (macKey: [UInt8], ltk: [UInt8]) {
        try lengths((w, 32), (n1, 16), (n2, 16), (a1, 7), (a2, 7))
        let t = try AES.cmac(key: f5Salt, message: w)
        let body: [UInt8] = [0x62, 0x74, 0x6C, 0x65] + n1 + n2 + a1 + a2 + [0x01, 0x00]
        return (try AES.cmac(key: t, message: [0] + body), try AES.cmac(key: t, message: [1] + body))
    }

    /// f6, the Secure Connections check value (§2.2.8): AES-CMAC_W(N1 || N2 || R || IOcap || A1 || A2).
    public static func f6(w: [UInt8], n1: [UInt8], n2: [UInt8], r: [UInt8], ioCap: [UInt8], a1: [UInt8], a2: [UInt8]) throws(CryptoError) -> [UInt8] {
        try lengths((n1, 16), (n2, 16), (r, 16), (ioCap, 3), (a1, 7), (a2, 7))
        return try AES.cmac(key: w, message: n1 + n2 + r + ioCap + a1 + a2)
    }

    /// g2, the numeric comparison value (§2.2.9): AES-CMAC_X(U || V || Y) mod 2^32; show it mod 10^6.
    public static func g2(u: [UInt8], v: [UInt8], x: [UInt8], y: [UInt8]) throws(CryptoError) -> UInt32 {
        try lengths((u, 32), (v, 32), (y, 16))
        let mac = try AES.cmac(key: x, message: u + v + y)
        return mac.suffix(4).reduce(0) { $0 << 8 | UInt32($1) }
    }

    /// h6, link key conversion (§2.2.10): AES-CMAC_W(keyID).
    public static func h6(w: [UInt8], keyID: [UInt8]) throws(CryptoError) -> [UInt8] {
        try lengths((keyID, 4))
        return try AES.cmac(key: w, message: keyID)
    }

    /// h7, link key conversion with a salt (§2.2.11): AES-CMAC_SALT(W).
    public static func h7(salt: [UInt8], w: [UInt8]) throws(CryptoError) -> [UInt8] {
        try AES.cmac(key: salt, message: w)
    }

    private static func lengths(_ checks: ([UInt8], Int)...) throws(CryptoError) {
        for (bytes, count) in checks where bytes.count != count { throw .invalidLength(expected: count, got: bytes.count) }
    }

    private static func xor(_ a: [UInt8], _ b: [UInt8]) -> [UInt8] { zip(a, b).map { $0 ^ $1 } }
}
