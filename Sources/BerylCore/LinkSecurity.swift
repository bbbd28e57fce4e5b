/// A link's security as the attribute server checks it and the security manager reports it (Core Vol 3 Part C
/// §10.2): shared by GATT and SMP, which do not depend on each other.
public struct LinkSecurity: Equatable, Sendable {
    public var encrypted = false
    public var authenticated = false
    /// Whether keys exist for this peer: decides Insufficient Encryption (re-encrypt) over Insufficient Authentication (pair).
    public var bonded = false

    public init(encrypted: Bool = false, authenticated: Bool = false, bonded: Bool = false) {
        self.encrypted = encrypted
        self.authenticated = authenticated
        self.bonded = bonded
    }
}

/// What verifies a bonded peer's signed writes: the CSRK it distributed and the last SignCounter accepted from it.
public struct PeerSigning: Equatable, Sendable {
    public var csrk: [UInt8]
    public var lastCounter: UInt32?
    /// The bond came from authenticated pairing: its signatures satisfy authentication as well as encryption.
    public var authenticated: Bool

    public init(csrk: [UInt8], lastCounter: UInt32?, authenticated: Bool) {
        self.csrk = csrk
        self.lastCounter = lastCounter
        self.authenticated = authenticated
    }
}
