import BerylCore
import BerylHCI

/// Who may open a lab session: root, and members of the lab group (by primary or supplementary group). A lab session
/// drives the radio and reads every report, so it is never granted to an ordinary app's user.
public enum LabAccess {
    public static let groupName = "beryl-lab"

    public static func isGranted(uid: UInt32, primaryGroup: UInt32?, userName: String?, labGroup: (gid: UInt32, members: [String])?) -> Bool {
        if uid == 0 { return true }
        guard let labGroup else { return false }
        if primaryGroup == labGroup.gid { return true }
        guard let userName else { return false }
        return labGroup.members.contains(userName)
    }
}

/// The address a lab procedure uses on the air (Core Vol 4 Part E §7.8.5 Own_Address_Type); passed to the controller
/// as is: with no resolving-list entry for the peer, the resolvable kinds fall back to public or random.
public enum LabOwnAddress: UInt8, Sendable {
    case `public` = 0, random = 1, resolvableOrPublic = 2, resolvableOrRandom = 3

    public var needsRandomAddress: Bool { self == .random || self == .resolvableOrRandom }

    /// The random address a lab's RANDOM procedures use: the controller has one (LE Set Random Address, Core Vol 4
    /// Part E §7.8.4) shared with the apps' procedures, so a random identity is used as it is rather than replaced;
    /// else the one made for the lab, which is to be set (`set`).
    public static func labRandomAddress(identity: DeviceAddress?, made: BDAddress) -> (address: BDAddress, set: Bool) {
        if let identity, identity.type.isRandom { return (identity.address, false) }
        return (made, true)
    }
}

/// What a lab session asked the controller to advertise: legacy PDUs with the caller's own AD structures.
public struct LabAdvertising: Equatable, Sendable {
    public enum Kind: UInt8, Sendable {
        // Advertising_Type (Core Vol 4 Part E §7.8.5); high duty cycle directed is not offered (it times out in 1.28 s).
        case connectableUndirected = 0x00, scannableUndirected = 0x02, nonConnectable = 0x03, connectableDirectedLowDuty = 0x04
    }

    public enum Refusal: Error, Equatable, Sendable {
        case dataTooLong(field: String, length: Int)
        case intervalOutOfRange(UInt32)
    }

    public var kind: Kind
    public var data: [UInt8]
    public var scanResponse: [UInt8]
    public var ownAddress: LabOwnAddress
    public var directedTo: DeviceAddress?
    public var interval: UInt16

    /// Legacy advertising carries at most 31 bytes per PDU (Core Vol 3 Part C §11) at 20 ms to 10.24 s (Vol 4 Part E §7.8.5).
    /// A directed advertiser sends ADV_DIRECT_IND, connectable by its PDU type (Core Vol 6 Part B §2.3.1.2), whatever
    /// `connectable` says.
    public init(data: [UInt8], scanResponse: [UInt8], connectable: Bool, scannable: Bool, directedTo: DeviceAddress?,
                ownAddress: LabOwnAddress, interval: UInt32) throws(Refusal) {
        guard data.count <= 31 else { throw .dataTooLong(field: "data", length: data.count) }
        guard scanResponse.count <= 31 else { throw .dataTooLong(field: "scan_response", length: scanResponse.count) }
        let chosen = interval == 0 ? 0x00A0 : interval
        guard (0x0020...0x4000).contains(chosen) else { throw .intervalOutOfRange(interval) }
        self.data = data
        self.scanResponse = scanResponse
        self.ownAddress = ownAddress
        self.directedTo = directedTo
        self.interval = UInt16(chosen)
        kind = directedTo != nil ? .connectableDirectedLowDuty : connectable ? .connectableUndirected : scannable ? .scannableUndirected : .nonConnectable
    }

    /// The commands that start it, with advertising off first (parameters change only then, §7.8.5).
    public var commands: [HCICommandPacket] {
        [
            HCICommands.leSetAdvertisingEnable(false),
            HCICommands.leSetAdvertisingParameters(interval: interval, type: kind.rawValue, ownAddressType: ownAddress.rawValue, directedTo: directedTo),
            HCICommands.leSetAdvertisingData(data),
            HCICommands.leSetAdvertisingData(scanResponse, scanResponse: true),
            HCICommands.leSetAdvertisingEnable(true),
        ]
    }
}

/// A link's timing as the controller reported it (LE Connection Complete §7.7.65.1, §7.7.65.10; LE Connection Update
/// Complete §7.7.65.3): interval in 1.25 ms units, latency in connection events, supervision timeout in 10 ms units.
public struct LinkTiming: Equatable, Sendable {
    public var handle: UInt16
    public var interval: UInt16
    public var latency: UInt16
    public var supervisionTimeout: UInt16

    public init(handle: UInt16, interval: UInt16, latency: UInt16, supervisionTimeout: UInt16) {
        self.handle = handle
        self.interval = interval
        self.latency = latency
        self.supervisionTimeout = supervisionTimeout
    }

    /// Nil for other events, failed ones, and ones too short for what they claim.
    public init?(_ event: HCIEventPacket) {
        let p = event.parameters
        guard event.code == HCIEventCode.leMeta.rawValue, let subevent = p.first.flatMap(LESubevent.init(rawValue:)) else { return nil }
        let timingAt: Int
        switch subevent {
        case .connectionComplete: timingAt = 12
        case .enhancedConnectionComplete: timingAt = 24
        case .connectionUpdateComplete: timingAt = 4
        default: return nil
        }
        guard p.count >= timingAt + 6, p[1] == 0 else { return nil }
        func u16(_ at: Int) -> UInt16 { UInt16(p[at]) | UInt16(p[at + 1]) << 8 }
        self.init(handle: u16(2) & 0x0FFF, interval: u16(timingAt), latency: u16(timingAt + 2), supervisionTimeout: u16(timingAt + 4))
    }
}

/// A lab link's security as attd last reported it.
public struct LabSecurity: Equatable, Sendable {
    public var encrypted = false
    public var authenticated = false
    public var bonded = false
    public var secureConnections = false
    public var keySize: UInt8 = 0

    public init(encrypted: Bool = false, authenticated: Bool = false, bonded: Bool = false, secureConnections: Bool = false, keySize: UInt8 = 0) {
        self.encrypted = encrypted
        self.authenticated = authenticated
        self.bonded = bonded
        self.secureConnections = secureConnections
        self.keySize = keySize
    }
}

/// What a lab hears when a link's security changes, and what LabSecure answers.
public enum LabSecurityOutcome: Equatable, Sendable {
    case secured(LabSecurity)
    /// Core Vol 3 Part H §3.5.5 reasons; `remote` when the peer sent Pairing Failed.
    case pairingFailed(reason: UInt8, remote: Bool)
    /// The HCI status of a failed encryption (0x06 PIN or Key Missing: the peer lost its bond).
    case encryptionFailed(status: UInt8)
    /// The link ended first, for this HCI reason.
    case linkClosed(reason: UInt8)
}

/// The one lab session (beryl-pandora) beside the apps' managers: what it runs on the controller, which links are its,
/// and what each of its links' security is. Sans-IO: managerd turns requests into calls here and the answers into
/// HCI commands, attd requests and lab events.
public struct LabSession: Sendable {
    /// The lab's scan runs fast, passive only when no app scans (apps need scan responses for names).
    public struct Scan: Equatable, Sendable {
        public var passive: Bool
        public var ownAddress: LabOwnAddress
        public init(passive: Bool, ownAddress: LabOwnAddress) {
            self.passive = passive
            self.ownAddress = ownAddress
        }
    }

    /// The connection the lab waits for, answered when the link is up.
    public struct Attempt: Equatable, Sendable {
        public var identifier: String
        public var address: DeviceAddress
        public var ownAddress: LabOwnAddress
    }

    /// What a link that came up is to the lab.
    public struct LinkUp: Equatable, Sendable {
        /// The link is the lab's: it answers the link's pairings and takes back the identifier the link made known.
        public var isLab: Bool
        /// The address pairing hashes as ours on it, when the lab asked for one (nil: the controller's identity).
        public var ownAddress: LabOwnAddress?
        /// The lab's connection attempt this link answers.
        public var answers: Attempt?
        public init(isLab: Bool, ownAddress: LabOwnAddress?, answers: Attempt?) {
            self.isLab = isLab
            self.ownAddress = ownAddress
            self.answers = answers
        }
    }

    public enum Refusal: Error, Equatable, Sendable, CustomStringConvertible {
        case attemptUnderWay(DeviceAddress)
        case linkExists(DeviceAddress, handle: UInt16)

        public var description: String {
            switch self {
            case .attemptUnderWay(let address): "a connection attempt is under way (to \(address))"
            case .linkExists(let address, let handle): "a link to \(address) exists (handle 0x\(String(handle, radix: 16)))"
            }
        }
    }

    public let session: UInt64
    public var advertising: LabAdvertising?
    public var scan: Scan?
    public private(set) var attempt: Attempt?
    /// Links a remote central made to the lab's advertising (the lab holds its central links in the connection book).
    public private(set) var peripheralLinks: Set<UInt16> = []
    private var security: [UInt16: LabSecurity] = [:]
    /// The address pairing hashes as ours on each of the lab's links (nil: the controller's identity), for a new attd.
    public private(set) var pairingAddresses: [UInt16: LabOwnAddress?] = [:]
    /// The last way each link's security failed: LabSecure's typed answer when attd's own answer is only a failure.
    private var lastFailure: [UInt16: LabSecurityOutcome] = [:]

    public init(session: UInt64) { self.session = session }

    /// The lab holds its links in the connection book as this manager.
    public var key: ManagerKey { ManagerKey(session: session, manager: UInt32.max) }

    /// `holders`: who holds the link in the connection book (nil when the book has no such link).
    public func owns(_ handle: UInt16, holders: Set<ManagerKey>?) -> Bool {
        peripheralLinks.contains(handle) || holders?.contains(key) == true
    }

    /// What LabLink reports of the link's security; nil until attd said something of it.
    public func security(of handle: UInt16) -> LabSecurity? { security[handle] }

    // MARK: Procedures

    /// LabConnect: one attempt at a time, and none to a peer a link already joins (the controller would refuse it,
    /// Connection Already Exists, Core Vol 1 Part F §2).
    public func mayConnect(to address: DeviceAddress, in book: ConnectionBook) throws(Refusal) {
        if let attempt { throw .attemptUnderWay(attempt.address) }
        if let link = book.links.values.first(where: { $0.address == address }) { throw .linkExists(address, handle: link.handle) }
    }

    /// The links that go with the lab's work: those only the lab holds, and those remote centrals made to its advertising.
    public func links(endingWithWorkIn book: ConnectionBook) -> [UInt16] {
        book.links.values.filter { $0.holders == [key] || peripheralLinks.contains($0.handle) }.map(\.handle).sorted()
    }

    public mutating func startConnecting(identifier: String, address: DeviceAddress, ownAddress: LabOwnAddress) throws(Refusal) {
        if let attempt { throw .attemptUnderWay(attempt.address) }
        attempt = Attempt(identifier: identifier, address: address, ownAddress: ownAddress)
    }

    /// Cancelled, or ended with the lab's work: the attempt it was.
    public mutating func endAttempt() -> Attempt? {
        defer { attempt = nil }
        return attempt
    }

    /// The Own_Address_Type a central attempt to `address` uses: the lab's when the lab asked for that peer.
    public func ownAddress(connectingTo address: DeviceAddress) -> LabOwnAddress? {
        attempt.flatMap { $0.address == address ? $0.ownAddress : nil }
    }

    /// Advertising, scan and attempt end; what they made stays (links end through the shell).
    public mutating func endWork() -> Attempt? {
        advertising = nil
        scan = nil
        return endAttempt()
    }

    // MARK: Links

    /// A peripheral link is the lab's when the lab advertises; a central one when the lab holds it in the book.
    public mutating func linkUp(_ handle: UInt16, central: Bool, peer: DeviceAddress, holders: Set<ManagerKey>?) -> LinkUp {
        if !central, advertising != nil { peripheralLinks.insert(handle) }
        let own = central ? ownAddress(connectingTo: peer) : advertising?.ownAddress
        var answered: Attempt?
        if central, let attempt, attempt.address == peer {
            answered = attempt
            self.attempt = nil
        }
        let isLab = owns(handle, holders: holders)
        if isLab { pairingAddresses.updateValue(own, forKey: handle) }  // nil kept: the controller's identity
        return LinkUp(isLab: isLab, ownAddress: own, answers: answered)
    }

    /// The handle may come back for another link; a LabSecure answered after this reports the link closing.
    public mutating func linkDown(_ handle: UInt16, reason: UInt8) {
        peripheralLinks.remove(handle)
        pairingAddresses[handle] = nil
        security[handle] = nil
        lastFailure[handle] = .linkClosed(reason: reason)
    }

    // MARK: Security

    /// LabSecure was asked: earlier failures no longer answer it.
    public mutating func securing(_ handle: UInt16) { lastFailure[handle] = nil }

    /// attd secured the link: what LabSecure answers.
    public mutating func secured(_ handle: UInt16, _ state: LabSecurity) -> LabSecurityOutcome {
        security[handle] = state
        return .secured(state)
    }

    /// attd's answer was a failure: its events, which came first, said how; else Unspecified Reason (Core Vol 3 Part H §3.5.5).
    public func securingFailed(_ handle: UInt16) -> LabSecurityOutcome {
        lastFailure[handle] ?? .pairingFailed(reason: 0x08, remote: false)
    }

    public mutating func pairingFinished(_ handle: UInt16, _ result: Result<LabSecurity, LabPairingFailure>) -> LabSecurityOutcome {
        switch result {
        case .success(let state):
            security[handle] = state
            return .secured(state)
        case .failure(let failure):
            let outcome = LabSecurityOutcome.pairingFailed(reason: failure.reason, remote: failure.remote)
            lastFailure[handle] = outcome
            return outcome
        }
    }

    /// Encryption went on or off (status 0), or failed: a failure is remembered; a change keeps what pairing said of
    /// Secure Connections and the key size.
    public mutating func securityChanged(_ handle: UInt16, status: UInt8, encrypted: Bool, authenticated: Bool, bonded: Bool) -> LabSecurityOutcome {
        guard status == 0 else {
            let outcome = LabSecurityOutcome.encryptionFailed(status: status)
            lastFailure[handle] = outcome
            return outcome
        }
        var state = security[handle] ?? LabSecurity()
        state.encrypted = encrypted
        state.authenticated = authenticated
        state.bonded = bonded
        security[handle] = state
        return .secured(state)
    }
}

public struct LabPairingFailure: Error, Equatable, Sendable {
    public var reason: UInt8
    public var remote: Bool
    public init(reason: UInt8, remote: Bool) {
        self.reason = reason
        self.remote = remote
    }
}
