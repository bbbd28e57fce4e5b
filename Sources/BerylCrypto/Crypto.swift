import CBerylCrypto

/// Why a cryptographic operation could not be done; libcrypto's own failures are not expected and are reported, never ignored.
public enum CryptoError: Error, Equatable, Sendable {
    case invalidLength(expected: Int, got: Int)
    /// The peer's public key is not a point on P-256 (Core Vol 3 Part H §2.3.5.6.1: pairing fails with DHKey Check Failed).
    case invalidPublicKey
    case libraryFailure(String)
}

/// AES-128 and AES-CMAC through libcrypto. Bytes are in the algorithms' order (most significant first).
public enum AES {
    public static func encrypt(key: [UInt8], block: [UInt8]) throws(CryptoError) -> [UInt8] {
        try check(key, 16)
        try check(block, 16)
        var output = [UInt8](repeating: 0, count: 16)
        guard beryl_aes128_encrypt_block(key, block, &output) == 0 else { throw .libraryFailure("AES-128") }
        return output
    }

    public static func cmac(key: [UInt8], message: [UInt8]) throws(CryptoError) -> [UInt8] {
        try check(key, 16)
        var output = [UInt8](repeating: 0, count: 16)
        guard beryl_aes_cmac(key, message, message.count, &output) == 0 else { throw .libraryFailure("AES-CMAC") }
        return output
    }
}

/// A P-256 key pair for LE Secure Connections (Core Vol 3 Part H §2.3.5.6). Coordinates are most significant byte first.
public struct P256KeyPair: Sendable {
    public let privateKey: [UInt8]
    public let publicX: [UInt8]
    public let publicY: [UInt8]

    public static func generate() throws(CryptoError) -> P256KeyPair {
        var scalar = [UInt8](repeating: 0, count: 32), x = scalar, y = scalar
        guard beryl_p256_generate(&scalar, &x, &y) == 0 else { throw .libraryFailure("P-256 key generation") }
        return P256KeyPair(privateKey: scalar, publicX: x, publicY: y)
    }

    public init(privateKey: [UInt8]) throws(CryptoError) {
        try check(privateKey, 32)
        var x = [UInt8](repeating: 0, count: 32), y = x
        guard beryl_p256_public_from_private(privateKey, &x, &y) == 0 else { throw .libraryFailure("P-256 public key") }
        self.init(privateKey: privateKey, publicX: x, publicY: y)
    }

    private init(privateKey: [UInt8], publicX: [UInt8], publicY: [UInt8]) {
        self.privateKey = privateKey
        self.publicX = publicX
        self.publicY = publicY
    }

    /// The DHKey: the X coordinate of the shared point, most significant byte first.
    public func sharedSecret(peerX: [UInt8], peerY: [UInt8]) throws(CryptoError) -> [UInt8] {
        try check(peerX, 32)
        try check(peerY, 32)
        var shared = [UInt8](repeating: 0, count: 32)
        guard beryl_p256_ecdh(privateKey, peerX, peerY, &shared) == 0 else { throw .invalidPublicKey }
        return shared
    }
}

public enum SecureRandom {
    public static func bytes(_ count: Int) -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: count)
        // RAND_bytes only fails when the system has no entropy source at all; a predictable key would be worse than stopping.
        precondition(beryl_random_bytes(&buffer, count) == 0, "no entropy source for key generation")
        return buffer
    }
}

private func check(_ bytes: [UInt8], _ count: Int) throws(CryptoError) {
    guard bytes.count == count else { throw .invalidLength(expected: count, got: bytes.count) }
}
