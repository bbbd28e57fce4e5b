import BerylCore
import BerylCrypto

/// What this side offers in pairing.
public struct SecurityConfiguration: Equatable, Sendable {
    public var ioCapability: IOCapability
    public var bondable: Bool
    public var requireMITM: Bool
    /// Refuse legacy pairing (Secure Connections Only mode, Core Vol 3 Part C §10.2.4).
    public var secureConnectionsOnly: Bool
    public var maxKeySize: UInt8
    /// Off only to behave as a pre-4.2 device (tests, and labs checking a peer's legacy pairing).
    public var secureConnections: Bool

    public init(ioCapability: IOCapability = .noInputNoOutput, bondable: Bool = true, requireMITM: Bool = false,
                secureConnectionsOnly: Bool = false, maxKeySize: UInt8 = 16, secureConnections: Bool = true) {
        self.secureConnections = secureConnections
        self.ioCapability = ioCapability
        self.bondable = bondable
        self.requireMITM = requireMITM
        self.secureConnectionsOnly = secureConnectionsOnly
        self.maxKeySize = maxKeySize
    }

    var authRequirements: AuthRequirements {
        var auth: AuthRequirements = secureConnections ? [.secureConnections, .ct2] : []
        if bondable { auth.insert(.bonding) }
        if requireMITM || ioCapability != .noInputNoOutput { auth.insert(.mitm) }
        return auth
    }
}

/// This device's identity for key distribution: its identity address and IRK (wire order).
public struct LocalIdentity: Equatable, Sendable {
    public var address: DeviceAddress
    public var irk: [UInt8]

    public init(address: DeviceAddress, irk: [UInt8]) {
        self.address = address
        self.irk = irk
    }
}

/// What a successful pairing leaves behind; keys are in wire (least significant first) order, as HCI takes them.
public struct PairingResult: Equatable, Sendable {
    public var secureConnections: Bool
    public var authenticated: Bool
    public var keySize: UInt8
    public var bonded: Bool
    /// The key for encrypting as central: the peer's distributed LTK (legacy) or the shared one (Secure Connections).
    public var peerLTK: [UInt8]?
    public var peerEDIV: UInt16 = 0
    public var peerRand: [UInt8] = [UInt8](repeating: 0, count: 8)
    /// The key the peer will use when it is central: ours (legacy) or the shared one.
    public var localLTK: [UInt8]?
    public var localEDIV: UInt16 = 0
    public var localRand: [UInt8] = [UInt8](repeating: 0, count: 8)
    public var peerIRK: [UInt8]?
    public var peerIdentity: DeviceAddress?
    public var peerCSRK: [UInt8]?
    public var localCSRK: [UInt8]?
}

/// Something the user must do or see (the pairing agent's prompts).
public enum PairingPrompt: Equatable, Sendable {
    case displayPasskey(UInt32)
    case enterPasskey
    case confirmNumber(UInt32)
    /// Just Works with the user's consent (only when `asksJustWorksConsent`): nothing to compare, only yes or no.
    case confirmPairing
}

public enum SMPFailure: Equatable, Sendable, Error {
    /// We refused, with the reason sent to the peer.
    case local(PairingFailure)
    /// The peer sent Pairing Failed.
    case remote(PairingFailure)
    /// 30 seconds without the next step (Core Vol 3 Part H §3.4): no more SMP on this link.
    case timeout
}

public enum SMPOutput: Equatable, Sendable {
    case send([UInt8])
    /// Central: start (or refresh) encryption with this key (HCI LE Enable Encryption).
    case startEncryption(ltk: [UInt8], ediv: UInt16, rand: [UInt8])
    case prompt(PairingPrompt)
    /// The peripheral sent a Security Request: the central's shell encrypts with a stored key or pairs.
    case securityRequested(AuthRequirements)
    case completed(PairingResult)
    case failed(SMPFailure)
    case log(String)
}
