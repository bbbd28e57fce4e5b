import BerylCore

/// The role a preserved manager plays (Core Bluetooth keeps central and peripheral managers' restore identifiers apart).
public enum ManagerRole: Int, Codable, Sendable, CustomStringConvertible {
    case central = 1
    case peripheral = 2

    public var description: String { self == .central ? "central" : "peripheral" }
}

/// One manager that opted into restoration. While its app runs, the app's session holds the manager's work; while it
/// does not, the preserved manager holds it under its own id (`ManagerHolder.preserved`), never under a session's.
public struct PreservedManager: Equatable, Sendable {
    public let id: UInt64
    public let appID: String
    public let restoreID: String
    public let role: ManagerRole
    public fileprivate(set) var holder: ManagerHolder
    public var live: Bool { holder.sessionID != nil }
    public var key: ManagerKey { ManagerKey(holder, manager: 1) }

    /// What the app last discovered on each peripheral, and the values it subscribed to (for willRestoreState).
    public var databases: [String: RemoteDatabase] = [:]
    public var notifying: [String: Set<UInt16>] = [:]
    public var connectOptions: [String: PreservedState.ConnectOptions] = [:]
    /// Links the stack lost while the app ran (hcid or the controller reset under them): the app heard them end, but
    /// nothing it asked for changed, so its record lists them as pending until it connects or cancels, and a session
    /// that closes first leaves the manager asking for them again.
    public var lostToStack: [String: DeviceAddress] = [:]
    /// What the manager had published when attd or the controller went away, until it is published again: by the
    /// app (Core Bluetooth's rule: it adds its services again on poweredOn) or, for an app not running, by managerd.
    /// Its record keeps these meanwhile, so an app killed before it adds them again, or a managerd killed with it,
    /// still has its services and advertising back on restoration.
    public var unrepublished: Unrepublished?
    /// Counts the app's Remove All Services: a publication managerd started for the manager before one lands after
    /// it (an app back from a managerd restart clears, then adds its own), and is withdrawn rather than kept twice.
    public var publicationEpoch = 0

    public struct Unrepublished: Equatable, Sendable {
        public var services: [PreservedState.PublishedService]
        public var advertising: PreservedState.Advertising?
        public init(services: [PreservedState.PublishedService], advertising: PreservedState.Advertising?) {
            self.services = services
            self.advertising = advertising
        }
    }

    /// A central's record: its scan and the peripherals it holds (`connected`) or waits for (`pending`).
    public func centralState(scan: ScanRequest?, connected: [String], pending: [String], name: (String) -> String) -> PreservedState {
        PreservedState(central: .init(scan: scan, links: connected.map { link($0, pending: false, name: name($0)) }
                                                        + pending.map { link($0, pending: true, name: name($0)) }))
    }

    /// A peripheral's record: what it has published now, unless that was cleared and not yet published again, when
    /// the stash stands for it (so a record written meanwhile still has the services and advertising to restore).
    public func peripheralState(published: [PreservedState.PublishedService], advertising: PreservedState.Advertising?,
                                subscriptions: [PreservedState.Subscription]) -> PreservedState {
        PreservedState(peripheral: .init(services: unrepublished?.services ?? published, advertising: advertising ?? unrepublished?.advertising,
                                         subscriptions: subscriptions))
    }

    /// The central's link-level state a snapshot keeps for one peripheral.
    public func link(_ identifier: String, pending: Bool, name: String) -> PreservedState.Link {
        let database = databases[identifier]
        return PreservedState.Link(identifier: identifier, pending: pending, name: name, options: connectOptions[identifier] ?? .init(),
                                   database: database,
                                   // Subscriptions end with the link: a pending one has none to restore.
                                   notifyingValueHandles: database == nil || pending ? [] : (notifying[identifier] ?? []).sorted())
    }
}

/// The preserved managers and the events held for those whose app is not running (sans-IO: managerd persists,
/// launches and moves the managers' scans, links and services between holders as the results say).
public struct Restoration<Event: Sendable>: Sendable {
    public private(set) var managers: [PreservedManager] = []
    private var queues: [UInt64: SuspendedQueue<Event>] = [:]
    /// Managers handed back to each app (willRestoreState), counted since this holder started.
    private var restorationsByApp: [String: Int] = [:]
    private var nextID: UInt64 = 1
    private let queueCapacity: Int

    public init(queueCapacity: Int = 256) { self.queueCapacity = queueCapacity }

    /// How a Hello with a restore identifier binds.
    public enum Binding: Equatable, Sendable {
        /// A new manager, now preserved under this id and held by the session.
        case made(PreservedManager)
        /// The app is back for a manager managerd held: `restore` moves it to the session.
        case restorable(PreservedManager)
        /// Another live session has the same app, role and restore identifier.
        case inUse
    }

    public mutating func bind(appID: String, restoreID: String, role: ManagerRole, session: UInt64) -> Binding {
        if let existing = managers.first(where: { $0.appID == appID && $0.restoreID == restoreID && $0.role == role }) {
            return existing.live ? .inUse : .restorable(existing)
        }
        return .made(add(appID: appID, restoreID: restoreID, role: role, holder: { _ in .session(session) }))
    }

    /// A manager read back from its record after managerd restarted: held by its own id until its app returns, with
    /// what the record kept of each link whose peripheral is still known (`known`), and a peripheral's services
    /// stashed until they are published again, should managerd go again first (its advertiser is back at once).
    public mutating func resume(appID: String, restoreID: String, role: ManagerRole, from state: PreservedState = PreservedState(),
                                known: (String) -> Bool = { _ in true }) -> PreservedManager {
        let made = add(appID: appID, restoreID: restoreID, role: role, holder: { .preserved($0) })
        return update(heldBy: made.holder) { manager in
            for link in state.central?.links ?? [] where known(link.identifier) {
                manager.connectOptions[link.identifier] = link.options
                if let database = link.database { manager.databases[link.identifier] = database }
            }
            if let peripheral = state.peripheral { manager.unrepublished = .init(services: peripheral.services, advertising: nil) }
        } ?? made
    }

    private mutating func add(appID: String, restoreID: String, role: ManagerRole, holder: (UInt64) -> ManagerHolder) -> PreservedManager {
        let id = nextID
        nextID += 1
        let made = PreservedManager(id: id, appID: appID, restoreID: restoreID, role: role, holder: holder(id))
        managers.append(made)
        return made
    }

    public func manager(heldBy holder: ManagerHolder) -> PreservedManager? { managers.first { $0.holder == holder } }
    public func manager(id: UInt64) -> PreservedManager? { managers.first { $0.id == id } }

    /// Changes the manager the holder holds, if it opted into restoration; the changed manager is returned to persist.
    @discardableResult
    public mutating func update(heldBy holder: ManagerHolder, _ change: (inout PreservedManager) -> Void) -> PreservedManager? {
        guard let index = managers.firstIndex(where: { $0.holder == holder }) else { return nil }
        change(&managers[index])
        return managers[index]
    }

    /// The app is back: the manager moves to its session with the events held for it, in the order they came.
    public mutating func restore(_ id: UInt64, into session: UInt64) -> (from: ManagerHolder, queued: [Event])? {
        guard let index = managers.firstIndex(where: { $0.id == id }), !managers[index].live else { return nil }
        let from = managers[index].holder
        managers[index].holder = .session(session)
        restorationsByApp[managers[index].appID, default: 0] += 1
        var held = queues.removeValue(forKey: id) ?? SuspendedQueue(capacity: queueCapacity)
        return (from, held.drain())
    }

    /// The session of an opted-in manager closed without the app quitting: the manager holds its work meanwhile.
    public mutating func preserve(session: UInt64) -> PreservedManager? {
        guard let index = managers.firstIndex(where: { $0.holder == .session(session) }) else { return nil }
        managers[index].holder = .preserved(managers[index].id)
        return managers[index]
    }

    /// A user quit, or the app invalidated the manager: its work and held events go.
    @discardableResult
    public mutating func discard(_ id: UInt64) -> PreservedManager? {
        guard let index = managers.firstIndex(where: { $0.id == id }) else { return nil }
        queues[id] = nil
        return managers.remove(at: index)
    }

    /// Holds an event for a manager whose app is not running (bounded, one of each `replacing` key). Returns the app
    /// to launch for it, or nil when no preserved manager waits under that id.
    public mutating func hold(_ event: Event, replacing key: HeldKey?, for id: UInt64) -> String? {
        guard let manager = managers.first(where: { $0.id == id }), !manager.live else { return nil }
        queues[id, default: SuspendedQueue(capacity: queueCapacity)].append(event, replacing: key)
        return manager.appID
    }

    public func queuedCount(_ id: UInt64) -> Int { queues[id]?.count ?? 0 }

    // MARK: Publications across resets

    /// What the manager had published is being cleared (attd went, or the controller left poweredOn): kept as its
    /// record's until it is published again. Services and advertising are cleared one after the other, so what is
    /// stashed already stands for what is gone by now.
    @discardableResult
    public mutating func stash(heldBy holder: ManagerHolder, services: [PreservedState.PublishedService],
                               advertising: PreservedState.Advertising?) -> PreservedManager? {
        guard !services.isEmpty || advertising != nil else { return manager(heldBy: holder) }
        return update(heldBy: holder) {
            $0.unrepublished = .init(services: services.isEmpty ? $0.unrepublished?.services ?? [] : services,
                                     advertising: advertising ?? $0.unrepublished?.advertising)
        }
    }

    /// The app published again itself (Core Bluetooth's rule: it adds its services again on poweredOn): the stash
    /// has done its work.
    @discardableResult
    public mutating func appPublished(heldBy holder: ManagerHolder) -> PreservedManager? {
        update(heldBy: holder) { $0.unrepublished = nil }
    }

    /// The app stopped advertising: a stashed advertisement is not to come back on its behalf.
    public mutating func appStoppedAdvertising(heldBy holder: ManagerHolder) {
        update(heldBy: holder) { $0.unrepublished?.advertising = nil }
    }

    /// The app removed all its services: a publication managerd has under way for it is withdrawn when it lands.
    public mutating func appClearedServices(heldBy holder: ManagerHolder) {
        update(heldBy: holder) { $0.publicationEpoch += 1 }
    }

    /// A publication of a manager's services that managerd starts for it, while its app is not there to.
    public struct Republication: Equatable, Sendable {
        public let manager: UInt64
        fileprivate let epoch: Int
    }

    public func startRepublication(heldBy holder: ManagerHolder) -> Republication? {
        manager(heldBy: holder).map { Republication(manager: $0.id, epoch: $0.publicationEpoch) }
    }

    /// Whose a service managerd published is once it lands: the manager's holder now (its app may be back), or no
    /// one's (the manager was discarded, or its app cleared its services meanwhile and adds its own: withdrawn
    /// rather than kept beside them).
    public func owner(of republication: Republication) -> ManagerHolder? {
        guard let manager = manager(id: republication.manager), manager.publicationEpoch == republication.epoch else { return nil }
        return manager.holder
    }

    /// The app's preserved managers with events held for it: what a relaunch is for.
    public func waitingToRestore(_ appID: String) -> [PreservedManager] {
        managers.filter { $0.appID == appID && !$0.live && queuedCount($0.id) > 0 }
    }

    public func restorations(of appID: String) -> Int { restorationsByApp[appID] ?? 0 }

    public func hasLiveManager(_ appID: String) -> Bool { managers.contains { $0.appID == appID && $0.live } }

    public func managers(of appID: String) -> [PreservedManager] { managers.filter { $0.appID == appID } }

    /// The restore identifiers a launch names (Core Bluetooth's launch option keys for centrals and peripherals).
    public func launchOptions(_ appID: String) -> (centrals: [String], peripherals: [String]) {
        let waiting = managers.filter { $0.appID == appID && !$0.live }
        return (waiting.filter { $0.role == .central }.map(\.restoreID), waiting.filter { $0.role == .peripheral }.map(\.restoreID))
    }
}
