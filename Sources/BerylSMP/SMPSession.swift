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

/// One link's Security Manager (Core Vol 3 Part H), sans-IO, in either role: LE Secure Connections (Just Works,
/// Numeric Comparison, Passkey Entry) and LE legacy pairing (Just Works, Passkey Entry), then key distribution.
public final class SMPSession {
    public static let timeout: Duration = .seconds(30)
    public let isInitiator: Bool
    public let configuration: SecurityConfiguration
    public let identity: LocalIdentity
    /// The addresses this connection uses (for c1, f5, f6): ours and the peer's.
    public let localAddress: DeviceAddress
    public let peerAddress: DeviceAddress

    enum Phase: Equatable {
        case idle
        case waitingResponse
        case waitingPublicKey
        case waitingConfirm
        case waitingRandom
        case waitingUser
        case waitingDHKeyCheck
        case waitingEncryption
        case distributingKeys
        case done
        case failed
    }

    private(set) var phase: Phase = .idle
    /// The shell's repeated-attempts verdict for this peer, asked when the peer's Pairing Request arrives.
    public var pairingAllowed: () -> Bool = { true }
    public var isPairing: Bool { ![.idle, .done, .failed].contains(phase) }
    /// Whether the prompt outstanding is a number to confirm (rather than a passkey to type).
    public var wantsNumberConfirmation: Bool { phase == .waitingUser && (method == .numericComparison || method == .justWorks) }
    /// Secure Connections Just Works waits for a yes or no (a `confirmPairing` prompt) where numeric comparison would
    /// show its number (Core Vol 3 Part H §2.3.5.6.2: the same protocol, the number not shown); set for a device-lab
    /// harness that must be able to refuse.
    public var asksJustWorksConsent = false
    public private(set) var isTimedOut = false
    private var deadline: Duration?
    private let random: (Int) -> [UInt8]
    private let makeKeyPair: () throws(CryptoError) -> P256KeyPair

    // Exchanged features and what follows from them.
    private var request: PairingFeatures?
    private var response: PairingFeatures?
    private var secureConnections = false
    private var method: PairingMethod = .justWorks
    private var keySize: UInt8 = 16

    // Secure Connections state (most significant first, as the toolbox takes them).
    private var keyPair: P256KeyPair?
    private var peerX: [UInt8] = []
    private var dhKey: [UInt8] = []
    private var localNonce: [UInt8] = []
    private var peerNonce: [UInt8] = []
    private var peerConfirm: [UInt8]?
    private var passkey: UInt32?
    private var round = 0
    private var userConfirmed = false
    private var peerCheck: [UInt8]?
    private var ltk: [UInt8] = []
    private var macKey: [UInt8] = []

    // Legacy state.
    private var tk: [UInt8] = []
    private var stk: [UInt8] = []

    private var result: PairingResult?
    private var expectedKeys: KeyDistribution = []
    private var pendingIdentityAddress = false

    public init(isInitiator: Bool, configuration: SecurityConfiguration, identity: LocalIdentity, localAddress: DeviceAddress,
                peerAddress: DeviceAddress, random: @escaping (Int) -> [UInt8] = SecureRandom.bytes,
                makeKeyPair: @escaping () throws(CryptoError) -> P256KeyPair = { () throws(CryptoError) in try P256KeyPair.generate() }) {
        self.isInitiator = isInitiator
        self.configuration = configuration
        self.identity = identity
        self.localAddress = localAddress
        self.peerAddress = peerAddress
        self.random = random
        self.makeKeyPair = makeKeyPair
    }

    // MARK: Starting

    private var ourFeatures: PairingFeatures {
        let keys: KeyDistribution = configuration.bondable ? [.encryptionKey, .identityKey, .signingKey] : []
        return PairingFeatures(ioCapability: configuration.ioCapability, authRequirements: configuration.authRequirements,
                               maxKeySize: configuration.maxKeySize, initiatorKeys: keys, responderKeys: keys)
    }

    /// Central: begin pairing (Core Vol 3 Part H §3.5.1).
    public func startPairing(at now: Duration) -> [SMPOutput] {
        // No repeated-attempts wait here: §2.3.6 binds the verifier, which is the peer when we ask.
        guard isInitiator, !isTimedOut, !isPairing else { return [.log("pairing already under way or not ours to start")] }
        reset()
        let features = ourFeatures
        request = features
        response = nil
        phase = .waitingResponse
        deadline = now + Self.timeout
        return [send(.pairingRequest(features))]
    }

    /// Peripheral: ask the central to secure the link (Core Vol 3 Part H §3.6.7).
    public func requestSecurity() -> [SMPOutput] {
        guard !isInitiator, !isTimedOut, !isPairing else { return [] }
        return [send(.securityRequest(configuration.authRequirements))]
    }

    // MARK: Inbound

    public func receive(_ bytes: [UInt8], at now: Duration) -> [SMPOutput] {
        guard !isTimedOut else { return [.log("SMP PDU after the pairing timeout dropped")] }
        let pdu: SMPPDU
        switch SMPPDU.decode(bytes) {
        case .success(let decoded): pdu = decoded
        case .failure(.empty): return [.log("empty SMP PDU dropped")]
        case .failure(.unknownCommand(let code)): return fail(.commandNotSupported, "unknown SMP command 0x\(String(code, radix: 16))")
        case .failure(.invalidParameters(let code)): return fail(.invalidParameters, "malformed SMP command 0x\(String(code, radix: 16))")
        }
        if case .pairingFailed(let reason) = pdu {
            guard isPairing else { return [.log("Pairing Failed (\(reason)) with no pairing under way")] }
            phase = .failed
            deadline = nil
            return [.failed(.remote(reason))]
        }
        if isPairing { deadline = now + Self.timeout }
        do {
            return try handle(pdu, at: now)
        } catch let failure as PairingFailure {
            return fail(failure, "pairing failed: \(failure)")
        } catch {
            // A toolbox failure: the peer's public key was not on the curve, or libcrypto refused.
            return fail(error as? CryptoError == .invalidPublicKey ? .dhKeyCheckFailed : .unspecifiedReason, "pairing failed: \(error)")
        }
    }

    private func handle(_ pdu: SMPPDU, at now: Duration) throws -> [SMPOutput] {
        switch (pdu, phase) {
        case (.securityRequest(let auth), _) where isInitiator:
            return isPairing ? [.log("Security Request during pairing ignored")] : [.securityRequested(auth)]
        case (.pairingRequest(let features), .idle), (.pairingRequest(let features), .done), (.pairingRequest(let features), .failed):
            guard !isInitiator else { throw PairingFailure.commandNotSupported }
            deadline = now + Self.timeout
            return try answerRequest(features)
        case (.pairingResponse(let features), .waitingResponse):
            return try takeResponse(features)
        case (.pairingPublicKey(let x, let y), .waitingPublicKey):
            return try takePublicKey(x: x, y: y)
        case (.pairingConfirm(let value), .waitingConfirm):
            peerConfirm = value.reversed()
            return try afterConfirm()
        case (.pairingRandom(let value), .waitingRandom):
            peerNonce = value.reversed()
            return try afterRandom()
        case (.pairingDHKeyCheck(let value), .waitingDHKeyCheck) where !isInitiator,
             (.pairingDHKeyCheck(let value), .waitingUser) where !isInitiator && (method == .numericComparison || method == .justWorks):
            peerCheck = value.reversed()
            return try responderCheck()
        case (.pairingDHKeyCheck(let value), .waitingDHKeyCheck):
            return try initiatorCheck(value.reversed())
        case (.keypressNotification, _):
            return []
        case (.encryptionInformation, .distributingKeys), (.centralIdentification, .distributingKeys), (.identityInformation, .distributingKeys),
             (.identityAddressInformation, .distributingKeys), (.signingInformation, .distributingKeys):
            return try takeKey(pdu)
        default:
            // Out of order (Core Vol 3 Part H §3.5.5 leaves "unexpected" to Unspecified Reason).
            guard isPairing else { return [.log("SMP \(pdu.opcode) with no pairing under way dropped")] }
            throw PairingFailure.unspecifiedReason
        }
    }

    // MARK: Feature exchange

    private func answerRequest(_ features: PairingFeatures) throws -> [SMPOutput] {
        guard pairingAllowed() else { throw PairingFailure.repeatedAttempts }
        reset()
        request = features
        var ours = ourFeatures
        // The responder distributes at most what was asked (§3.6.1).
        ours.initiatorKeys = features.initiatorKeys.intersection(ours.initiatorKeys)
        ours.responderKeys = features.responderKeys.intersection(ours.responderKeys)
        response = ours
        try negotiate()
        var outputs = [send(.pairingResponse(ours))]
        phase = secureConnections ? .waitingPublicKey : .waitingConfirm
        if !secureConnections { outputs += try legacyPasskeyIfNeeded() }
        return outputs
    }

    private func takeResponse(_ features: PairingFeatures) throws -> [SMPOutput] {
        response = features
        try negotiate()
        if secureConnections {
            phase = .waitingPublicKey
            return [try sendPublicKey()]
        }
        phase = .waitingConfirm
        return try legacyPasskeyIfNeeded() + (tk.isEmpty ? [] : legacySendConfirm())
    }

    private func negotiate() throws {
        guard let request, let response else { throw PairingFailure.unspecifiedReason }
        keySize = min(request.maxKeySize, response.maxKeySize)
        guard keySize >= 7 else { throw PairingFailure.encryptionKeySize }
        secureConnections = request.authRequirements.contains(.secureConnections) && response.authRequirements.contains(.secureConnections)
        if configuration.secureConnectionsOnly && !secureConnections { throw PairingFailure.authenticationRequirements }
        method = PairingMethod.select(initiator: request, responder: response, secureConnections: secureConnections, weAreInitiator: isInitiator)
        // A side that asked for MITM protection cannot accept Just Works (§2.3.5.1).
        if configuration.requireMITM && !method.isAuthenticated { throw PairingFailure.authenticationRequirements }
    }

    // MARK: Secure Connections (Core Vol 3 Part H §2.3.5.6)

    private func sendPublicKey() throws -> SMPOutput {
        let pair = try makeKeyPair()
        keyPair = pair
        return send(.pairingPublicKey(x: pair.publicX.reversed(), y: pair.publicY.reversed()))
    }

    private func takePublicKey(x: [UInt8], y: [UInt8]) throws -> [SMPOutput] {
        var outputs: [SMPOutput] = []
        if !isInitiator { outputs.append(try sendPublicKey()) }
        guard let keyPair else { throw PairingFailure.unspecifiedReason }
        peerX = x.reversed()
        // A peer echoing our own key is a reflection attack (erratum 10734).
        guard peerX != keyPair.publicX else { throw PairingFailure.invalidParameters }
        dhKey = try keyPair.sharedSecret(peerX: peerX, peerY: y.reversed())
        switch method {
        case .justWorks, .numericComparison:
            localNonce = random(16)
            if isInitiator {
                phase = .waitingConfirm
            } else {
                // The responder commits first: Cb = f4(PKb, PKa, Nb, 0).
                outputs.append(send(.pairingConfirm(try SMPToolbox.f4(u: keyPair.publicX, v: peerX, x: localNonce, z: 0).reversed())))
                phase = .waitingRandom
            }
        case .passkeyEntry(let localInputs, let remoteInputs):
            phase = .waitingConfirm
            outputs += passkeyPrompt(localInputs: localInputs, remoteInputs: remoteInputs)
            if isInitiator, passkey != nil { outputs += try passkeyRoundCommit() }
        }
        return outputs
    }

    /// Shows a fresh passkey when we display it, or asks our user for the one the peer shows.
    private func passkeyPrompt(localInputs: Bool, remoteInputs: Bool) -> [SMPOutput] {
        if localInputs { return [.prompt(.enterPasskey)] }
        let bytes = random(4)
        let value = (UInt32(bytes[0]) << 24 | UInt32(bytes[1]) << 16 | UInt32(bytes[2]) << 8 | UInt32(bytes[3])) % 1_000_000
        passkey = value
        return [.prompt(.displayPasskey(value))]
    }

    /// The user typed the passkey (nil: the user cancelled).
    public func passkeyEntered(_ value: UInt32?, at now: Duration) -> [SMPOutput] {
        guard isPairing, case .passkeyEntry(true, _) = method, passkey == nil else { return [.log("no passkey was asked for")] }
        guard let value, value <= 999_999 else { return fail(.passkeyEntryFailed, "passkey entry cancelled or out of range") }
        passkey = value
        deadline = now + Self.timeout
        do {
            if !secureConnections {
                tk = [UInt8](repeating: 0, count: 12) + bigEndian(value)
                return isInitiator ? try legacySendConfirm() : (peerConfirm != nil ? try afterConfirm() : [])
            }
            if isInitiator, phase == .waitingConfirm { return try passkeyRoundCommit() }
            if !isInitiator, phase == .waitingConfirm, peerConfirm != nil { return try afterConfirm() }
            return []
        } catch {
            return fail(.unspecifiedReason, "pairing failed: \(error)")
        }
    }

    /// The user compared the numbers (numeric comparison).
    public func numberConfirmed(_ matches: Bool, at now: Duration) -> [SMPOutput] {
        guard isPairing, method == .numericComparison || method == .justWorks, phase == .waitingUser else { return [.log("no number was waiting for confirmation")] }
        guard matches else {
            return fail(.numericComparisonFailed, method == .justWorks ? "the user refused the pairing" : "the user said the numbers differ")
        }
        userConfirmed = true
        deadline = now + Self.timeout
        do {
            if isInitiator { return try initiatorSendCheck() }
            phase = .waitingDHKeyCheck
            return peerCheck != nil ? try responderCheck() : []
        } catch {
            return fail(.unspecifiedReason, "pairing failed: \(error)")
        }
    }

    /// This round's passkey bit (Core Vol 3 Part H §2.3.5.6.3); none before the passkey is known, which a peer
    /// sending its confirm and random out of turn would otherwise reach.
    private func passkeyBit() throws -> UInt8 {
        guard let passkey else { throw PairingFailure.unspecifiedReason }
        return 0x80 | UInt8((passkey >> UInt32(round)) & 1)
    }

    /// Initiator: commit to this round's bit, Cai = f4(PKa, PKb, Nai, rai) (§2.3.5.6.3).
    private func passkeyRoundCommit() throws -> [SMPOutput] {
        guard let keyPair else { throw PairingFailure.unspecifiedReason }
        localNonce = random(16)
        return [send(.pairingConfirm(try SMPToolbox.f4(u: keyPair.publicX, v: peerX, x: localNonce, z: try passkeyBit()).reversed()))]
    }

    private func afterConfirm() throws -> [SMPOutput] {
        if !secureConnections { return try legacyAfterConfirm() }
        guard let keyPair else { throw PairingFailure.unspecifiedReason }
        if isInitiator {
            // In passkey entry the initiator commits first (§2.3.5.6.3): a confirm before ours is out of turn.
            if case .passkeyEntry = method, passkey == nil { throw PairingFailure.unspecifiedReason }
            phase = .waitingRandom
            return [send(.pairingRandom(localNonce.reversed()))]
        }
        // Responder in passkey entry: commit to the same bit once our passkey is known.
        guard passkey != nil else { return [] }
        localNonce = random(16)
        phase = .waitingRandom
        return [send(.pairingConfirm(try SMPToolbox.f4(u: keyPair.publicX, v: peerX, x: localNonce, z: try passkeyBit()).reversed()))]
    }

    private func afterRandom() throws -> [SMPOutput] {
        if !secureConnections { return try legacyAfterRandom() }
        guard let keyPair else { throw PairingFailure.unspecifiedReason }
        switch method {
        case .justWorks, .numericComparison:
            var outputs: [SMPOutput] = []
            if isInitiator {
                guard let peerConfirm, peerConfirm == (try SMPToolbox.f4(u: peerX, v: keyPair.publicX, x: peerNonce, z: 0)) else {
                    throw PairingFailure.confirmValueFailed
                }
            } else {
                outputs.append(send(.pairingRandom(localNonce.reversed())))
            }
            if method == .justWorks, asksJustWorksConsent {
                phase = .waitingUser
                return outputs + [.prompt(.confirmPairing)]
            }
            guard method == .numericComparison else {
                if isInitiator { return outputs + (try initiatorSendCheck()) }
                phase = .waitingDHKeyCheck
                return outputs
            }
            let (pka, pkb, na, nb) = isInitiator ? (keyPair.publicX, peerX, localNonce, peerNonce) : (peerX, keyPair.publicX, peerNonce, localNonce)
            phase = .waitingUser
            return outputs + [.prompt(.confirmNumber(try SMPToolbox.g2(u: pka, v: pkb, x: na, y: nb) % 1_000_000))]
        case .passkeyEntry:
            guard let peerConfirm else { throw PairingFailure.unspecifiedReason }
            guard peerConfirm == (try SMPToolbox.f4(u: peerX, v: keyPair.publicX, x: peerNonce, z: try passkeyBit())) else {
                throw PairingFailure.confirmValueFailed
            }
            var outputs: [SMPOutput] = []
            if !isInitiator { outputs.append(send(.pairingRandom(localNonce.reversed()))) }
            round += 1
            self.peerConfirm = nil
            guard round == 20 else {
                phase = .waitingConfirm
                return outputs + (isInitiator ? try passkeyRoundCommit() : [])
            }
            if isInitiator { return outputs + (try initiatorSendCheck()) }
            phase = .waitingDHKeyCheck
            return outputs
        }
    }

    /// The address fields of f5/f6: type then address, most significant first.
    private func addressField(_ address: DeviceAddress) -> [UInt8] { [address.type.isRandom ? 1 : 0] + address.address.bytes.reversed() }

    private var initiatorAddress: DeviceAddress { isInitiator ? localAddress : peerAddress }
    private var responderAddress: DeviceAddress { isInitiator ? peerAddress : localAddress }

    private func deriveKeys() throws {
        let (na, nb) = isInitiator ? (localNonce, peerNonce) : (peerNonce, localNonce)
        let keys = try SMPToolbox.f5(w: dhKey, n1: na, n2: nb, a1: addressField(initiatorAddress), a2: addressField(responderAddress))
        macKey = keys.macKey
        ltk = masked(keys.ltk)
    }

    /// The r of f6: the passkey in passkey entry, zero otherwise (§2.3.5.6.5).
    private var checkR: [UInt8] {
        guard case .passkeyEntry = method, let passkey else { return [UInt8](repeating: 0, count: 16) }
        return [UInt8](repeating: 0, count: 12) + bigEndian(passkey)
    }

    private func initiatorSendCheck() throws -> [SMPOutput] {
        guard let request else { throw PairingFailure.unspecifiedReason }
        try deriveKeys()
        let ea = try SMPToolbox.f6(w: macKey, n1: localNonce, n2: peerNonce, r: checkR, ioCap: request.ioCapField,
                                   a1: addressField(initiatorAddress), a2: addressField(responderAddress))
        phase = .waitingDHKeyCheck
        return [send(.pairingDHKeyCheck(ea.reversed()))]
    }

    private func initiatorCheck(_ eb: [UInt8]) throws -> [SMPOutput] {
        guard let response else { throw PairingFailure.unspecifiedReason }
        let expected = try SMPToolbox.f6(w: macKey, n1: peerNonce, n2: localNonce, r: checkR, ioCap: response.ioCapField,
                                         a1: addressField(responderAddress), a2: addressField(initiatorAddress))
        guard eb == expected else { throw PairingFailure.dhKeyCheckFailed }
        phase = .waitingEncryption
        return [.startEncryption(ltk: ltk.reversed(), ediv: 0, rand: [UInt8](repeating: 0, count: 8))]
    }

    private func responderCheck() throws -> [SMPOutput] {
        guard let request, let response, let ea = peerCheck else { throw PairingFailure.unspecifiedReason }
        // Numeric comparison waits for our own user before answering (§2.3.5.6.2).
        if (method == .numericComparison || (method == .justWorks && asksJustWorksConsent)) && !userConfirmed { return [] }
        try deriveKeys()
        let expected = try SMPToolbox.f6(w: macKey, n1: peerNonce, n2: localNonce, r: checkR, ioCap: request.ioCapField,
                                         a1: addressField(initiatorAddress), a2: addressField(responderAddress))
        guard ea == expected else { throw PairingFailure.dhKeyCheckFailed }
        let eb = try SMPToolbox.f6(w: macKey, n1: localNonce, n2: peerNonce, r: checkR, ioCap: response.ioCapField,
                                   a1: addressField(responderAddress), a2: addressField(initiatorAddress))
        phase = .waitingEncryption
        return [send(.pairingDHKeyCheck(eb.reversed()))]
    }

    // MARK: Legacy pairing (Core Vol 3 Part H §2.3.5.2–2.3.5.5)

    private func legacyPasskeyIfNeeded() throws -> [SMPOutput] {
        switch method {
        case .justWorks:
            tk = [UInt8](repeating: 0, count: 16)
            return []
        case .numericComparison:
            throw PairingFailure.unspecifiedReason
        case .passkeyEntry(let localInputs, let remoteInputs):
            let outputs = passkeyPrompt(localInputs: localInputs, remoteInputs: remoteInputs)
            if let passkey { tk = [UInt8](repeating: 0, count: 12) + bigEndian(passkey) }
            return outputs
        }
    }

    private func legacyConfirm(_ r: [UInt8]) throws -> [UInt8] {
        guard let request, let response else { throw PairingFailure.unspecifiedReason }
        let ia = initiatorAddress
        let ra = responderAddress
        return try SMPToolbox.c1(k: tk, r: r, preq: SMPPDU.pairingRequest(request).encoded.reversed(), pres: SMPPDU.pairingResponse(response).encoded.reversed(),
                                 iat: ia.type.isRandom ? 1 : 0, rat: ra.type.isRandom ? 1 : 0, ia: ia.address.bytes.reversed(), ra: ra.address.bytes.reversed())
    }

    private func legacySendConfirm() throws -> [SMPOutput] {
        localNonce = random(16)
        return [send(.pairingConfirm(try legacyConfirm(localNonce).reversed()))]
    }

    private func legacyAfterConfirm() throws -> [SMPOutput] {
        if isInitiator {
            // The initiator confirms first (Core Vol 3 Part H §2.3.5.5): a confirm before ours is out of turn.
            if tk.isEmpty { throw PairingFailure.unspecifiedReason }
            phase = .waitingRandom
            return [send(.pairingRandom(localNonce.reversed()))]
        }
        guard !tk.isEmpty else { return [] }  // our user has not typed the passkey yet
        phase = .waitingRandom
        return try legacySendConfirm()
    }

    private func legacyAfterRandom() throws -> [SMPOutput] {
        guard let peerConfirm, peerConfirm == (try legacyConfirm(peerNonce)) else { throw PairingFailure.confirmValueFailed }
        let (srand, mrand) = isInitiator ? (peerNonce, localNonce) : (localNonce, peerNonce)
        stk = masked(try SMPToolbox.s1(k: tk, r1: srand, r2: mrand))
        phase = .waitingEncryption
        if isInitiator { return [.startEncryption(ltk: stk.reversed(), ediv: 0, rand: [UInt8](repeating: 0, count: 8))] }
        return [send(.pairingRandom(localNonce.reversed()))]
    }

    // MARK: Encryption and key distribution (Core Vol 3 Part H §3.6)

    /// Peripheral: the controller asks for the key the central used; during pairing that is the STK or the new LTK.
    public func keyForEncryption(ediv: UInt16, rand: [UInt8]) -> [UInt8]? {
        guard !isInitiator, phase == .waitingEncryption, ediv == 0, rand.allSatisfy({ $0 == 0 }) else { return nil }
        return (secureConnections ? ltk : stk).reversed()
    }

    /// The link is now encrypted (or refused to be): key distribution starts, responder first.
    public func encryptionChanged(enabled: Bool, at now: Duration) -> [SMPOutput] {
        guard phase == .waitingEncryption else { return [] }
        guard enabled else { return fail(.unspecifiedReason, "encryption did not start") }
        guard let request, let response else { return [] }
        deadline = now + Self.timeout
        let sharedLTK: [UInt8]? = secureConnections ? ltk.reversed() : nil
        result = PairingResult(secureConnections: secureConnections, authenticated: method.isAuthenticated, keySize: keySize,
                               bonded: request.authRequirements.contains(.bonding) && response.authRequirements.contains(.bonding),
                               peerLTK: sharedLTK, localLTK: sharedLTK)
        var ours = isInitiator ? response.initiatorKeys : response.responderKeys
        var theirs = isInitiator ? response.responderKeys : response.initiatorKeys
        // Secure Connections derives the LTK on both sides: EncKey is ignored (§3.6.1); link keys are BR/EDR only.
        if secureConnections {
            ours.remove(.encryptionKey)
            theirs.remove(.encryptionKey)
        }
        ours.remove(.linkKey)
        theirs.remove(.linkKey)
        expectedKeys = theirs
        phase = .distributingKeys
        var outputs: [SMPOutput] = []
        ourKeys = ours
        if !isInitiator { outputs += distributeOurKeys() }
        return outputs + finishIfDone()
    }

    private var ourKeys: KeyDistribution = []
    private var sentOurKeys = false

    private func distributeOurKeys() -> [SMPOutput] {
        sentOurKeys = true
        var outputs: [SMPOutput] = []
        if ourKeys.contains(.encryptionKey) {
            let key = Array(masked(random(16)).reversed())
            let rand = random(8)
            let divider = random(2)
            let ediv = UInt16(divider[0]) | UInt16(divider[1]) << 8
            result?.localLTK = key
            result?.localEDIV = ediv
            result?.localRand = rand
            outputs += [send(.encryptionInformation(ltk: key)), send(.centralIdentification(ediv: ediv, rand: rand))]
        }
        if ourKeys.contains(.identityKey) {
            outputs += [send(.identityInformation(irk: identity.irk)), send(.identityAddressInformation(identity.address))]
        }
        if ourKeys.contains(.signingKey) {
            let csrk = random(16)
            result?.localCSRK = csrk
            outputs.append(send(.signingInformation(csrk: csrk)))
        }
        return outputs
    }

    private func takeKey(_ pdu: SMPPDU) throws -> [SMPOutput] {
        // Keys arrive in a fixed order; each is checked against what was negotiated (§3.6.1).
        switch pdu {
        case .encryptionInformation(let key) where expectedKeys.contains(.encryptionKey) && result?.peerLTK == nil:
            result?.peerLTK = key
        case .centralIdentification(let ediv, let rand) where expectedKeys.contains(.encryptionKey) && result?.peerLTK != nil:
            result?.peerEDIV = ediv
            result?.peerRand = rand
            expectedKeys.remove(.encryptionKey)
        case .identityInformation(let irk) where expectedKeys.contains(.identityKey) && !pendingIdentityAddress:
            result?.peerIRK = irk
            pendingIdentityAddress = true
        case .identityAddressInformation(let address) where pendingIdentityAddress:
            // A static random identity must have its two top bits set (Core Vol 6 Part B §1.3.2.1).
            guard !address.type.isRandom || address.address.randomKind == .static else { throw PairingFailure.invalidParameters }
            result?.peerIdentity = address
            pendingIdentityAddress = false
            expectedKeys.remove(.identityKey)
        case .signingInformation(let csrk) where expectedKeys.contains(.signingKey) && !pendingIdentityAddress:
            result?.peerCSRK = csrk
            expectedKeys.remove(.signingKey)
        default:
            throw PairingFailure.unspecifiedReason
        }
        return finishIfDone()
    }

    private func finishIfDone() -> [SMPOutput] {
        guard phase == .distributingKeys, expectedKeys.isEmpty, !pendingIdentityAddress else { return [] }
        var outputs: [SMPOutput] = []
        if isInitiator && !sentOurKeys { outputs += distributeOurKeys() }
        phase = .done
        deadline = nil
        if let result { outputs.append(.completed(result)) }
        return outputs
    }

    // MARK: Time

    public func tick(at now: Duration) -> [SMPOutput] {
        guard let deadline, now >= deadline, isPairing else { return [] }
        self.deadline = nil
        isTimedOut = true
        phase = .failed
        return [.failed(.timeout), .log("SMP timed out; no further SMP on this link until it reconnects")]
    }

    // MARK: Helpers

    private func fail(_ reason: PairingFailure, _ why: String) -> [SMPOutput] {
        let wasPairing = isPairing || phase == .idle
        phase = .failed
        deadline = nil
        return [send(.pairingFailed(reason)), .log(why)] + (wasPairing ? [.failed(.local(reason))] : [])
    }

    private func send(_ pdu: SMPPDU) -> SMPOutput { .send(pdu.encoded) }

    /// A key (most significant first) shortened to the negotiated size: its most significant octets are zero (§2.3.4).
    private func masked(_ key: [UInt8]) -> [UInt8] {
        guard keySize < 16 else { return key }
        return [UInt8](repeating: 0, count: 16 - Int(keySize)) + key.suffix(Int(keySize))
    }

    /// A new pairing on the same link starts from nothing.
    private func reset() {
        secureConnections = false
        method = .justWorks
        keyPair = nil
        peerX = []
        dhKey = []
        localNonce = []
        peerNonce = []
        peerConfirm = nil
        passkey = nil
        round = 0
        userConfirmed = false
        peerCheck = nil
        ltk = []
        macKey = []
        tk = []
        stk = []
        result = nil
        expectedKeys = []
        pendingIdentityAddress = false
        ourKeys = []
        sentOurKeys = false
    }

    private func bigEndian(_ value: UInt32) -> [UInt8] { [UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)] }
}

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

/// Repeated attempts protection (Core Vol 3 Part H §2.3.6): after a pairing the verifier (the responder) failed,
/// the same claimant must wait, and the wait doubles with each further failure; a success clears it.
public struct RepeatedAttemptsGuard: Sendable {
    public static let firstWait: Duration = .seconds(2)
    public static let longestWait: Duration = .seconds(64)
    private var state: [BDAddress: (until: Duration, wait: Duration)] = [:]

    public init() {}

    public func allows(_ peer: BDAddress, at now: Duration) -> Bool { (state[peer]?.until ?? .zero) <= now }

    public mutating func failed(_ peer: BDAddress, at now: Duration) {
        let wait = state[peer].map { min($0.wait * 2, Self.longestWait) } ?? Self.firstWait
        state[peer] = (now + wait, wait)
    }

    public mutating func succeeded(_ peer: BDAddress) { state[peer] = nil }
}
