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
    /// discovery per peripheral, `discoveryOf`), or dropped. Nil for a session that is no app's (sent as it is).
    public mutating func admit(_ event: Event, as eventClass: AppLifecycle.EventClass, discoveryOf peripheral: String?,
                               for session: UInt64, at now: Duration) -> AppLifecycle.Disposition? {
        guard let appID = sessions[session]?.appID, !appID.isEmpty else { return nil }
        let disposition = life.disposition(of: eventClass, app: appID, session: session, rules: rules(for: appID), at: now)
        if disposition == .hold { sessions[session]?.held.append(event, discoveryOf: peripheral) }
        return disposition
    }
}
