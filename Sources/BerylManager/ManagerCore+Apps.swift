/// One app session as managerd knows it; a session that has not said Hello has no app id.
public struct AppSession<Event: Sendable>: Sendable {
    public var appID = ""
    public var saidHello = false
    /// The user quit the app: what its managers held goes with them.
    public var quitting = false
    /// Events held while the app is suspended.
    public var held = SuspendedQueue<Event>()
    /// Each connection's options (notifyOn*), by peripheral identifier.
    public var connectOptions: [String: PreservedState.ConnectOptions] = [:]

    public init() {}
}

/// Apps' lifecycles applied to their managers' work: which scans run and how, who advertises, and what becomes of an
/// event for a session (AppLifecycle's rules, with the sessions and manifests they are about).
extension ManagerCore {
    /// The open sessions of an app (each said Hello with its id), in a stable order.
    public func sessions(of appID: String) -> [UInt64] {
        sessions.filter { $0.value.appID == appID }.map(\.key).sorted()
    }

    public func lifecycle(of appID: String) -> LifecycleState {
        life.state(of: appID, hasSessions: !sessions(of: appID).isEmpty)
    }

    /// What the app's manifest says of its life (nil: no manifest, a foreground-only app).
    public func rules(for appID: String) -> AppLifecycle.Rules? {
        catalog.apps[appID].map {
            AppLifecycle.Rules(modes: $0.backgroundModes, suspendAfter: .milliseconds(Int($0.suspendAfter * 1000)),
                               wakeBudget: .milliseconds(Int($0.wakeBudget * 1000)))
        }
    }

    public func policy(for holder: ManagerHolder) -> LifecyclePolicy {
        switch holder {
        case .session(let id):
            return policy(forSession: id)
        case .preserved(let id):
            // A preserved manager whose app is not running works as its background modes allow.
            let modes = restoration.manager(id: id).flatMap { catalog.apps[$0.appID]?.backgroundModes } ?? []
            return .of(.notRunning, modes: modes)
        }
    }

    public func policy(forSession id: UInt64) -> LifecyclePolicy {
        guard let app = sessions[id] else { return .of(.foreground, modes: []) }
        return .of(lifecycle(of: app.appID), modes: catalog.apps[app.appID]?.backgroundModes ?? [])
    }

    /// Every scanner in the background: the slow interval (1.28 s, 30 ms window), as iOS scans for background apps.
    public var scanIsSlow: Bool {
        let scanners = scans.scanners
        return !scanners.isEmpty && scanners.allSatisfy { policy(for: $0.holder).slowScan }
    }

    /// An app's state changes, reported by the app or forced (`beryl app state`): its scans pause, resume or coalesce,
    /// advertising is laid out again, and what was held for it goes out if the change lets it.
    public mutating func setLifecycle(_ appID: String, _ state: LifecycleState, at now: Duration) -> (change: AppLifecycle.Change, outputs: [Output]) {
        let change = life.set(appID, to: state, rules: rules(for: appID), hasSessions: !sessions(of: appID).isEmpty, at: now)
        var outputs = lifecycleChanged(appID)
        if change.deliversHeld { outputs += deliverHeld(appID) }
        return (change, outputs)
    }

    /// Re-applies every rule that depends on the app's state (after a change, or a suspension on time).
    public mutating func lifecycleChanged(_ appID: String) -> [Output] {
        for id in sessions(of: appID) { applyScanPolicy(id) }
        return [.scanningChanged, .advertisingChanged]
    }

    /// Whether the session's scans run, and whether their duplicates are coalesced, by its app's state now.
    public mutating func applyScanPolicy(_ session: UInt64) {
        let policy = policy(forSession: session)
        if policy.scans { scans.paused.remove(.session(session)) } else { scans.paused.insert(.session(session)) }
        if policy.coalesceDuplicates { scans.coalesced.insert(.session(session)) } else { scans.coalesced.remove(.session(session)) }
    }

    private mutating func deliverHeld(_ appID: String) -> [Output] {
        sessions(of: appID).compactMap { id in
            guard let events = sessions[id]?.held.drain(), !events.isEmpty else { return nil }
            return .deliver(session: id, events: events)
        }
    }

    /// An event for a session, by its class: sent now with its wake number, held while the app is suspended (one
    /// of each `replacing` key), or dropped. Nil for a session that is no app's (sent as it is).
    public mutating func admit(_ event: Event, as eventClass: AppLifecycle.EventClass, replacing key: HeldKey?,
                               for session: UInt64, at now: Duration) -> AppLifecycle.Disposition? {
        guard let appID = sessions[session]?.appID, !appID.isEmpty else { return nil }
        let disposition = life.disposition(of: eventClass, app: appID, session: session, rules: rules(for: appID), at: now)
        if disposition == .hold { sessions[session]?.held.append(event, replacing: key) }
        return disposition
    }
}

// MARK: Hello

/// Why managerd refuses a session's Hello.
public enum HelloRefusal: Error, Equatable, Sendable, CustomStringConvertible {
    /// The app id is declared for another user (Core Bluetooth's authorization denied).
    case notTheAppsUser(appID: String, user: String, uid: UInt32, peerUID: UInt32)
    /// Only an app with a manifest may opt into restoration; others are foreground-only.
    case restorationNeedsManifest(appID: String)
    /// Another live manager of the app has the same role and restore identifier.
    case restoreIdentifierInUse(appID: String, restoreID: String)
    /// A session is one manager: it says Hello once (a second would bind a second restore identifier to it).
    case alreadyGreeted
    /// A lab session is not an app's manager.
    case labSession

    public var description: String {
        switch self {
        case .notTheAppsUser(let appID, let user, let uid, let peerUID): "app \(appID) runs as \(user) (uid \(uid)); this process is uid \(peerUID)"
        case .restorationNeedsManifest(let appID): "restoration needs an app manifest for '\(appID)' (apps without one are foreground-only)"
        case .restoreIdentifierInUse(let appID, let restoreID): "restore identifier \(restoreID) is in use by another manager of \(appID)"
        case .alreadyGreeted: "this session said Hello already; a session is one manager"
        case .labSession: "a lab session cannot become an app session"
        }
    }
}

extension ManagerCore {
    /// What a Hello that was not refused does: a manager without restoration; a new preserved one, whose record is
    /// written before the Welcome; or one the app comes back for, which `restore` then moves to the session.
    public enum Greeting: Equatable, Sendable {
        case plain
        case made(preservedID: UInt64)
        case restoring(preservedID: UInt64)
    }

    /// A session says who it is: the app id is checked against its manifest's user, and a restore identifier binds
    /// the session to a new preserved manager or to the one its app comes back for.
    public mutating func hello(_ session: UInt64, appID: String, uid: UInt32, restoreID: String, role: ManagerRole,
                               isLabSession: Bool = false) -> Result<Greeting, HelloRefusal> {
        guard sessions[session]?.saidHello != true else { return .failure(.alreadyGreeted) }
        guard !isLabSession else { return .failure(.labSession) }
        let manifest = catalog.apps[appID]
        if !appID.isEmpty, let manifest, manifest.uid != uid {
            return .failure(.notTheAppsUser(appID: appID, user: manifest.user, uid: manifest.uid, peerUID: uid))
        }
        var greeting = Greeting.plain
        if !restoreID.isEmpty {
            guard manifest != nil else { return .failure(.restorationNeedsManifest(appID: appID)) }
            switch restoration.bind(appID: appID, restoreID: restoreID, role: role, session: session) {
            case .inUse: return .failure(.restoreIdentifierInUse(appID: appID, restoreID: restoreID))
            case .restorable(let preserved): greeting = .restoring(preservedID: preserved.id)
            case .made(let made): greeting = .made(preservedID: made.id)
            }
        }
        sessions[session, default: .init()].appID = appID
        sessions[session, default: .init()].saidHello = true
        return .success(greeting)
    }

    /// The Welcome's wake number for a session that said Hello (a launch's first Hello starts its wake).
    public mutating func welcomeWake(_ session: UInt64, at now: Duration) -> UInt64 {
        let appID = sessions[session]?.appID ?? ""
        return life.hello(appID, session: session, rules: rules(for: appID), at: now)
    }

    /// The session handled every event up to `wake`; its app is idle once all its sessions have.
    public mutating func sessionIdle(_ session: UInt64, upTo wake: UInt64, at now: Duration) -> [Output] {
        guard let appID = sessions[session]?.appID,
              let awake = life.idle(session: session, upTo: wake, app: appID, sessions: sessions(of: appID), at: now) else { return [] }
        return [.idleAgain(appID: appID, after: awake)]
    }

    /// A closing session's part in its app's life: an app this stack did not launch stops running with its last
    /// session, and a wake its sessions were in may end.
    mutating func lifecycleSessionClosed(_ session: UInt64, at now: Duration) -> [Output] {
        guard let appID = sessions[session]?.appID, !appID.isEmpty else { return [] }
        let remaining = sessions(of: appID).filter { $0 != session }
        guard let awake = life.sessionClosed(session, app: appID, remaining: remaining, launchedHere: launches.processes[appID] != nil,
                                             at: now) else { return [] }
        return [.idleAgain(appID: appID, after: awake)]
    }

    /// Who hears the stack's state change: sessions welcomed already, in the order they came. One told before its
    /// Hello was answered heard poweredOn ahead of its Welcome: its app added its services, and the Welcome's reset
    /// clearing then removed them.
    public var welcomedSessions: [UInt64] { sessions.filter(\.value.saidHello).map(\.key).sorted() }
}

// MARK: Driving apps (beryl app)

/// Why `beryl app` may not drive an app.
public enum AppControlRefusal: Error, Equatable, Sendable, CustomStringConvertible {
    case undeclared(appID: String)
    case notPermitted(appID: String, user: String)
    case notPermittedToSetState(appID: String)
    case notDeclaredOrRunning(appID: String)

    public var description: String {
        switch self {
        case .undeclared(let appID): "no app manifest declares '\(appID)'"
        case .notPermitted(let appID, let user): "only root, managerd's user or \(user) may drive \(appID)"
        case .notPermittedToSetState(let appID): "only the app, root or managerd's user may set \(appID)'s state"
        case .notDeclaredOrRunning(let appID): "no app '\(appID)' is declared or running"
        }
    }
}

extension ManagerCore {
    /// Who set an app's state: the app itself, or a user forcing it.
    public enum StateSetter: Equatable, Sendable {
        case app
        case user(uid: UInt32)
    }

    /// `beryl app launch`, `terminate` and `quit`: root, managerd's own user, or the user the manifest runs the app as.
    public func control(_ appID: String, byUID uid: UInt32, managerdUID: UInt32) -> Result<AppManifest, AppControlRefusal> {
        guard let manifest = catalog.apps[appID] else { return .failure(.undeclared(appID: appID)) }
        guard uid == 0 || uid == managerdUID || uid == manifest.uid else { return .failure(.notPermitted(appID: appID, user: manifest.user)) }
        return .success(manifest)
    }

    /// An app reports its own state (a session of it); root, managerd's user, or a user the app runs as (`runningAs`:
    /// its sessions' users) may force it, for labs and tests.
    public func stateSetter(of appID: String, session: UInt64, uid: UInt32, managerdUID: UInt32,
                            runningAs: [UInt32]) -> Result<StateSetter, AppControlRefusal> {
        let own = !appID.isEmpty && sessions[session]?.appID == appID
        let users = Set(runningAs + [catalog.apps[appID]?.uid].compactMap { $0 })
        guard own || uid == 0 || uid == managerdUID || users.contains(uid) else { return .failure(.notPermittedToSetState(appID: appID)) }
        guard catalog.apps[appID] != nil || !runningAs.isEmpty else { return .failure(.notDeclaredOrRunning(appID: appID)) }
        return .success(own ? .app : .user(uid: uid))
    }

    /// Who hears an app's alerts (`beryl alerts`), which name its peripherals: root, managerd's user, the user its
    /// manifest runs it as, or the user of the session the alert was held for (not whoever else says Hello under the
    /// app's id).
    public func mayHearAlerts(of appID: String, uid: UInt32, managerdUID: UInt32, heldFor holderUID: UInt32?) -> Bool {
        uid == 0 || uid == managerdUID || catalog.apps[appID]?.uid == uid || holderUID == uid
    }

    /// The user force-quit the app: nothing of it is kept or restored (its live sessions release their work as they
    /// close), so no preserved manager launches it again.
    public mutating func userQuit(_ appID: String) -> [Output] {
        var outputs: [Output] = []
        for preserved in restoration.managers(of: appID) { outputs += discard(preserved.id) }
        for session in sessions(of: appID) { sessions[session]?.quitting = true }
        return outputs + [.forgetApp(appID: appID)]
    }
}

// MARK: What beryl app reports

/// One app as `beryl app list` shows it: declared (with its manifest) or running without one.
public struct AppStatus: Equatable, Sendable {
    public var id: String
    public var manifest: AppManifest?
    public var state: LifecycleState
    /// Its sessions' processes and the one managerd launched for it.
    public var pids: [Int32]
    public var preservedCentrals: [String] = []
    public var preservedPeripherals: [String] = []
    /// Held for its preserved managers while it was away, and for its sessions while it was suspended.
    public var queuedEvents = 0
    public var launches = 0
    public var lastLaunchFailure: LaunchFailure?
    public var restorations = 0
    public var relaunches = RelaunchPolicy.RelaunchTally()
    public var wakes = AppLifecycle.WakeTally()
}

extension ManagerCore {
    /// Every declared app, and every running one (`running`: app ids of live sessions), by id.
    public func listedApps(running: [String]) -> [String] {
        Set(catalog.apps.keys).union(running.filter { !$0.isEmpty }).sorted()
    }

    /// The app's processes: its live sessions' (`sessionPIDs`) and the one managerd launched for it, once each.
    public func processes(of appID: String, sessionPIDs: [Int32]) -> [Int32] {
        Set(sessionPIDs + [launches.processes[appID]?.pid].compactMap { $0 }).sorted()
    }

    /// `sessionPIDs`: the processes of the app's live sessions.
    public func status(of appID: String, sessionPIDs: [Int32]) -> AppStatus {
        let preserved = restoration.managers(of: appID)
        let held = sessions(of: appID).compactMap { sessions[$0]?.held.count }.reduce(0, +)
        var status = AppStatus(id: appID, manifest: catalog.apps[appID], state: lifecycle(of: appID),
                               pids: processes(of: appID, sessionPIDs: sessionPIDs))
        status.preservedCentrals = preserved.filter { $0.role == .central }.map(\.restoreID).sorted()
        status.preservedPeripherals = preserved.filter { $0.role == .peripheral }.map(\.restoreID).sorted()
        status.queuedEvents = preserved.map { restoration.queuedCount($0.id) }.reduce(held, +)
        status.launches = launches.counts[appID] ?? 0
        status.lastLaunchFailure = launches.relaunch.failure(of: appID)
        status.restorations = restoration.restorations(of: appID)
        status.relaunches = launches.relaunch.tally(of: appID)
        status.wakes = life.tally(of: appID)
        return status
    }
}
