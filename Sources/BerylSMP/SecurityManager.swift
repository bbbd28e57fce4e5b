import BerylCore
import BerylCrypto

/// Someone waiting for a link to become secure; the shell keeps what to do when it is told.
public struct SecurityWaiter: Hashable, Sendable {
    public let id: UInt64
    public init(_ id: UInt64) { self.id = id }
    /// The manager's own waits (a peripheral's Security Request): never reported.
    static let own = SecurityWaiter(0)
}

/// A secured link, as callers of `secure` are told.
public struct SecuritySummary: Equatable, Sendable {
    public var level: LinkSecurity
    public var secureConnections: Bool
    public var keySize: UInt8
    /// The bond's identity, else the address the peer uses on this link.
    public var identity: DeviceAddress?

    public init(level: LinkSecurity, secureConnections: Bool, keySize: UInt8, identity: DeviceAddress?) {
        self.level = level
        self.secureConnections = secureConnections
        self.keySize = keySize
        self.identity = identity
    }
}

public enum SecurityFailure: Error, Equatable, Sendable {
    case pairing(SMPFailure)
    /// The controller's HCI status for a failed encryption (Core Vol 1 Part F).
    case encryption(status: UInt8)
    case linkClosed
}

/// Why a signed write cannot be made.
public enum SigningRefusal: Error, Equatable, Sendable {
    /// No bond with this peer, or its pairing did not distribute our CSRK.
    case noKey
    case counterExhausted
}

/// Why a request to the security manager was refused.
public enum SecurityRequestError: Error, Equatable, Sendable {
    case noLink
    case noPairingUnderWay
    case pairingUnderWay
    case identityUnknown
    case noBond
    case storage(String)
    case crypto(String)
}

/// How the last encryption with a bond's stored key ended: what shows a user (and a test) that a bonded peer was
/// encrypted with, refused, or lost the key, without reading a log.
public enum KeyEncryptionOutcome: Equatable, Sendable {
    case encrypted
    /// The peer refused the key as missing (PIN or Key Missing, Core Vol 1 Part F §2.6): pairing again follows.
    case keyMissing
    /// Encryption Change with another status (Core Vol 4 Part E §7.7.8).
    case failed(status: UInt8)
    /// The link closed before encryption was on (MIC Failure, 0x3D, when the keys differ); nil when no reason came.
    case linkClosed(reason: UInt8?)
}

/// Encryptions started with one bond's stored key since attd started, and how the last one ended.
public struct KeyEncryptionTally: Equatable, Sendable {
    public var started = 0
    public var last: KeyEncryptionOutcome?
    public init(started: Int = 0, last: KeyEncryptionOutcome? = nil) {
        self.started = started
        self.last = last
    }
}

public enum SecurityOutput: Equatable, Sendable {
    /// An SMP PDU for the link's fixed channel 0x0006.
    case sendSMP(link: UInt16, [UInt8])
    /// HCI LE Enable Encryption (central).
    case enableEncryption(link: UInt16, rand: [UInt8], ediv: UInt16, ltk: [UInt8])
    /// HCI LE Long Term Key Request Reply, or its Negative Reply when there is no key (peripheral).
    case longTermKeyReply(link: UInt16, ltk: [UInt8]?)
    /// The link's ATT server must now allow what this level allows.
    case levelChanged(link: UInt16, LinkSecurity)
    /// Encryption went on or off: the event clients of the stack hear.
    case encryptionChanged(link: UInt16, LinkSecurity, status: UInt8)
    case peerSigning(link: UInt16, PeerSigning?)
    /// A bonded peer's subscriptions and client features, as they were when it left (Core Vol 3 Part G §3.3.3.3).
    case restoreClientState(link: UInt16, configurations: [UInt16: UInt16], features: [UInt8])
    /// A database change made while the bonded peer was away (Core Vol 3 Part G §7.1).
    case indicateServiceChanged(link: UInt16, ClosedRange<UInt16>)
    /// Where a bonded peer's Service Changed is, found on an earlier link: the link's GATT client recognises its
    /// indications before anything is discovered (the peer indicates a change made while we were away at once, §7.1).
    case peerServiceChanged(link: UInt16, valueHandle: UInt16)
    case prompt(link: UInt16, peer: DeviceAddress, PairingPrompt)
    case pairingFinished(link: UInt16, peer: DeviceAddress, Result<SecuritySummary, SMPFailure>)
    /// `afterKeysDelivered`: the last keys were just sent; tell the waiters only once the controller has taken them,
    /// so a caller that disconnects at once cannot overtake them.
    case secured([SecurityWaiter], Result<SecuritySummary, SecurityFailure>, afterKeysDelivered: Bool)
    case log(LogLevel, String)
}

/// attd's Security Manager host policy (Core Vol 3 Part H §2.4, Part C §10), sans-IO: bonds and their storage, one
/// SMP session per link, LTK replies, encrypt-with-the-bond-else-pair, pairing again when the peer lost its keys,
/// repeated-attempts protection, and what bonded GATT clients leave behind (subscriptions, pending Service Changed).
/// Time comes in with each input; outputs are typed.
public final class SecurityManager {
    struct LinkState {
        let isCentral: Bool
        let peer: DeviceAddress
        var smp: SMPSession?
        /// The bond this peer matched (by identity, the address it paired from, or a private address its IRK resolves).
        var bond: DeviceAddress?
        var encrypted = false
        var authenticated = false
        var waiters: [SecurityWaiter] = []
        /// The encryption under way uses a stored key: its failure means the peer lost the bond.
        var reEncrypting = false
        /// Where our GATT client found the peer's Service Changed on this link: the bond's once there is one.
        var peerServiceChanged: UInt16?
        /// The link's subscriptions as its ATT server last reported them: they belong to the bond once there is one.
        var configurations: [UInt16: UInt16] = [:]
        var features: [UInt8] = [0]
        /// Our Security Request that the central has not acted on yet, while we are the peripheral and someone waits.
        var unansweredSecurityRequest: SecurityRequestRepeats?
    }

    /// Pairing options set for a link before it exists.
    private struct NextLinkOptions {
        var central: Bool
        var peer: DeviceAddress?
        var consent: Bool
        var localAddress: DeviceAddress?
    }

    public let configuration: SecurityConfiguration
    /// Numeric comparisons and consent are answered yes without asking anyone (labs); passkeys are still prompted.
    public let autoAccept: Bool
    public private(set) var localIdentity: LocalIdentity?
    public private(set) var bonds: [Bond]
    /// By bond identity; kept when a bond is paired again, so a re-pairing shows as `keyMissing`.
    public private(set) var keyEncryptions: [DeviceAddress: KeyEncryptionTally] = [:]
    /// The resolvable private address last handed out for advertising.
    public private(set) var privateAddress: BDAddress?
    let storage: BondStorage?
    var links: [UInt16: LinkState] = [:]
    private var nextLinkOptions: [NextLinkOptions] = []
    private var attempts = RepeatedAttemptsGuard()
    private var now: Duration = .zero

    /// Throws when the storage cannot list its bonds; the shell then runs without storage rather than overwrite it.
    public init(configuration: SecurityConfiguration, autoAccept: Bool = false, storage: BondStorage?) throws {
        self.configuration = configuration
        self.autoAccept = autoAccept
        self.storage = storage
        bonds = try storage?.bonds() ?? []
    }

    // MARK: Queries

    public func level(of link: UInt16) -> LinkSecurity? {
        links[link].map { LinkSecurity(encrypted: $0.encrypted, authenticated: $0.authenticated, bonded: $0.bond != nil) }
    }

    /// Whether securing this link is possible at all (a security manager for it, or a bond to encrypt with).
    public func canSecure(_ link: UInt16) -> Bool {
        guard let state = links[link] else { return false }
        return state.smp != nil || state.bond != nil
    }

    public func isPairing(_ link: UInt16) -> Bool { links[link]?.smp?.isPairing ?? false }

    public func bondIdentity(of link: UInt16) -> DeviceAddress? { links[link]?.bond }

    public func peer(of link: UInt16) -> DeviceAddress? { links[link]?.peer }

    public func subscriptionCount(of identity: DeviceAddress) -> Int { (try? storage?.clientState(identity).configurations.count) ?? 0 }

    public func summary(of link: UInt16, secureConnections: Bool? = nil, keySize: UInt8? = nil) -> SecuritySummary {
        let state = links[link]
        let bond = state?.bond.flatMap { identity in bonds.first { $0.identity == identity } }
        return SecuritySummary(level: LinkSecurity(encrypted: state?.encrypted ?? false, authenticated: state?.authenticated ?? false, bonded: bond != nil),
                               secureConnections: secureConnections ?? bond?.secureConnections ?? false, keySize: keySize ?? bond?.keySize ?? 16,
                               identity: bond?.identity ?? state?.peer)
    }

    // MARK: Identity

    /// Our identity for key distribution: the controller's address and the IRK the storage keeps.
    public func learnIdentity(_ address: DeviceAddress) -> [SecurityOutput] {
        guard address.address != .zero else { return [] }
        var outputs: [SecurityOutput] = []
        var irk = localIdentity?.irk
        do {
            if let storage { irk = try storage.localIRK() }
        } catch {
            outputs.append(.log(.error, "bond store: cannot read this device's IRK: \(error)"))
        }
        localIdentity = LocalIdentity(address: address, irk: irk ?? SecureRandom.bytes(16))
        return outputs
    }

    /// A fresh resolvable private address to advertise from; a central that connects to it pairs with it.
    public func makePrivateAddress() throws(SecurityRequestError) -> BDAddress {
        guard let irk = localIdentity?.irk else { throw .identityUnknown }
        do {
            let address = try AddressResolution.make(irk: irk)
            privateAddress = address
            return address
        } catch {
            throw .crypto("cannot make a private address: \(error)")
        }
    }

    // MARK: Links

    public func linkOpened(_ link: UInt16, isCentral: Bool, peer: DeviceAddress, at time: Duration) -> [SecurityOutput] {
        now = time
        var outputs: [SecurityOutput] = []
        links[link] = LinkState(isCentral: isCentral, peer: peer)
        if let local = localIdentity {
            // As peripheral we advertised from the private address we handed out, if any: pairing hashes the addresses in use.
            var localAddress = !isCentral ? privateAddress.map { DeviceAddress($0, type: .random) } ?? local.address : local.address
            var consent = false
            if let index = nextLinkOptions.firstIndex(where: { $0.central == isCentral && ($0.peer == nil || $0.peer == peer) }) {
                let options = nextLinkOptions.remove(at: index)
                localAddress = options.localAddress ?? localAddress
                consent = options.consent
            }
            links[link]?.smp = makeSMP(isCentral: isCentral, peer: peer, localAddress: localAddress)
            links[link]?.smp?.asksJustWorksConsent = consent
        } else {
            outputs.append(.log(.warning, "link 0x\(String(link, radix: 16)): controller address unknown; pairing is refused on it"))
        }
        if let bond = bonds.first(where: { $0.matches(peer) }) {
            links[link]?.bond = bond.identity
            outputs.append(.levelChanged(link: link, level(of: link)!))
            outputs.append(.peerSigning(link: link, signingKey(of: bond)))
            outputs += restoreClientState(of: bond.identity, on: link)
        }
        return outputs
    }

    public func linkClosed(_ link: UInt16, reason: UInt8? = nil) -> [SecurityOutput] {
        guard let state = links.removeValue(forKey: link) else { return [] }
        if state.reEncrypting, let identity = state.bond { keyEncryptions[identity, default: .init()].last = .linkClosed(reason: reason) }
        return reported(state.waiters, .failure(.linkClosed), afterKeysDelivered: false)
    }

    /// Pairing options for the next link in a role (and from a peer, if given), replacing earlier ones for the same.
    public func setNextLinkPairing(central: Bool, peer: DeviceAddress?, consent: Bool, localAddress: DeviceAddress?, clear: Bool) {
        nextLinkOptions.removeAll { $0.central == central && $0.peer == peer }
        if !clear { nextLinkOptions.append(NextLinkOptions(central: central, peer: peer, consent: consent, localAddress: localAddress)) }
    }

    /// Pairing options for a link that exists: the address pairing hashes as ours, and whether Just Works asks first.
    public func setLinkPairing(_ link: UInt16, localAddress: DeviceAddress?, consent: Bool) throws(SecurityRequestError) {
        guard let state = links[link], let smp = state.smp else { throw .noLink }
        if let localAddress, smp.localAddress != localAddress {
            guard !smp.isPairing else { throw .pairingUnderWay }
            links[link]?.smp = makeSMP(isCentral: state.isCentral, peer: state.peer, localAddress: localAddress)
        }
        links[link]?.smp?.asksJustWorksConsent = consent
    }

    private func makeSMP(isCentral: Bool, peer: DeviceAddress, localAddress: DeviceAddress) -> SMPSession? {
        guard let local = localIdentity else { return nil }
        let smp = SMPSession(isInitiator: isCentral, configuration: configuration, identity: local, localAddress: localAddress, peerAddress: peer)
        smp.pairingAllowed = { [unowned self] in self.attempts.allows(peer.address, at: self.now) }
        return smp
    }

    // MARK: Securing a link

    /// Makes the link encrypted: with the stored key of a bonded peer, else by pairing (central), or by asking the
    /// central to (peripheral, Security Request). The waiter hears once, however many asked.
    public func secure(_ link: UInt16, for waiter: SecurityWaiter, at time: Duration) -> [SecurityOutput] {
        now = time
        guard var state = links[link] else { return reported([waiter], .failure(.linkClosed), afterKeysDelivered: false) }
        state.waiters.append(waiter)
        let alreadyUnderWay = state.waiters.count > 1 || (state.smp?.isPairing ?? false) || state.reEncrypting
        links[link] = state
        guard !alreadyUnderWay else { return [] }
        if state.isCentral, let identity = state.bond, let bond = bonds.first(where: { $0.identity == identity }), let key = bond.peerLTK {
            links[link]?.reEncrypting = true
            keyEncryptions[identity, default: .init()].started += 1
            return [.log(.info, "link 0x\(String(link, radix: 16)): encrypting with the key bonded \(identity) gave us"),
                    .enableEncryption(link: link, rand: bond.peerRand, ediv: bond.peerEDIV, ltk: key)]
        } else if state.smp?.isTimedOut == true {
            // After an SMP timeout the link carries no more SMP (Core Vol 3 Part H §3.4): nothing could answer.
            return finish(link, .failure(.pairing(.timeout)))
        } else if state.isCentral {
            return startPairing(on: link)
        } else if let smp = state.smp {
            let outputs = smp.requestSecurity()
            if !outputs.isEmpty { links[link]?.unansweredSecurityRequest = SecurityRequestRepeats(firstSentAt: time) }
            return translate(outputs, on: link)
        }
        return finish(link, .failure(.pairing(.local(.pairingNotSupported))))
    }

    /// An SMP PDU from the peer. Without a security manager for the link, anything but Pairing Failed is answered with
    /// Pairing Failed, Pairing Not Supported (Core Vol 3 Part H §3.5.5).
    public func receive(_ pdu: [UInt8], on link: UInt16, at time: Duration) -> [SecurityOutput] {
        now = time
        guard let smp = links[link]?.smp else {
            guard pdu.first != 0x05 else { return [] }
            return [.sendSMP(link: link, [0x05, PairingFailure.pairingNotSupported.rawValue]), .log(.info, "pairing refused: no security manager on this link")]
        }
        return translate(smp.receive(pdu, at: time), on: link)
    }

    /// The user's answer to a prompt: a passkey entered (nil: refused) or a yes or no.
    public func answerPrompt(_ link: UInt16, accept: Bool, passkey: UInt32, at time: Duration) throws(SecurityRequestError) -> [SecurityOutput] {
        now = time
        guard let smp = links[link]?.smp, smp.isPairing else { throw .noPairingUnderWay }
        let outputs = smp.wantsNumberConfirmation ? smp.numberConfirmed(accept, at: time) : smp.passkeyEntered(accept ? passkey : nil, at: time)
        return translate(outputs, on: link)
    }

    public func tick(at time: Duration) -> [SecurityOutput] {
        now = time
        var outputs: [SecurityOutput] = []
        for link in links.keys.sorted() {
            guard let smp = links[link]?.smp else { continue }
            outputs += translate(smp.tick(at: time), on: link)
            outputs += repeatSecurityRequestIfDue(on: link, smp)
        }
        return outputs
    }

    /// Core Vol 3 Part H §2.4.6 lets a central ignore a Security Request and forbids one only while pairing or
    /// encryption is under way; a busy central can also drop it before anything listens. While someone still waits
    /// for security and the central has neither paired nor encrypted, we ask again, a few times, further apart.
    private func repeatSecurityRequestIfDue(on link: UInt16, _ smp: SMPSession) -> [SecurityOutput] {
        guard let state = links[link], var repeats = state.unansweredSecurityRequest, repeats.isDue(at: now) else { return [] }
        let stillWanted = !state.waiters.isEmpty && !state.encrypted && !state.reEncrypting && !smp.isPairing && !smp.isTimedOut
        guard stillWanted else {
            links[link]?.unansweredSecurityRequest = nil
            return []
        }
        repeats.sent(at: now)
        links[link]?.unansweredSecurityRequest = repeats.isExhausted ? nil : repeats
        return [.log(.info, "link 0x\(String(link, radix: 16)): the central has not acted on our Security Request; asking again "
                     + "(\(repeats.repeatsSent) of \(SecurityRequestRepeats.delays.count))")] + translate(smp.requestSecurity(), on: link)
    }

    private func startPairing(on link: UInt16) -> [SecurityOutput] {
        guard let smp = links[link]?.smp else { return finish(link, .failure(.pairing(.local(.pairingNotSupported)))) }
        return translate(smp.startPairing(at: now), on: link)
    }

    private func finish(_ link: UInt16, _ result: Result<SecuritySummary, SecurityFailure>, afterKeysDelivered: Bool = false) -> [SecurityOutput] {
        guard let waiters = links[link]?.waiters, !waiters.isEmpty else { return [] }
        links[link]?.waiters = []
        return reported(waiters, result, afterKeysDelivered: afterKeysDelivered)
    }

    private func reported(_ waiters: [SecurityWaiter], _ result: Result<SecuritySummary, SecurityFailure>, afterKeysDelivered: Bool) -> [SecurityOutput] {
        let told = waiters.filter { $0 != .own }
        return told.isEmpty ? [] : [.secured(told, result, afterKeysDelivered: afterKeysDelivered)]
    }

    // MARK: Controller events

    public func encryptionChanged(_ link: UInt16, status: UInt8, enabled: Bool, at time: Duration) -> [SecurityOutput] {
        now = time
        guard var state = links[link] else { return [] }
        let wasReEncrypting = state.reEncrypting
        state.reEncrypting = false
        state.encrypted = enabled
        // Encryption off with success is no outcome of an encryption with the key: on LE encryption is only paused to
        // refresh a key (Core Vol 6 Part B §5.1.3), so Encryption Change (Vol 4 Part E §7.7.8) never turns it off alone.
        if wasReEncrypting, let identity = state.bond, enabled || status != 0 {
            keyEncryptions[identity, default: .init()].last = enabled ? .encrypted
                : status == HCIStatusCode.pinOrKeyMissing ? .keyMissing : .failed(status: status)
        }
        if enabled, let identity = state.bond, let bond = bonds.first(where: { $0.identity == identity }), !(state.smp?.isPairing ?? false) {
            state.authenticated = bond.authenticated
        }
        links[link] = state
        let level = level(of: link)!
        var outputs: [SecurityOutput] = [
            .levelChanged(link: link, level),
            .log(.info, "link 0x\(String(link, radix: 16)): encryption \(enabled ? "on" : "off") (status 0x\(String(status, radix: 16)))"),
            .encryptionChanged(link: link, level, status: status),
        ]
        if let smp = state.smp, smp.isPairing {
            return outputs + translate(smp.encryptionChanged(enabled: enabled, at: time), on: link)
        }
        if enabled {
            outputs += finish(link, .success(summary(of: link)))
        } else if wasReEncrypting, state.isCentral, status == HCIStatusCode.pinOrKeyMissing {
            // The peer no longer has our keys: pair afresh, as iOS does after "Peer removed pairing information".
            outputs.append(.log(.warning, "link 0x\(String(link, radix: 16)): the peer refused our stored key; pairing again"))
            outputs += startPairing(on: link)
        } else {
            outputs += finish(link, .failure(.encryption(status: status)))
        }
        return outputs
    }

    /// The controller asks for the key a central started encryption with (Core Vol 4 Part E §7.7.65.5).
    public func longTermKeyRequested(_ link: UInt16, rand: [UInt8], ediv: UInt16) -> [SecurityOutput] {
        guard let state = links[link] else { return [] }
        var key = state.smp?.keyForEncryption(ediv: ediv, rand: rand)
        if key == nil, let identity = state.bond, let bond = bonds.first(where: { $0.identity == identity }) {
            key = bond.localKey(ediv: ediv, rand: rand)
            links[link]?.reEncrypting = key != nil
            if key != nil { keyEncryptions[identity, default: .init()].started += 1 }
        }
        var outputs: [SecurityOutput] = []
        if key == nil { outputs.append(.log(.info, "link 0x\(String(link, radix: 16)): no key for the central's LTK request; refused")) }
        return outputs + [.longTermKeyReply(link: link, ltk: key)]
    }

    // MARK: SMP outputs

    private func translate(_ smpOutputs: [SMPOutput], on link: UInt16) -> [SecurityOutput] {
        var outputs: [SecurityOutput] = []
        for output in smpOutputs {
            guard let state = links[link] else { break }
            switch output {
            case .send(let bytes):
                outputs.append(.sendSMP(link: link, bytes))
            case .startEncryption(let ltk, let ediv, let rand):
                outputs.append(.enableEncryption(link: link, rand: rand, ediv: ediv, ltk: ltk))
            case .prompt(let prompt):
                outputs.append(.log(.info, "link 0x\(String(link, radix: 16)): pairing prompt \(prompt)"))
                outputs.append(.prompt(link: link, peer: state.peer, prompt))
                if autoAccept, prompt == .confirmPairing || Self.isNumber(prompt), let smp = state.smp {
                    outputs += translate(smp.numberConfirmed(true, at: now), on: link)
                }
            case .securityRequested:
                outputs.append(.log(.info, "link 0x\(String(link, radix: 16)): the peripheral asks for security"))
                outputs += secure(link, for: .own, at: now)
            case .completed(let result):
                outputs += pairingCompleted(result, on: link)
            case .failed(let failure):
                if Self.countsAsFailedAttempt(failure, responder: !state.isCentral) { attempts.failed(state.peer.address, at: now) }
                outputs.append(.log(.warning, "link 0x\(String(link, radix: 16)): pairing failed: \(failure)"))
                outputs.append(.pairingFinished(link: link, peer: state.peer, .failure(failure)))
                outputs += finish(link, .failure(.pairing(failure)))
            case .log(let message):
                outputs.append(.log(.info, "link 0x\(String(link, radix: 16)): \(message)"))
            }
        }
        return outputs
    }

    /// A removed bond's tally goes with it (a re-pairing keeps it: that is how a lost key stays visible).
    func forget(_ identity: DeviceAddress) {
        bonds.removeAll { $0.identity == identity }
        keyEncryptions[identity] = nil
    }

    /// Core Vol 3 Part H §2.3.6 makes the verifier wait after a failed attempt by its claimant. We are the verifier
    /// only as responder, and the attempt failed our checks only if we ended it: a claimant that gives up itself
    /// (a Pairing Failed it sends, such as a user's refusal on its side) proved nothing wrong and is not held back.
    static func countsAsFailedAttempt(_ failure: SMPFailure, responder: Bool) -> Bool {
        guard responder else { return false }
        switch failure {
        case .local(let reason): return reason != .repeatedAttempts
        case .timeout: return true
        case .remote: return false
        }
    }

    private static func isNumber(_ prompt: PairingPrompt) -> Bool {
        if case .confirmNumber = prompt { return true }
        return false
    }

    private func pairingCompleted(_ result: PairingResult, on link: UInt16) -> [SecurityOutput] {
        guard var state = links[link] else { return [] }
        var outputs: [SecurityOutput] = []
        attempts.succeeded(state.peer.address)
        state.authenticated = result.authenticated
        if result.bonded, configuration.bondable {
            let identity = result.peerIdentity ?? state.peer
            let bond = Bond(identity: identity, irk: result.peerIRK, peerLTK: result.peerLTK, peerEDIV: result.peerEDIV, peerRand: result.peerRand,
                            localLTK: result.localLTK, localEDIV: result.localEDIV, localRand: result.localRand, csrk: result.peerCSRK,
                            localCSRK: result.localCSRK, authenticated: result.authenticated, secureConnections: result.secureConnections,
                            keySize: result.keySize,
                            pairedFrom: state.peer != identity && state.peer.address.randomKind != .resolvablePrivate ? state.peer : nil)
            do {
                try storage?.save(bond)
                bonds.removeAll { $0.identity == identity }
                bonds.append(bond)
                state.bond = identity
                outputs.append(.peerSigning(link: link, signingKey(of: bond)))
                // Found before the bond existed: the bond keeps it from now on.
                if let handle = state.peerServiceChanged { outputs += keepPeerServiceChanged(handle, for: identity) }
            } catch {
                outputs.append(.log(.error, "bond store: cannot save the bond with \(identity): \(error)"))
            }
        }
        links[link] = state
        outputs.append(.levelChanged(link: link, level(of: link)!))
        // Subscriptions made before pairing belong to the bond from now on.
        outputs += persistClientState(of: link)
        outputs.append(.log(.info, "link 0x\(String(link, radix: 16)): paired with \(state.peer) (\(result.secureConnections ? "LE Secure Connections" : "legacy"), "
                            + "\(result.authenticated ? "authenticated" : "unauthenticated"), \(state.bond != nil ? "bonded" : "not bonded"))"))
        let paired = summary(of: link, secureConnections: result.secureConnections, keySize: result.keySize)
        outputs.append(.pairingFinished(link: link, peer: state.peer, .success(paired)))
        return outputs + finish(link, .success(paired), afterKeysDelivered: true)
    }
}

/// The HCI statuses the security manager acts on (Core Vol 1 Part F §1.3).
enum HCIStatusCode {
    static let pinOrKeyMissing: UInt8 = 0x06
}
