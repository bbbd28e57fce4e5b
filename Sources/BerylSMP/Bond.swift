import BerylCore

/// What Beryl keeps about a bonded peer (Core Vol 3 Part H §2.4.1, Part C §9.4): keys in wire order.
public struct Bond: Equatable, Sendable {
    /// The peer's identity address: how it is known across address changes (its public or static address).
    public var identity: DeviceAddress
    public var irk: [UInt8]?
    public var peerLTK: [UInt8]?
    public var peerEDIV: UInt16
    public var peerRand: [UInt8]
    public var localLTK: [UInt8]?
    public var localEDIV: UInt16
    public var localRand: [UInt8]
    /// The peer's Connection Signature Resolving Key: verifies its signed writes to us.
    public var csrk: [UInt8]?
    /// The CSRK we distributed: signs our signed writes to the peer.
    public var localCSRK: [UInt8]?
    public var authenticated: Bool
    public var secureConnections: Bool
    public var keySize: UInt8
    /// The address the peer paired from, when it differs from its identity (a static random address used beside a
    /// public identity): a reconnection from it is the same peer.
    public var pairedFrom: DeviceAddress?

    public init(identity: DeviceAddress, irk: [UInt8]? = nil, peerLTK: [UInt8]? = nil, peerEDIV: UInt16 = 0, peerRand: [UInt8] = [UInt8](repeating: 0, count: 8),
                localLTK: [UInt8]? = nil, localEDIV: UInt16 = 0, localRand: [UInt8] = [UInt8](repeating: 0, count: 8), csrk: [UInt8]? = nil,
                localCSRK: [UInt8]? = nil, authenticated: Bool, secureConnections: Bool, keySize: UInt8 = 16, pairedFrom: DeviceAddress? = nil) {
        self.localCSRK = localCSRK
        self.pairedFrom = pairedFrom
        self.identity = identity
        self.irk = irk
        self.peerLTK = peerLTK
        self.peerEDIV = peerEDIV
        self.peerRand = peerRand
        self.localLTK = localLTK
        self.localEDIV = localEDIV
        self.localRand = localRand
        self.csrk = csrk
        self.authenticated = authenticated
        self.secureConnections = secureConnections
        self.keySize = keySize
    }

    /// The key to give the controller when this (central) peer starts encryption with `ediv` and `rand`: Secure
    /// Connections keys go with EDIV and Rand zero; a legacy key with the pair we handed out (Core Vol 3 Part H §2.4.2).
    public func localKey(ediv: UInt16, rand: [UInt8]) -> [UInt8]? {
        let matches = secureConnections ? ediv == 0 && rand.allSatisfy { $0 == 0 } : ediv == localEDIV && rand == localRand
        return matches ? localLTK : nil
    }

    /// Whether a device seen at `address` is this peer: the same identity, or a private address its IRK resolves.
    public func matches(_ address: DeviceAddress) -> Bool {
        if address == identity || address == pairedFrom { return true }
        guard address.type.isRandom, let irk else { return false }
        return AddressResolution.resolves(address.address, irk: irk)
    }
}
