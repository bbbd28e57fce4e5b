import BerylCore
import BerylCrypto

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

    var phase: Phase = .idle
    /// The shell's repeated-attempts verdict for this peer, asked when the peer's Pairing Request arrives.
    public var pairingAllowed: () -> Bool = { true }
    public var isPairing: Bool { ![.idle, .done, .failed].contains(phase) }
    /// Whether the prompt outstanding is a number to confirm (rather than a passkey to type).
    public var wantsNumberConfirmation: Bool { phase == .waitingUser && (method == .numericComparison || method == .justWorks) }
    /// Secure Connections Just Works waits for a yes or no (a `confirmPairing` prompt) where numeric comparison would
    /// show its number (Core Vol 3 Part H §2.3.5.6.2: the same protocol, the number not shown); set for a device-lab
    /// harness that must be able to refuse.
    public var asksJustWorksConsent = false
    public internal(set) var isTimedOut = false
    var deadline: Duration?
    let random: (Int) -> [UInt8]
    let makeKeyPair: () throws(CryptoError) -> P256KeyPair

    // Exchanged features and what follows from them.
    var request: PairingFeatures?
    var response: PairingFeatures?
    var secureConnections = false
    var method: PairingMethod = .justWorks
    var keySize: UInt8 = 16

    // Secure Connections state (most significant first, as the toolbox takes them).
    var keyPair: P256KeyPair?
    var peerX: [UInt8] = []
    var dhKey: [UInt8] = []
    var localNonce: [UInt8] = []
    var peerNonce: [UInt8] = []
    var peerConfirm: [UInt8]?
    var passkey: UInt32?
    var round = 0
    var userConfirmed = false
    var peerCheck: [UInt8]?
    var ltk: [UInt8] = []
    var macKey: [UInt8] = []

    // Legacy state.
    var tk: [UInt8] = []
    var stk: [UInt8] = []

    var result: PairingResult?
    var expectedKeys: KeyDistribution = []
    var pendingIdentityAddress = false

    var ourKeys: KeyDistribution = []
    var sentOurKeys = false

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

    var ourFeatures: PairingFeatures {
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

    func handle(_ pdu: SMPPDU, at now: Duration) throws -> [SMPOutput] {
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

    func answerRequest(_ features: PairingFeatures) throws -> [SMPOutput] {
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

    func takeResponse(_ features: PairingFeatures) throws -> [SMPOutput] {
        response = features
        try negotiate()
        if secureConnections {
            phase = .waitingPublicKey
            return [try sendPublicKey()]
        }
        phase = .waitingConfirm
        return try legacyPasskeyIfNeeded() + (tk.isEmpty ? [] : legacySendConfirm())
    }

    func negotiate() throws {
        guard let request, let response else { throw PairingFailure.unspecifiedReason }
        keySize = min(request.maxKeySize, response.maxKeySize)
        guard keySize >= 7 else { throw PairingFailure.encryptionKeySize }
        secureConnections = request.authRequirements.contains(.secureConnections) && response.authRequirements.contains(.secureConnections)
        if configuration.secureConnectionsOnly && !secureConnections { throw PairingFailure.authenticationRequirements }
        method = PairingMethod.select(initiator: request, responder: response, secureConnections: secureConnections, weAreInitiator: isInitiator)
        // A side that asked for MITM protection cannot accept Just Works (§2.3.5.1).
        if configuration.requireMITM && !method.isAuthenticated { throw PairingFailure.authenticationRequirements }
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

    func fail(_ reason: PairingFailure, _ why: String) -> [SMPOutput] {
        let wasPairing = isPairing || phase == .idle
        phase = .failed
        deadline = nil
        return [send(.pairingFailed(reason)), .log(why)] + (wasPairing ? [.failed(.local(reason))] : [])
    }

    func send(_ pdu: SMPPDU) -> SMPOutput { .send(pdu.encoded) }

    /// A key (most significant first) shortened to the negotiated size: its most significant octets are zero (§2.3.4).
    func masked(_ key: [UInt8]) -> [UInt8] {
        guard keySize < 16 else { return key }
        return [UInt8](repeating: 0, count: 16 - Int(keySize)) + key.suffix(Int(keySize))
    }

    /// A new pairing on the same link starts from nothing.
    func reset() {
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

    func bigEndian(_ value: UInt32) -> [UInt8] { [UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)] }
}
