import BerylCore

/// The peripheral role between remote centrals and apps: which manager owns each published service's handles, which
/// reads and writes wait for an app's one answer (Core Bluetooth's respond(to:withResult:)). Who is owed
/// peripheralManagerIsReady(toUpdateSubscribers:) is attd's pacer's to know: managerd sends each app's values on its behalf.
public struct PeripheralRouter: Sendable {
    public struct Service: Equatable, Sendable {
        public var range: ClosedRange<UInt16>
        public var owner: ManagerKey
        public init(range: ClosedRange<UInt16>, owner: ManagerKey) {
            self.range = range
            self.owner = owner
        }
    }

    public enum Request: Equatable, Sendable { case read, write }

    public private(set) var services: [Service] = []
    private var open: [UInt64: (owner: ManagerKey, request: Request)] = [:]

    public init() {}

    // MARK: Services

    public mutating func publish(_ range: ClosedRange<UInt16>, owner: ManagerKey) {
        services.append(Service(range: range, owner: owner))
    }

    public func owner(of handle: UInt16) -> ManagerKey? { services.first { $0.range.contains(handle) }?.owner }

    public func services(of owner: ManagerKey) -> [Service] { services.filter { $0.owner == owner } }

    /// Whether a value handle lies in one of the manager's services (an app updates only its own values).
    public func owns(_ owner: ManagerKey, handle: UInt16) -> Bool { services.contains { $0.owner == owner && $0.range.contains(handle) } }

    /// Whoever has a service published.
    public var publishers: Set<ManagerHolder> { Set(services.map(\.owner.holder)) }

    /// The manager's service that starts at `start`, removed; nil when it has none there.
    public mutating func remove(start: UInt16, owner: ManagerKey) -> Service? {
        guard let index = services.firstIndex(where: { $0.range.lowerBound == start && $0.owner == owner }) else { return nil }
        return services.remove(at: index)
    }

    /// Removes the services `goes` picks and returns them (for the shell to take out of the database).
    public mutating func removeAll(where goes: (Service) -> Bool) -> [Service] {
        let gone = services.filter(goes)
        services.removeAll(where: goes)
        return gone
    }

    // MARK: Requests from remote centrals

    /// Where a remote central's read or write of a value only its app can answer goes.
    public enum Route: Equatable, Sendable {
        case app(ManagerKey)
        /// No app can answer now (none owns the handle, its app is gone for good, or it is suspended): answered at once
        /// with Unlikely Error, as Core Bluetooth refuses a suspended app's dynamic reads.
        case unlikelyError
        /// A write without response no app can take: nothing to answer.
        case dropped
    }

    /// `handles`: the read's, or each queued write's of an Execute Write; one owner must hold them all, or no app is
    /// asked (one app would be handed another's values, and its answer would settle both). `expectsAnswer`: a read,
    /// or a write with response (Core Vol 3 Part F §3.4.5.1); `answerable`: whether the owner's holder can answer now
    /// (a live session, or a preserved manager whose app is launched to answer).
    public mutating func route(_ id: UInt64, _ request: Request, handles: [UInt16], expectsAnswer: Bool,
                               answerable: (ManagerHolder) -> Bool) -> Route {
        let owners = Set(handles.map { owner(of: $0) })
        guard owners.count == 1, let owner = owners.first ?? nil, answerable(owner.holder) else { return expectsAnswer ? .unlikelyError : .dropped }
        if expectsAnswer { open[id] = (owner, request) }
        return .app(owner)
    }

    public enum AnswerRefusal: Error, Equatable, Sendable {
        /// Answered already, timed out, or never this app's (Core Bluetooth's rule: one answer per request).
        case notPending
        /// An ATT error code is one byte; the application range is 0x80–0x9F (Core Vol 3 Part F §3.4.1.1).
        case notAnATTError
    }

    /// The app's answer to request `id`; returns what was asked, for the shell to answer attd.
    public mutating func answer(_ id: UInt64, from holder: ManagerHolder, attError: UInt32) throws(AnswerRefusal) -> Request {
        guard let pending = open[id], pending.owner.holder == holder else { throw .notPending }
        guard attError <= 0xFF else { throw .notAnATTError }
        open[id] = nil
        return pending.request
    }

    /// The holder is gone: its pending requests, for the shell to answer for it (Unlikely Error) so that no remote
    /// central is left waiting, and it is owed nothing more.
    public mutating func abandon(_ holder: ManagerHolder) -> [(id: UInt64, request: Request)] {
        let mine = open.filter { $0.value.owner.holder == holder }.map { (id: $0.key, request: $0.value.request) }.sorted { $0.id < $1.id }
        for (id, _) in mine { open[id] = nil }
        return mine
    }

    /// attd went, and its database and requests with it.
    public mutating func attdLost() {
        services.removeAll()
        open.removeAll()
    }

    /// The manager moved (its app went, or came back): what it owns and is owed moves with it.
    public mutating func rebind(_ old: ManagerHolder, to new: ManagerHolder) {
        for index in services.indices where services[index].owner.holder == old { services[index].owner.holder = new }
        for (id, pending) in open where pending.owner.holder == old { open[id] = (ManagerKey(new, manager: pending.owner.manager), pending.request) }
    }
}
