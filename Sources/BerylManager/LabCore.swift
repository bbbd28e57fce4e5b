import BerylCore
import BerylHCI

/// Why a lab request is refused, or why an answer owed to the lab ends without what it asked for. BerylManagerWire
/// gives each its IPC code and field.
public enum LabRefusal: Error, Equatable, Sendable, CustomStringConvertible {
    case notLabSession
    case appSessionCannotBecomeLab
    case notGranted(uid: UInt32)
    case anotherLabOpen(session: UInt64)
    case connect(LabSession.Refusal)
    case peripheralStoreUnusable
    case noLink(handle: UInt32)
    case noLabLink(handle: UInt32)
    case recordUnreadable
    case attdNotAttached
    case resetUnderWay
    case resetFailed(String)
    /// The pending connection attempt ended: cancelled by the lab, by its factory reset, or by LabOpen again.
    case attemptCancelled(DeviceAddress)
    case attemptEndedByReset
    case reopened
    /// The lab that asked is gone (closed, or opened again since).
    case labClosed

    public var description: String {
        switch self {
        case .notLabSession: "not a lab session: send LabOpen first"
        case .appSessionCannotBecomeLab: "an app session cannot become a lab session"
        case .notGranted(let uid): "unauthorized: a lab session needs root or the \(LabAccess.groupName) group (uid \(uid))"
        case .anotherLabOpen(let session): "another lab session is open (session \(session))"
        case .connect(let refusal): "\(refusal)"
        case .peripheralStoreUnusable: "the peripheral store is unusable"
        case .noLink(let handle): "no link 0x\(String(handle, radix: 16))"
        case .noLabLink(let handle): "no lab link 0x\(String(handle, radix: 16))"
        case .attdNotAttached: "attd is not attached"
        case .recordUnreadable:
            "the lab's record in the state directory is unreadable, so what the lab made cannot be told apart; see managerd's log"
        case .resetUnderWay: "a factory reset is under way"
        case .resetFailed(let reason): reason
        case .attemptCancelled(let address): "the connection attempt to \(address) was cancelled"
        case .attemptEndedByReset: "factory reset"
        case .reopened: "the lab session was opened again"
        case .labClosed: "the lab session closed"
        }
    }
}

/// What a lab hears, beside the answers to its requests.
public enum LabEvent: Equatable, Sendable {
    case linkUp(handle: UInt16)
    case linkDown(handle: UInt16, reason: UInt8)
    case connectFailed(status: UInt8)
    case linkUpdated(handle: UInt16)
    case security(handle: UInt16, LabSecurityOutcome)
}

/// The lab session's part of managerd, sans-IO: who may open it, what it runs on the controller, its connection
/// attempt and factory reset, which links and answers are its. `Reply` is the shell's handle on a request owed an
/// answer; the core keeps the two answered later (the connection attempt, the factory reset) and says when each is due.
/// What the lab made (bonds, identifiers) is kept by the shell in its record file; the core says what goes in and out.
public struct LabCore<Reply> {
    public enum Answer: Equatable, Sendable {
        case ack
        /// The attempt's link is up.
        case link(handle: UInt16)
    }

    public enum Output {
        case answer(Reply, Answer)
        case refuse(Reply, LabRefusal)
        /// LabOpen and LabGetInfo are answered with the controller's state and addresses, which the shell asks hcid for.
        case welcome(Reply, session: UInt64)
        case disconnect(UInt16, answering: Reply?)
        /// The lab's random address is set on the controller (LE Set Random Address, Core Vol 4 Part E §7.8.4).
        case setRandomAddress
        /// How attd pairs the next link in a role (nil own address: the lab withdraws it), before the link exists: a peer
        /// may start pairing before a message naming the link's handle could reach attd.
        case pairingForNextLink(central: Bool, peer: DeviceAddress?, ownAddress: LabOwnAddress?)
        /// The lab answers every pairing on its link, Just Works included; pairing hashes the address the link uses.
        case pairingForLink(handle: UInt16, ownAddress: LabOwnAddress?)
        case connect(ManagerKey, identifier: String, address: DeviceAddress)
        case cancelConnect(ManagerKey, identifier: String)
        /// The controller's advertising is planned again; the reply (if any) hears whether it could be set.
        case advertisingChanged(answering: Reply?)
        /// The controller's scan is planned again; `restart`: its parameters changed, so it is set up afresh.
        case scanChanged(restart: Bool)
        case event(session: UInt64, LabEvent)
        case removeLabBonds
        case resetController
        case forgetLabPeripherals
        /// An identifier only the lab's link made known, which its factory reset takes back.
        case recordPeripheral(String)
    }

    public private(set) var session: LabSession?
    /// Counts LabOpen: an answer owed to one lab is never applied to the next.
    private var openings: UInt64 = 0
    private var attemptReply: Reply?
    private var reset = LabReset()
    private var resetReply: Reply?
    public private(set) var timings: [UInt16: LinkTiming] = [:]

    public init() {}

    public var scan: LabSession.Scan? { session?.scan }
    public var advertising: LabAdvertising? { session?.advertising }
    public var peripheralLinks: Set<UInt16> { session?.peripheralLinks ?? [] }
    /// Apps stay poweredOn through the lab's controller reset.
    public var isResettingController: Bool { reset.isResettingController }
    public var nextDeadline: Duration? { reset.nextDeadline }

    public func isLabSession(_ id: UInt64) -> Bool { session?.session == id }

    public func owns(_ handle: UInt16, in book: ConnectionBook) -> Bool {
        session?.owns(handle, holders: book.identifier(for: handle).flatMap { book.link(for: $0)?.holders }) ?? false
    }

    /// The Own_Address_Type of a central attempt: the lab's when the lab asked for that peer.
    public func ownAddress(connectingTo address: DeviceAddress) -> LabOwnAddress? { session?.ownAddress(connectingTo: address) }

    // MARK: Opening and closing

    /// `otherSessionIsLive`: whether the session holding the lab now is still connected (one whose close was not seen
    /// yet is replaced).
    public mutating func open(session id: UInt64, saidHello: Bool, granted: Bool, uid: UInt32, otherSessionIsLive: (UInt64) -> Bool,
                              _ reply: Reply) -> [Output] {
        guard !saidHello else { return [.refuse(reply, .appSessionCannotBecomeLab)] }
        guard granted else { return [.refuse(reply, .notGranted(uid: uid))] }
        if let session, session.session != id, otherSessionIsLive(session.session) {
            return [.refuse(reply, .anotherLabOpen(session: session.session))]
        }
        // LabOpen again (same session, or one whose close was not seen yet) starts afresh: its pending connect is told.
        var outputs = takeAttemptReply(.reopened)
        openings += 1
        session = LabSession(session: id)
        outputs += [.setRandomAddress, .welcome(reply, session: id)]
        return outputs
    }

    /// The lab's work ends with its session; what it made stays recorded for the next factory reset.
    public mutating func sessionClosed(_ id: UInt64, book: ConnectionBook) -> [Output] {
        guard isLabSession(id) else { return [] }
        // The shell plans advertising and scanning again after this returns, with no lab left.
        defer { session = nil }
        return endWork(book: book, attemptRefusal: .labClosed)
    }

    // MARK: Advertising and scanning

    public mutating func advertise(_ advertising: LabAdvertising, _ reply: Reply) -> [Output] {
        session?.advertising = advertising
        return [.pairingForNextLink(central: false, peer: nil, ownAddress: advertising.ownAddress), .advertisingChanged(answering: reply)]
    }

    public mutating func stopAdvertising(_ reply: Reply) -> [Output] {
        session?.advertising = nil
        return [.pairingForNextLink(central: false, peer: nil, ownAddress: nil), .advertisingChanged(answering: nil), .answer(reply, .ack)]
    }

    public mutating func scan(_ scan: LabSession.Scan, _ reply: Reply) -> [Output] {
        session?.scan = scan
        return [.scanChanged(restart: true), .answer(reply, .ack)]
    }

    public mutating func stopScan(_ reply: Reply) -> [Output] {
        session?.scan = nil
        return [.scanChanged(restart: false), .answer(reply, .ack)]
    }

    // MARK: Connecting

    /// `see`: the identifier the peer has (made now if it had none, then `madeKnown`); nil when the store is unusable.
    public mutating func connect(to address: DeviceAddress, ownAddress: LabOwnAddress, book: ConnectionBook,
                                 see: (DeviceAddress) -> (identifier: String, madeKnown: Bool)?, _ reply: Reply) -> [Output] {
        guard let lab = session else { return [.refuse(reply, .notLabSession)] }
        do {
            try lab.mayConnect(to: address, in: book)
        } catch {
            return [.refuse(reply, .connect(error))]
        }
        guard let seen = see(address) else { return [.refuse(reply, .peripheralStoreUnusable)] }
        try? session?.startConnecting(identifier: seen.identifier, address: address, ownAddress: ownAddress)
        attemptReply = reply
        return (seen.madeKnown ? [.recordPeripheral(seen.identifier)] : [])
            + [.pairingForNextLink(central: true, peer: address, ownAddress: ownAddress), .connect(lab.key, identifier: seen.identifier, address: address)]
    }

    public mutating func cancelConnect(_ reply: Reply) -> [Output] {
        guard let key = session?.key, let attempt = session?.endAttempt() else { return [.answer(reply, .ack)] }
        return [.pairingForNextLink(central: true, peer: attempt.address, ownAddress: nil), .cancelConnect(key, identifier: attempt.identifier)]
            + takeAttemptReply(.attemptCancelled(attempt.address)) + [.answer(reply, .ack)]
    }

    /// Disconnect only names a link that exists (handles are 12 bits, Core Vol 4 Part E §5.4.2).
    public func disconnect(_ handle: UInt32, book: ConnectionBook, _ reply: Reply) -> [Output] {
        guard handle <= 0x0EFF, book.identifier(for: UInt16(handle)) != nil else { return [.refuse(reply, .noLink(handle: handle))] }
        return [.disconnect(UInt16(handle), answering: reply)]
    }

    // MARK: Links

    /// `madeKnown`: the identifier a new link's peer was just given, which is the lab's to take back if the link is.
    public mutating func linkEvent(_ event: LinkEvent, madeKnown: String?, book: ConnectionBook) -> [Output] {
        guard let lab = session else { return [] }
        switch event {
        case .connected(let handle, let central, let peer):
            guard let identifier = book.identifier(for: handle), let link = book.link(for: identifier),
                  let up = session?.linkUp(handle, central: central, peer: peer, holders: link.holders) else { return [] }
            var outputs: [Output] = []
            if up.isLab {
                if let madeKnown { outputs.append(.recordPeripheral(madeKnown)) }
                outputs.append(.pairingForLink(handle: handle, ownAddress: up.ownAddress))
            }
            if up.answers != nil, let reply = attemptReply {
                attemptReply = nil
                outputs.append(.answer(reply, .link(handle: handle)))
            }
            return outputs + [.event(session: lab.session, .linkUp(handle: handle))]
        case .connectionFailed(let status):
            return [.event(session: lab.session, .connectFailed(status: status))]
        case .disconnected(let handle, let reason):
            session?.linkDown(handle, reason: reason)
            return [.event(session: lab.session, .linkDown(handle: handle, reason: reason))]
        default:
            return []
        }
    }

    /// A link's timing from the controller; the lab hears of updates on links the book knows.
    public mutating func timingChanged(_ timing: LinkTiming, isUpdate: Bool, book: ConnectionBook) -> [Output] {
        timings[timing.handle] = timing
        guard isUpdate, let lab = session, book.identifier(for: timing.handle) != nil else { return [] }
        return [.event(session: lab.session, .linkUpdated(handle: timing.handle))]
    }

    public mutating func linkGone(_ handle: UInt16) { timings[handle] = nil }

    /// A new attd (the last one went) knows nothing of how the lab pairs: told again for the lab's links it has
    /// (`bearers`) and for the next link of its advertising and of its connection attempt.
    public func attdAttached(bearers: Set<UInt16>, book: ConnectionBook) -> [Output] {
        guard let lab = session else { return [] }
        var outputs = lab.pairingAddresses.sorted { $0.key < $1.key }.filter { bearers.contains($0.key) && owns($0.key, in: book) }.map {
            Output.pairingForLink(handle: $0.key, ownAddress: $0.value)
        }
        if let advertising = lab.advertising { outputs.append(.pairingForNextLink(central: false, peer: nil, ownAddress: advertising.ownAddress)) }
        if let attempt = lab.attempt { outputs.append(.pairingForNextLink(central: true, peer: attempt.address, ownAddress: attempt.ownAddress)) }
        return outputs
    }

    // MARK: Security

    /// LabSecure on a lab link: attd pairs (or encrypts with a bond's key). The opening returned goes back with attd's
    /// answer to `secured`.
    public mutating func secure(_ handle: UInt32, book: ConnectionBook, attdAttached: Bool) -> Result<UInt64, LabRefusal> {
        guard handle <= 0x0EFF, owns(UInt16(handle), in: book) else { return .failure(.noLabLink(handle: handle)) }
        // Before `securing`: a LabSecure still waiting keeps the failure attd's events reported.
        guard attdAttached else { return .failure(.attdNotAttached) }
        session?.securing(UInt16(handle))
        return .success(openings)
    }

    /// attd answered LabSecure (nil: it failed, and its events, which came first, said how). A lab opened since (even
    /// by the same session) is not this one's to change or answer from.
    public mutating func secured(_ handle: UInt16, opening: UInt64, _ state: LabSecurity?) -> Result<LabSecurityOutcome, LabRefusal> {
        guard var lab = session, opening == openings else { return .failure(.labClosed) }
        guard let state else { return .success(lab.securingFailed(handle)) }
        defer { session = lab }
        return .success(lab.secured(handle, state))
    }

    public mutating func pairingFinished(_ handle: UInt16, _ result: Result<LabSecurity, LabPairingFailure>) -> [Output] {
        guard let lab = session, let outcome = session?.pairingFinished(handle, result) else { return [] }
        return [.event(session: lab.session, .security(handle: handle, outcome))]
    }

    public mutating func securityChanged(_ handle: UInt16, status: UInt8, encrypted: Bool, authenticated: Bool, bonded: Bool) -> [Output] {
        guard let lab = session,
              let outcome = session?.securityChanged(handle, status: status, encrypted: encrypted, authenticated: authenticated, bonded: bonded)
        else { return [] }
        return [.event(session: lab.session, .security(handle: handle, outcome))]
    }

    // MARK: Factory reset

    /// `recordReadable`: a damaged record cannot tell what the lab made from what apps made, so nothing is reset.
    public mutating func factoryReset(keepBonds: Bool, recordReadable: Bool, book: ConnectionBook, at now: Duration, _ reply: Reply) -> [Output] {
        guard recordReadable else { return [.refuse(reply, .recordUnreadable)] }
        let steps: [LabReset.Output]
        do {
            steps = try reset.start(keepBonds: keepBonds, links: Set(book.links.values.map(\.handle)), at: now)
        } catch {
            return [.refuse(reply, .resetUnderWay)]
        }
        resetReply = reply
        return apply(steps, book: book)
    }

    public mutating func linkEnded(_ handle: UInt16, book: ConnectionBook, at now: Duration) -> [Output] {
        apply(reset.linkEnded(handle, at: now), book: book)
    }

    public mutating func tick(book: ConnectionBook, at now: Duration) -> [Output] { apply(reset.tick(at: now), book: book) }

    /// hcid answered the controller's reset (with why not, when it could not).
    public mutating func controllerReset(failure: String?, book: ConnectionBook) -> [Output] {
        apply(reset.controllerReset(failure: failure), book: book)
    }

    private mutating func apply(_ steps: [LabReset.Output], book: ConnectionBook) -> [Output] {
        var outputs: [Output] = []
        for step in steps {
            switch step {
            case .endLabWork: outputs += endWork(book: book, attemptRefusal: .attemptEndedByReset)
            case .removeLabBonds: outputs.append(.removeLabBonds)
            case .disconnect(let handle): outputs.append(.disconnect(handle, answering: nil))
            case .resetController: outputs.append(.resetController)
            case .forgetLabPeripherals: outputs.append(.forgetLabPeripherals)
            case .finished(let failure):
                guard let reply = resetReply else { continue }
                resetReply = nil
                outputs.append(failure.map { .refuse(reply, .resetFailed($0)) } ?? .answer(reply, .ack))
            }
        }
        return outputs
    }

    /// The lab's advertising, scan, attempt and its own links end; its bonds and records stay.
    private mutating func endWork(book: ConnectionBook, attemptRefusal: LabRefusal) -> [Output] {
        guard let lab = session else { return [] }
        let attempt = session?.endWork()
        var outputs: [Output] = [.pairingForNextLink(central: false, peer: nil, ownAddress: nil)]
        if let attempt {
            outputs.append(.cancelConnect(lab.key, identifier: attempt.identifier))
            outputs += takeAttemptReply(attemptRefusal)
        }
        outputs += lab.links(endingWithWorkIn: book).map { .disconnect($0, answering: nil) }
        return outputs + [.advertisingChanged(answering: nil), .scanChanged(restart: false)]
    }

    private mutating func takeAttemptReply(_ refusal: LabRefusal) -> [Output] {
        guard let reply = attemptReply else { return [] }
        attemptReply = nil
        return [.refuse(reply, refusal)]
    }
}

extension LabCore.Output: Equatable where Reply: Equatable {}
extension LabCore: Sendable where Reply: Sendable {}
