import BerylCore

/// A link's connection-oriented channels, sans-IO: the LE Credit Based and Enhanced Credit Based signalling
/// (Core Vol 3 Part A §4.6–4.7, §4.22–4.28), the channels' K-frames, and which requests are answered how. It accepts a
/// peer's request for a listening SPSM on its own, as Core Bluetooth's published channels do; the shell passes the
/// listeners (host-wide, `SPSMRegistry`) and the link's security, sends what it returns and hands SDUs to apps.
public struct CreditBasedChannels: Sendable {
    /// What a listening SPSM asks of a link before a channel opens on it.
    public enum Security: Equatable, Sendable {
        case none
        case encryption
        /// Encryption with keys from authenticated (MITM-protected) pairing.
        case authentication
    }

    public struct Listener: Equatable, Sendable {
        public var spsm: UInt16
        public var security: Security
        /// False while the listener's owner may not take a channel (the peer hears Insufficient Authorization).
        public var authorized: Bool

        public init(spsm: UInt16, security: Security = .none, authorized: Bool = true) {
            self.spsm = spsm
            self.security = security
            self.authorized = authorized
        }
    }

    /// This end's parameters for every channel it opens or accepts.
    public struct Settings: Equatable, Sendable {
        public var mtu: UInt16
        public var mps: UInt16
        /// Initial credits, and the most K-frames held at once per channel.
        public var window: UInt16
        /// The most channels open (or being opened) on the link at once.
        public var maxChannels: Int
        /// The link's encryption key size must be at least this for an SPSM that asks for encryption.
        public var minimumKeySize: Int

        /// An MPS of 247 fills one 251-octet LE data PDU with its L2CAP header.
        public init(mtu: UInt16 = 2048, mps: UInt16 = 247, window: UInt16 = 16, maxChannels: Int = 32, minimumKeySize: Int = 16) {
            self.mtu = mtu
            self.mps = mps
            self.window = window
            self.maxChannels = maxChannels
            self.minimumKeySize = minimumKeySize
        }
    }

    public enum Mode: Equatable, Sendable {
        /// LE Credit Based Flow Control (Core Vol 3 Part A §4.22).
        case le
        /// Enhanced Credit Based Flow Control (Core Vol 3 Part A §4.25): several channels per request, reconfigurable.
        case enhanced
    }

    /// Why an outgoing request opened no channel.
    public enum ConnectFailure: Error, Equatable, Sendable {
        case refused(CreditBasedResult)
        /// A result code this stack does not know: refused all the same.
        case unknownResult(UInt16)
        /// The peer answered with Command Reject (it does not know the request).
        case rejected
        /// No answer within the signalling timeout (Core Vol 3 Part A §6.2.1: RTX).
        case noResponse
        /// An answer whose fields break the spec (a CID outside the dynamic range or in use, an MTU or MPS too small).
        case invalidResponse
    }

    public enum CloseReason: Equatable, Sendable {
        /// This end asked (the app closed it).
        case local
        /// The peer asked.
        case remote
        /// The peer broke a rule of the mode: this end disconnected it.
        case violation(CreditBasedChannel.Violation)
        /// This end asked and the peer never answered.
        case noResponse
        /// The link ended.
        case linkClosed
    }

    /// A channel that opened: for an outgoing one, the request it answers.
    public struct Opened: Equatable, Sendable {
        public var localCID: UInt16
        public var spsm: UInt16
        public var mode: Mode
        /// The peer's MTU: the largest SDU the app may send.
        public var peerMTU: UInt16
        /// Nil when the peer opened it.
        public var request: RequestID?

        public init(localCID: UInt16, spsm: UInt16, mode: Mode, peerMTU: UInt16, request: RequestID?) {
            self.localCID = localCID
            self.spsm = spsm
            self.mode = mode
            self.peerMTU = peerMTU
            self.request = request
        }
    }

    public typealias RequestID = UInt64

    public enum Output: Equatable, Sendable {
        /// A signalling packet for CID 0x0005.
        case signal([UInt8])
        /// A K-frame for the peer's end of a channel.
        case frame(L2CAPFrame)
        case opened(Opened)
        case connectFailed(RequestID, ConnectFailure)
        case received(localCID: UInt16, CreditBasedChannel.ReceivedSDU)
        /// The channel's send queue has room again (credits arrived and frames went).
        case sendable(localCID: UInt16)
        /// The peer's MTU and MPS for these channels changed (enhanced).
        case reconfigured(localCIDs: [UInt16], peerMTU: UInt16)
        case closed(localCID: UInt16, CloseReason)
        case log(String)
    }

    /// Dynamic CIDs on an LE link (Core Vol 3 Part A §2.1, Table 2.3).
    public static let dynamicCIDs: ClosedRange<UInt16> = 0x0040...0x007F
    /// The smallest MTU and MPS each mode allows (Core Vol 3 Part A §4.22, §4.25).
    public static func minimumMTU(_ mode: Mode) -> UInt16 { mode == .le ? 23 : 64 }
    public static let maximumMPS: UInt16 = 65_533

    /// Whether an MTU and MPS a peer gives are within the mode's bounds (the MPS minimum is the MTU's).
    public static func acceptable(mtu: UInt16, mps: UInt16, in mode: Mode) -> Bool {
        mtu >= minimumMTU(mode) && mps >= minimumMTU(mode) && mps <= maximumMPS
    }

    private struct Open: Sendable {
        var channel: CreditBasedChannel
        var spsm: UInt16
        var mode: Mode
        var disconnecting: UInt8?
        /// The app heard it closed already (the peer broke a rule); the peer's answer only completes it.
        var closedForApp = false
    }

    private struct Pending: Sendable {
        var request: RequestID
        var spsm: UInt16
        var mode: Mode
        var localCIDs: [UInt16]
    }

    private struct PendingReconfigure: Sendable {
        var localCIDs: [UInt16]
        var mtu: UInt16
        var mps: UInt16
    }

    public private(set) var settings: Settings
    private var channels: [UInt16: Open] = [:]
    private var pending: [UInt8: Pending] = [:]
    private var reconfiguring: [UInt8: PendingReconfigure] = [:]
    /// Local CIDs of channels asked for and not answered yet.
    private var reserved: Set<UInt16> = []
    private var identifiers = SignalingIdentifiers()
    private var nextRequest: RequestID = 1

    public init(settings: Settings = Settings()) {
        self.settings = settings
    }

    public var openCIDs: [UInt16] { channels.keys.sorted() }
    public func channel(_ localCID: UInt16) -> CreditBasedChannel? { channels[localCID]?.channel }
    /// Whether a basic frame's CID is one of this link's channels.
    public func carries(_ cid: UInt16) -> Bool { channels[cid] != nil }

    // MARK: Signalling from the peer

    /// A signalling packet of this family from the peer (`CreditBasedSignal`'s codes), or a Command Reject that may
    /// answer one of this end's requests. `identifier` is the packet's, already checked not 0.
    public mutating func receive(_ signal: CreditBasedSignal, identifier: UInt8, listeners: (UInt16) -> Listener?,
                                 security: LinkSecurity, keySize: Int) -> [Output] {
        switch signal {
        case .leConnectionRequest(let spsm, let source, let mtu, let mps, let credits):
            return accept(.le, identifier: identifier, spsm: spsm, sources: [source], mtu: mtu, mps: mps, credits: credits,
                          listener: listeners(spsm), security: security, keySize: keySize)
        case .connectionRequest(let spsm, let mtu, let mps, let credits, let sources):
            return accept(.enhanced, identifier: identifier, spsm: spsm, sources: sources, mtu: mtu, mps: mps, credits: credits,
                          listener: listeners(spsm), security: security, keySize: keySize)
        case .leConnectionResponse(let destination, let mtu, let mps, let credits, let result):
            guard let asked = pending[identifier], asked.mode == .le else { return [.log("an LE credit-based response to no request of ours; ignored")] }
            return answered(asked, identifier: identifier, destinations: [destination], mtu: mtu, mps: mps, credits: credits, result: result)
        case .connectionResponse(let mtu, let mps, let credits, let result, let destinations):
            guard let asked = pending[identifier], asked.mode == .enhanced else { return [.log("a credit-based response to no request of ours; ignored")] }
            return answered(asked, identifier: identifier, destinations: destinations, mtu: mtu, mps: mps, credits: credits, result: result)
        case .flowControlCredit(let cid, let credits):
            return creditsArrived(remoteCID: cid, credits: credits)
        case .disconnectionRequest(let destination, let source):
            // The destination is this end's CID (unknown: rejected, this end's CID first, §4.1); a source that is not
            // the peer's end of that channel is dropped (§4.6).
            guard let open = channels[destination] else {
                return [.signal(LESignaling.rejectPacket(identifier, .invalidCIDInRequest, data: signal.body))]
            }
            guard open.channel.remote.cid == source else { return [.log("a disconnection request for channel \(destination) from CID \(source), not its peer's; dropped")] }
            channels[destination] = nil
            let answer = Output.signal(CreditBasedSignal.disconnectionResponse(destinationCID: destination, sourceCID: source).packet(identifier: identifier))
            return open.closedForApp ? [answer] : [answer, .closed(localCID: destination, open.disconnecting == nil ? .remote : .local)]
        case .disconnectionResponse(let destination, let source):
            guard let open = channels[source], open.disconnecting == identifier, open.channel.remote.cid == destination else {
                return [.log("a disconnection response for no request of ours; ignored")]
            }
            channels[source] = nil
            return open.closedForApp ? [] : [.closed(localCID: source, .local)]
        case .reconfigureRequest(let mtu, let mps, let destinations):
            return reconfigureAsked(identifier: identifier, mtu: mtu, mps: mps, peerCIDs: destinations)
        case .reconfigureResponse(let result):
            guard let asked = reconfiguring.removeValue(forKey: identifier) else { return [.log("a reconfigure response to no request of ours; ignored")] }
            guard result == ReconfigureResult.success.rawValue else {
                return [.log("the peer refused to reconfigure channels \(asked.localCIDs) (result 0x\(String(result, radix: 16)))")]
            }
            for cid in asked.localCIDs {
                channels[cid]?.channel.local.mtu = asked.mtu
                channels[cid]?.channel.local.mps = asked.mps
            }
            // This end's MTU and MPS grew; the peer sends bigger SDUs and K-frames from now on.
            return [.log("channels \(asked.localCIDs) now take SDUs of \(asked.mtu) and K-frames of \(asked.mps) octets")]
        }
    }

    /// A Command Reject from the peer: true (with what it meant) when it answered one of this end's requests.
    public mutating func rejected(identifier: UInt8) -> [Output]? {
        if let asked = pending.removeValue(forKey: identifier) {
            for cid in asked.localCIDs { reserved.remove(cid) }
            return [.connectFailed(asked.request, .rejected)]
        }
        if reconfiguring.removeValue(forKey: identifier) != nil { return [.log("the peer does not reconfigure channels")] }
        if let found = channels.first(where: { $0.value.disconnecting == identifier }) {
            channels[found.key] = nil
            return found.value.closedForApp ? [] : [.closed(localCID: found.key, .local)]
        }
        return nil
    }

    // MARK: Requests from the app

    /// Asks the peer for `count` channels to `spsm` (1 in LE mode, up to 5 enhanced). Nil when the link has no CIDs
    /// left for them.
    public mutating func connect(spsm: UInt16, mode: Mode, count: Int = 1) -> (RequestID, [Output])? {
        let count = mode == .le ? 1 : min(max(count, 1), CreditBasedSignal.maxChannelsPerRequest)
        guard channels.count + reserved.count + count <= settings.maxChannels else { return nil }
        var cids: [UInt16] = []
        for _ in 0..<count {
            guard let cid = freeCID(excluding: cids) else { return nil }
            cids.append(cid)
        }
        let identifier = identifiers.next()
        let request = nextRequest
        nextRequest += 1
        reserved.formUnion(cids)
        pending[identifier] = Pending(request: request, spsm: spsm, mode: mode, localCIDs: cids)
        let (mtu, mps, window) = (settings.mtu, settings.mps, initialCredits)
        let signal: CreditBasedSignal = mode == .le
            ? .leConnectionRequest(spsm: spsm, sourceCID: cids[0], mtu: mtu, mps: mps, credits: window)
            : .connectionRequest(spsm: spsm, mtu: mtu, mps: mps, credits: window, sourceCIDs: cids)
        return (request, [.signal(signal.packet(identifier: identifier))])
    }

    /// The shell's signalling timer ran out for a request: what waited for it fails.
    public mutating func timedOut(identifier: UInt8) -> [Output] {
        if let asked = pending.removeValue(forKey: identifier) {
            for cid in asked.localCIDs { reserved.remove(cid) }
            return [.connectFailed(asked.request, .noResponse)]
        }
        if let found = channels.first(where: { $0.value.disconnecting == identifier }) {
            channels[found.key] = nil
            return found.value.closedForApp ? [] : [.closed(localCID: found.key, .noResponse)]
        }
        reconfiguring[identifier] = nil
        return []
    }

    /// The signalling identifiers waiting for the peer (the shell times each out).
    public var outstandingIdentifiers: [UInt8] {
        (Array(pending.keys) + Array(reconfiguring.keys) + channels.values.compactMap(\.disconnecting)).sorted()
    }

    /// Queues an SDU on a channel and sends what its credits allow.
    public mutating func send(_ sdu: [UInt8], on localCID: UInt16) -> Result<[Output], CreditBasedChannel.SendRefusal> {
        guard var open = channels[localCID], open.disconnecting == nil else { return .success([.log("no open channel \(localCID) to send on")]) }
        do { try open.channel.send(sdu) } catch { return .failure(error) }
        let frames = open.channel.takeFrames()
        channels[localCID] = open
        let peer = open.channel.remote.cid
        return .success(frames.map { Output.frame(L2CAPFrame(channel: peer, payload: $0)) })
    }

    /// The app took an SDU it received: credits go back to the peer when enough are owed.
    public mutating func consumed(_ sdu: CreditBasedChannel.ReceivedSDU, on localCID: UInt16) -> [Output] {
        guard var open = channels[localCID] else { return [] }
        let credits = open.channel.consumed(sdu)
        channels[localCID] = open
        guard let credits, open.disconnecting == nil else { return [] }
        return [.signal(CreditBasedSignal.flowControlCredit(cid: localCID, credits: credits).packet(identifier: identifiers.next()))]
    }

    /// A K-frame on one of this link's channels.
    public mutating func receiveFrame(_ payload: [UInt8], on localCID: UInt16) -> [Output] {
        guard var open = channels[localCID] else { return [.log("a K-frame for no channel \(localCID); dropped")] }
        // Data that crosses a Disconnection Request is dropped (Core Vol 3 Part A §4.6).
        guard open.disconnecting == nil else { return [] }
        let outcome = open.channel.receive(payload)
        channels[localCID] = open
        switch outcome {
        case .success(let sdu?): return [.received(localCID: localCID, sdu)]
        case .success(nil): return []
        case .failure(let violation): return disconnect(localCID, because: .violation(violation))
        }
    }

    /// The app closes a channel: a Disconnection Request, and `closed(.local)` once the peer answers.
    public mutating func disconnect(_ localCID: UInt16) -> [Output] { disconnect(localCID, because: .local) }

    /// Asks the peer to take bigger SDUs and K-frames on enhanced channels (Core Vol 3 Part A §4.27): neither may shrink.
    public mutating func reconfigure(_ localCIDs: [UInt16], mtu: UInt16, mps: UInt16) -> [Output] {
        let growing = localCIDs.allSatisfy { cid in
            guard let open = channels[cid] else { return false }
            return open.mode == .enhanced && open.disconnecting == nil && mtu >= open.channel.local.mtu && mps >= open.channel.local.mps
        }
        guard !localCIDs.isEmpty, localCIDs.count <= CreditBasedSignal.maxChannelsPerRequest, growing else {
            return [.log("channels \(localCIDs) cannot be reconfigured to MTU \(mtu), MPS \(mps)")]
        }
        let identifier = identifiers.next()
        reconfiguring[identifier] = PendingReconfigure(localCIDs: localCIDs, mtu: mtu, mps: mps)
        return [.signal(CreditBasedSignal.reconfigureRequest(mtu: mtu, mps: mps, destinationCIDs: localCIDs).packet(identifier: identifier))]
    }

    /// The link ended: every channel and request with it.
    public mutating func linkClosed() -> [Output] {
        var outputs: [Output] = pending.values.sorted { $0.request < $1.request }.map { .connectFailed($0.request, .noResponse) }
        outputs += channels.filter { !$0.value.closedForApp }.keys.sorted().map { Output.closed(localCID: $0, .linkClosed) }
        channels.removeAll()
        pending.removeAll()
        reconfiguring.removeAll()
        reserved.removeAll()
        return outputs
    }

    // MARK: Rules

    private var initialCredits: UInt16 {
        UInt16(min(Int(UInt16.max), max(Int(settings.window), CreditBasedChannel.framesPerSDU(mtu: Int(settings.mtu), mps: Int(settings.mps)))))
    }

    /// The peer asks for channels: refused all at once for the SPSM, security or parameters, or one by one for the
    /// source CIDs and resources (Core Vol 3 Part A §4.23, §4.26).
    private mutating func accept(_ mode: Mode, identifier: UInt8, spsm: UInt16, sources: [UInt16], mtu: UInt16, mps: UInt16, credits: UInt16,
                                 listener: Listener?, security: LinkSecurity, keySize: Int) -> [Output] {
        func refuseAll(_ result: CreditBasedResult) -> [Output] {
            let signal: CreditBasedSignal = mode == .le
                ? .leConnectionResponse(destinationCID: 0, mtu: 0, mps: 0, credits: 0, result: result.rawValue)
                : .connectionResponse(mtu: 0, mps: 0, credits: 0, result: result.rawValue, destinationCIDs: sources.map { _ in 0 })
            return [.signal(signal.packet(identifier: identifier))]
        }
        // SPSMs are 0x0001–0x00FF (Core Vol 3 Part A §4.22).
        guard (0x0001...0x00FF).contains(spsm), let listener else { return refuseAll(.spsmNotSupported) }
        if let refusal = Self.securityRefusal(listener.security, security, keySize: keySize, minimumKeySize: settings.minimumKeySize) {
            return refuseAll(refusal)
        }
        guard listener.authorized else { return refuseAll(.insufficientAuthorization) }
        guard Self.acceptable(mtu: mtu, mps: mps, in: mode) else {
            return refuseAll(mode == .le ? .unacceptableParameters : .invalidParameters)
        }
        var results: [CreditBasedResult] = []
        var destinations: [UInt16] = []
        var opened: [Output] = []
        let inUse = Set(channels.values.map(\.channel.remote.cid))
        for (index, source) in sources.enumerated() {
            let result: CreditBasedResult
            if !Self.dynamicCIDs.contains(source) {
                result = .invalidSourceCID
            } else if inUse.contains(source) || sources[..<index].contains(source) {
                result = .sourceCIDAlreadyAllocated
            } else if channels.count + reserved.count >= settings.maxChannels {
                result = .noResources
            } else if let cid = freeCID(excluding: []) {
                result = .success
                let channel = CreditBasedChannel(local: .init(cid: cid, mtu: settings.mtu, mps: settings.mps),
                                                 remote: .init(cid: source, mtu: mtu, mps: mps),
                                                 window: Int(initialCredits), sendCredits: Int(credits))
                channels[cid] = Open(channel: channel, spsm: spsm, mode: mode)
                destinations.append(cid)
                opened.append(.opened(Opened(localCID: cid, spsm: spsm, mode: mode, peerMTU: mtu, request: nil)))
                results.append(result)
                continue
            } else {
                result = .noResources
            }
            destinations.append(0)
            results.append(result)
        }
        // An enhanced response carries one result: the first refusal, when some channels were refused.
        let result = results.first { $0 != .success } ?? .success
        let accepted = !opened.isEmpty
        let signal: CreditBasedSignal = mode == .le
            ? .leConnectionResponse(destinationCID: destinations[0], mtu: accepted ? settings.mtu : 0, mps: accepted ? settings.mps : 0,
                                    credits: accepted ? initialCredits : 0, result: result.rawValue)
            : .connectionResponse(mtu: accepted ? settings.mtu : 0, mps: accepted ? settings.mps : 0, credits: accepted ? initialCredits : 0,
                                  result: result.rawValue, destinationCIDs: destinations)
        return [.signal(signal.packet(identifier: identifier))] + opened
    }

    /// Which refusal a listener's security requirement gives on this link, if any (Core Vol 3 Part A §4.23): a peer
    /// with keys is asked to encrypt, one without to pair, as the attribute server does (Core Vol 3 Part C §10.3.2).
    public static func securityRefusal(_ needed: Security, _ link: LinkSecurity, keySize: Int, minimumKeySize: Int) -> CreditBasedResult? {
        switch needed {
        case .none:
            return nil
        case .encryption, .authentication:
            if !link.encrypted { return link.bonded ? .insufficientEncryption : .insufficientAuthentication }
            if needed == .authentication, !link.authenticated { return .insufficientAuthentication }
            if keySize < minimumKeySize { return .encryptionKeySizeTooShort }
            return nil
        }
    }

    private mutating func answered(_ asked: Pending, identifier: UInt8, destinations: [UInt16], mtu: UInt16, mps: UInt16, credits: UInt16,
                                   result: UInt16) -> [Output] {
        pending[identifier] = nil
        for cid in asked.localCIDs { reserved.remove(cid) }
        let known = CreditBasedResult(rawValue: result)
        let failure: ConnectFailure = known.map { ConnectFailure.refused($0) } ?? .unknownResult(result)
        guard destinations.count == asked.localCIDs.count else { return [.connectFailed(asked.request, .invalidResponse)] }
        let accepted = destinations.enumerated().filter { $0.element != 0 }
        // Core Vol 3 Part A §4.23: on a refusal the other fields are not looked at.
        guard !accepted.isEmpty, asked.mode == .enhanced || known == .success else { return [.connectFailed(asked.request, failure)] }
        var outputs: [Output] = []
        var inUse = Set(channels.values.map(\.channel.remote.cid))
        for (index, destination) in accepted {
            let local = asked.localCIDs[index]
            guard Self.dynamicCIDs.contains(destination), !inUse.contains(destination), Self.acceptable(mtu: mtu, mps: mps, in: asked.mode) else {
                // A channel the peer opened with fields that break the spec is closed at once.
                let disconnecting = identifiers.next()
                outputs.append(.signal(CreditBasedSignal.disconnectionRequest(destinationCID: destination, sourceCID: local).packet(identifier: disconnecting)))
                outputs.append(.connectFailed(asked.request, .invalidResponse))
                continue
            }
            inUse.insert(destination)
            let channel = CreditBasedChannel(local: .init(cid: local, mtu: settings.mtu, mps: settings.mps),
                                             remote: .init(cid: destination, mtu: mtu, mps: mps), window: Int(initialCredits), sendCredits: Int(credits))
            channels[local] = Open(channel: channel, spsm: asked.spsm, mode: asked.mode)
            outputs.append(.opened(Opened(localCID: local, spsm: asked.spsm, mode: asked.mode, peerMTU: mtu, request: asked.request)))
        }
        if accepted.count < destinations.count { outputs.append(.connectFailed(asked.request, failure)) }
        return outputs
    }

    private mutating func creditsArrived(remoteCID: UInt16, credits: UInt16) -> [Output] {
        // The CID is the peer's end of the channel (§4.24); credits for no channel are ignored.
        guard let found = channels.first(where: { $0.value.channel.remote.cid == remoteCID }), found.value.disconnecting == nil else {
            return [.log("credits for no channel of the peer's CID \(remoteCID); ignored")]
        }
        let cid = found.key
        guard credits > 0 else { return [.log("a credit indication of 0 credits on channel \(cid); ignored")] }
        var open = found.value
        do {
            try open.channel.addSendCredits(credits)
        } catch {
            return disconnect(cid, because: .violation(error))
        }
        let hadSpace = open.channel.hasSpace
        let frames = open.channel.takeFrames()
        channels[cid] = open
        var outputs: [Output] = frames.map { Output.frame(L2CAPFrame(channel: remoteCID, payload: $0)) }
        if !hadSpace, open.channel.hasSpace { outputs.append(.sendable(localCID: cid)) }
        return outputs
    }

    private mutating func reconfigureAsked(identifier: UInt8, mtu: UInt16, mps: UInt16, peerCIDs: [UInt16]) -> [Output] {
        func answer(_ result: ReconfigureResult) -> Output {
            .signal(CreditBasedSignal.reconfigureResponse(result: result.rawValue).packet(identifier: identifier))
        }
        // Core Vol 3 Part A §4.27, §4.28: the CIDs are the peer's own ends of enhanced channels on this link; the MTU
        // may not shrink, nor the MPS of more than one channel; both stay at least 64.
        let localCIDs = peerCIDs.compactMap { peer in channels.first { $0.value.channel.remote.cid == peer && $0.value.mode == .enhanced }?.key }
        guard localCIDs.count == peerCIDs.count else { return [answer(.invalidDestinationCID)] }
        guard Self.acceptable(mtu: mtu, mps: mps, in: .enhanced) else { return [answer(.unacceptableParameters)] }
        let current = localCIDs.compactMap { channels[$0]?.channel.remote }
        guard current.allSatisfy({ mtu >= $0.mtu }) else { return [answer(.mtuReductionNotAllowed)] }
        guard localCIDs.count == 1 || current.allSatisfy({ mps >= $0.mps }) else { return [answer(.mpsReductionNotAllowed)] }
        for cid in localCIDs {
            channels[cid]?.channel.remote.mtu = mtu
            channels[cid]?.channel.remote.mps = mps
        }
        return [answer(.success), .reconfigured(localCIDs: localCIDs, peerMTU: mtu)]
    }

    private mutating func disconnect(_ localCID: UInt16, because reason: CloseReason) -> [Output] {
        guard let open = channels[localCID], open.disconnecting == nil else { return [] }
        let identifier = identifiers.next()
        channels[localCID]?.disconnecting = identifier
        var outputs: [Output] = [.signal(CreditBasedSignal.disconnectionRequest(destinationCID: open.channel.remote.cid, sourceCID: localCID)
            .packet(identifier: identifier))]
        // A channel ended by the peer's fault is closed for the app at once; the peer's answer only completes it.
        if case .violation = reason {
            channels[localCID]?.closedForApp = true
            outputs.append(.closed(localCID: localCID, reason))
        }
        return outputs
    }

    private func freeCID(excluding taken: [UInt16]) -> UInt16? {
        Self.dynamicCIDs.first { channels[$0] == nil && !reserved.contains($0) && !taken.contains($0) }
    }

}
