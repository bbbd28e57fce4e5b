import BerylCore

/// IO capabilities (Core Vol 3 Part H §2.3.2).
public enum IOCapability: UInt8, Sendable, CaseIterable, CustomStringConvertible {
    case displayOnly = 0x00
    case displayYesNo = 0x01
    case keyboardOnly = 0x02
    case noInputNoOutput = 0x03
    case keyboardDisplay = 0x04

    public init?(name: String) {
        guard let match = Self.allCases.first(where: { $0.description == name }) else { return nil }
        self = match
    }

    public var description: String {
        switch self {
        case .displayOnly: "display-only"
        case .displayYesNo: "display-yes-no"
        case .keyboardOnly: "keyboard-only"
        case .noInputNoOutput: "no-input-no-output"
        case .keyboardDisplay: "keyboard-display"
        }
    }
}

/// The AuthReq field (Core Vol 3 Part H §3.5.1).
public struct AuthRequirements: OptionSet, Sendable, Hashable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    public static let bonding = AuthRequirements(rawValue: 0x01)
    public static let mitm = AuthRequirements(rawValue: 0x04)
    public static let secureConnections = AuthRequirements(rawValue: 0x08)
    public static let keypress = AuthRequirements(rawValue: 0x10)
    public static let ct2 = AuthRequirements(rawValue: 0x20)
}

/// Which keys each side hands over after encryption (Core Vol 3 Part H §3.6.1).
public struct KeyDistribution: OptionSet, Sendable, Hashable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    public static let encryptionKey = KeyDistribution(rawValue: 0x01)
    public static let identityKey = KeyDistribution(rawValue: 0x02)
    public static let signingKey = KeyDistribution(rawValue: 0x04)
    public static let linkKey = KeyDistribution(rawValue: 0x08)
}

/// Pairing Failed reasons (Core Vol 3 Part H §3.5.5, Table 3.7).
public enum PairingFailure: UInt8, Error, Sendable, CaseIterable {
    case passkeyEntryFailed = 0x01
    case oobNotAvailable = 0x02
    case authenticationRequirements = 0x03
    case confirmValueFailed = 0x04
    case pairingNotSupported = 0x05
    case encryptionKeySize = 0x06
    case commandNotSupported = 0x07
    case unspecifiedReason = 0x08
    case repeatedAttempts = 0x09
    case invalidParameters = 0x0A
    case dhKeyCheckFailed = 0x0B
    case numericComparisonFailed = 0x0C
    case brEdrPairingInProgress = 0x0D
    case crossTransportKeyDerivationNotAllowed = 0x0E
    case keyRejected = 0x0F
}

/// The pairing feature exchange: what a Pairing Request or Response carries (Core Vol 3 Part H §3.5.1–3.5.2).
public struct PairingFeatures: Equatable, Sendable {
    public var ioCapability: IOCapability
    public var oobDataPresent: Bool
    public var authRequirements: AuthRequirements
    public var maxKeySize: UInt8
    public var initiatorKeys: KeyDistribution
    public var responderKeys: KeyDistribution

    public init(ioCapability: IOCapability, oobDataPresent: Bool = false, authRequirements: AuthRequirements, maxKeySize: UInt8 = 16,
                initiatorKeys: KeyDistribution, responderKeys: KeyDistribution) {
        self.ioCapability = ioCapability
        self.oobDataPresent = oobDataPresent
        self.authRequirements = authRequirements
        self.maxKeySize = maxKeySize
        self.initiatorKeys = initiatorKeys
        self.responderKeys = responderKeys
    }

    var fields: [UInt8] {
        [ioCapability.rawValue, oobDataPresent ? 1 : 0, authRequirements.rawValue, maxKeySize, initiatorKeys.rawValue, responderKeys.rawValue]
    }

    /// f6's IOcap: AuthReq, OOB flag, IO capability, most significant first (Core Vol 3 Part H §2.2.8).
    var ioCapField: [UInt8] { [authRequirements.rawValue, oobDataPresent ? 1 : 0, ioCapability.rawValue] }
}

/// SMP commands (Core Vol 3 Part H §3.3, §3.5, §3.6). Values are kept in wire (least significant first) order.
public enum SMPPDU: Equatable, Sendable {
    case pairingRequest(PairingFeatures)
    case pairingResponse(PairingFeatures)
    case pairingConfirm([UInt8])
    case pairingRandom([UInt8])
    case pairingFailed(PairingFailure)
    case encryptionInformation(ltk: [UInt8])
    case centralIdentification(ediv: UInt16, rand: [UInt8])
    case identityInformation(irk: [UInt8])
    case identityAddressInformation(DeviceAddress)
    case signingInformation(csrk: [UInt8])
    case securityRequest(AuthRequirements)
    case pairingPublicKey(x: [UInt8], y: [UInt8])
    case pairingDHKeyCheck([UInt8])
    case keypressNotification(UInt8)

    public enum DecodeFailure: Error, Equatable, Sendable {
        case empty
        case unknownCommand(UInt8)
        /// Wrong length, or a field outside its range: Pairing Failed with Invalid Parameters.
        case invalidParameters(UInt8)
    }

    public var opcode: UInt8 {
        switch self {
        case .pairingRequest: 0x01
        case .pairingResponse: 0x02
        case .pairingConfirm: 0x03
        case .pairingRandom: 0x04
        case .pairingFailed: 0x05
        case .encryptionInformation: 0x06
        case .centralIdentification: 0x07
        case .identityInformation: 0x08
        case .identityAddressInformation: 0x09
        case .signingInformation: 0x0A
        case .securityRequest: 0x0B
        case .pairingPublicKey: 0x0C
        case .pairingDHKeyCheck: 0x0D
        case .keypressNotification: 0x0E
        }
    }

    public var encoded: [UInt8] {
        var w = ByteWriter()
        w.u8(opcode)
        switch self {
        case .pairingRequest(let features), .pairingResponse(let features): w.append(features.fields)
        case .pairingConfirm(let value), .pairingRandom(let value), .pairingDHKeyCheck(let value): w.append(value)
        case .pairingFailed(let reason): w.u8(reason.rawValue)
        case .encryptionInformation(let key), .identityInformation(let key), .signingInformation(let key): w.append(key)
        case .centralIdentification(let ediv, let rand):
            w.u16(ediv)
            w.append(rand)
        case .identityAddressInformation(let address):
            w.u8(address.type.isRandom ? 1 : 0)
            w.append(address.address.bytes)
        case .securityRequest(let auth): w.u8(auth.rawValue)
        case .pairingPublicKey(let x, let y):
            w.append(x)
            w.append(y)
        case .keypressNotification(let kind): w.u8(kind)
        }
        return w.bytes
    }

    /// Command lengths (Core Vol 3 Part H §3.5–3.6): each has exactly one.
    private static let lengths: [UInt8: Int] = [
        0x01: 6, 0x02: 6, 0x03: 16, 0x04: 16, 0x05: 1, 0x06: 16, 0x07: 10, 0x08: 16, 0x09: 7, 0x0A: 16, 0x0B: 1, 0x0C: 64, 0x0D: 16, 0x0E: 1,
    ]

    public static func decode(_ bytes: [UInt8]) -> Result<SMPPDU, DecodeFailure> {
        guard let opcode = bytes.first else { return .failure(.empty) }
        guard let length = lengths[opcode] else { return .failure(.unknownCommand(opcode)) }
        let body = Array(bytes.dropFirst())
        guard body.count == length else { return .failure(.invalidParameters(opcode)) }
        switch opcode {
        case 0x01, 0x02:
            // Key sizes outside 7–16 and reserved IO capabilities are invalid parameters (§3.5.1).
            guard let io = IOCapability(rawValue: body[0]), body[1] <= 1, (7...16).contains(body[3]) else { return .failure(.invalidParameters(opcode)) }
            let features = PairingFeatures(ioCapability: io, oobDataPresent: body[1] == 1, authRequirements: AuthRequirements(rawValue: body[2]),
                                           maxKeySize: body[3], initiatorKeys: KeyDistribution(rawValue: body[4] & 0x0F),
                                           responderKeys: KeyDistribution(rawValue: body[5] & 0x0F))
            return .success(opcode == 0x01 ? .pairingRequest(features) : .pairingResponse(features))
        case 0x03: return .success(.pairingConfirm(body))
        case 0x04: return .success(.pairingRandom(body))
        case 0x05:
            // An unknown reason is still a failure; report it as unspecified.
            return .success(.pairingFailed(PairingFailure(rawValue: body[0]) ?? .unspecifiedReason))
        case 0x06: return .success(.encryptionInformation(ltk: body))
        case 0x07: return .success(.centralIdentification(ediv: UInt16(body[0]) | UInt16(body[1]) << 8, rand: Array(body[2...])))
        case 0x08: return .success(.identityInformation(irk: body))
        case 0x09:
            guard body[0] <= 1 else { return .failure(.invalidParameters(opcode)) }
            return .success(.identityAddressInformation(DeviceAddress(BDAddress(wire: Array(body[1...])), type: body[0] == 1 ? .random : .public)))
        case 0x0A: return .success(.signingInformation(csrk: body))
        case 0x0B: return .success(.securityRequest(AuthRequirements(rawValue: body[0])))
        case 0x0C: return .success(.pairingPublicKey(x: Array(body[0..<32]), y: Array(body[32...])))
        case 0x0D: return .success(.pairingDHKeyCheck(body))
        default: return .success(.keypressNotification(body[0]))
        }
    }
}
