/// Every app's lifecycle as iOS runs it, on virtual time: the state an app reported or was put in, the suspension of
/// a foreground-only app some seconds after it goes to the background, what happens to an event for each state
/// (delivered, held until the app returns, or dropped), and background wakes with their budgets. The shell applies
/// the changes (scans, advertising, held events) and ends an app that overran; it owns no rule of its own.
public struct AppLifecycle: Sendable {
    /// What an app's manifest says about its life. An app without one (rules nil) is foreground-only, is suspended
    /// after the default delay in the background, and is never woken.
    public struct Rules: Equatable, Sendable {
        public var modes: Set<BackgroundMode>
        public var suspendAfter: Duration
        public var wakeBudget: Duration

        public init(modes: Set<BackgroundMode>, suspendAfter: Duration, wakeBudget: Duration) {
            self.modes = modes
            self.suspendAfter = suspendAfter
            self.wakeBudget = wakeBudget
        }
    }

    /// What a state change means for the shell.
    public struct Change: Equatable, Sendable {
        public var previous: LifecycleState
        public var current: LifecycleState
        /// Held events go out now: the app is in the foreground, or back in the background from suspension.
        public var deliversHeld: Bool

        public init(previous: LifecycleState, current: LifecycleState, deliversHeld: Bool) {
            self.previous = previous
            self.current = current
            self.deliversHeld = deliversHeld
        }
    }

    /// What an event for a session of an app is, for the rules that decide its fate.
    public enum EventClass: Sendable {
        /// Something the app handles within its wake: a discovery, a connection, a value, a request.
        case work
        /// News that needs no handling within a budget: the state, pairing's outcome, room to send again (the library
        /// waits for it: dropped, an app back from suspension could never send again). Held while suspended.
        case news
        /// A pairing prompt: someone waits for the answer, so it wakes the app, but a suspended app cannot answer.
        case prompt

        var wakes: Bool { self == .work || self == .prompt }
        var keptWhileSuspended: Bool { self != .prompt }
    }

    public enum Disposition: Equatable, Sendable {
        /// Sent now, carrying this wake number (0 when the app is not awake in the background).
        case deliver(wake: UInt64)
        /// Kept until the app returns (the shell raises the app's notifyOn* alert for it).
        case hold
        case drop
    }

    public enum Expiry: Equatable, Sendable {
        /// A foreground-only app's time in the background ran out.
        case suspended(app: String, after: Duration)
        /// An app awake in the background overran its budget: the shell ends its processes.
        case overran(app: String)
    }

    /// A wake that began, for the shell to log.
    public struct WakeStart: Equatable, Sendable {
        public var app: String
        public var budget: Duration

        public init(app: String, budget: Duration) {
            self.app = app
            self.budget = budget
        }
    }

    /// How an app's background wakes went, for `beryl app list` and the tests that watch them.
    public struct WakeTally: Equatable, Sendable {
        public var begun = 0
        /// Ended by the app saying it was idle, or by its sessions closing, within the budget.
        public var endedIdle = 0
        /// Overran the budget (the shell ends the app).
        public var overran = 0
        public init(begun: Int = 0, endedIdle: Int = 0, overran: Int = 0) {
            self.begun = begun
            self.endedIdle = endedIdle
            self.overran = overran
        }
    }

    public private(set) var tallies: [String: WakeTally] = [:]
    public func tally(of app: String) -> WakeTally { tallies[app] ?? WakeTally() }

    /// The state each app was put in; an app absent here is not running, or runs in the foreground if it has sessions.
    private var recorded: [String: LifecycleState] = [:]
    /// Foreground-only apps in the background: when each is suspended, and after how long.
    private var suspensions: [String: (due: Duration, after: Duration)] = [:]
    private let defaultSuspendAfter: Duration
    /// Launched in the background and not yet connected: its first Hello starts its first wake.
    private var firstWakePending: Set<String> = []
    private var wakes = WakeLedger()
    public private(set) var wakesBegun: [WakeStart] = []

    public init(defaultSuspendAfter: Duration) { self.defaultSuspendAfter = defaultSuspendAfter }

    public func state(of app: String, hasSessions: Bool) -> LifecycleState {
        guard !app.isEmpty else { return .foreground }
        switch recorded[app] {
        case .background?: return .background
        case .suspended?: return .suspended
        case .foreground?: return .foreground
        case .notRunning?, nil: return hasSessions ? .foreground : .notRunning
        }
    }

    public func isAwake(_ app: String) -> Bool { wakes.isAwake(app) }

    /// The app reported a state, or a tool forced one. A wake under way ends: the app is no longer running on it.
    public mutating func set(_ app: String, to state: LifecycleState, rules: Rules?, hasSessions: Bool, at now: Duration) -> Change {
        let previous = self.state(of: app, hasSessions: hasSessions)
        recorded[app] = state
        suspensions[app] = nil
        wakes.end(app)
        let current = self.state(of: app, hasSessions: hasSessions)
        if current == .background, rules?.modes.isEmpty ?? true {
            let after = rules?.suspendAfter ?? defaultSuspendAfter
            suspensions[app] = (now + after, after)
        }
        return Change(previous: previous, current: current,
                      deliversHeld: current == .foreground || (current == .background && previous == .suspended))
    }

    /// managerd started the app's process for its background work.
    public mutating func launched(_ app: String) {
        recorded[app] = .background
        suspensions[app] = nil
        firstWakePending.insert(app)
    }

    /// The process managerd launched is gone and nothing of the app lives on: it is not running.
    public mutating func exited(_ app: String) {
        recorded[app] = nil
        suspensions[app] = nil
        firstWakePending.remove(app)
    }

    /// A session of the app said Hello. Returns the wake number its Welcome carries.
    public mutating func hello(_ app: String, session: UInt64, rules: Rules?, at now: Duration) -> UInt64 {
        guard !app.isEmpty else { return 0 }
        // A declared app that connects by itself was started by its user: it runs in the foreground.
        if rules != nil, (recorded[app] ?? .notRunning) == .notRunning { recorded[app] = .foreground }
        if let rules, recorded[app] == .background, firstWakePending.remove(app) != nil {
            beginWake(app, budget: rules.wakeBudget, at: now)
        }
        return wakes.stamp(session: session, app: app)
    }

    /// What becomes of an event for a session of the app now.
    public mutating func disposition(of event: EventClass, app: String, session: UInt64, rules: Rules?, at now: Duration) -> Disposition {
        guard !app.isEmpty else { return .deliver(wake: 0) }
        if recorded[app] == .suspended { return event.keptWhileSuspended ? .hold : .drop }
        // An event reaching an app in the background with a background mode wakes it for its budget.
        if event.wakes, recorded[app] == .background, let rules, !rules.modes.isEmpty {
            beginWake(app, budget: rules.wakeBudget, at: now)
        }
        return .deliver(wake: wakes.stamp(session: session, app: app))
    }

    /// The session has handled every event up to `wake`. Returns how long the app was awake when this ends its wake.
    public mutating func idle(session: UInt64, upTo wake: UInt64, app: String, sessions: [UInt64], at now: Duration) -> Duration? {
        guard !app.isEmpty else { return nil }
        return endedIdle(app, wakes.idle(session: session, upTo: wake, app: app, sessions: sessions, at: now))
    }

    private mutating func endedIdle(_ app: String, _ awake: Duration?) -> Duration? {
        if awake != nil { tallies[app, default: WakeTally()].endedIdle += 1 }
        return awake
    }

    /// A session of the app closed. `remaining`: the app's other sessions. `launchedHere`: managerd still holds a
    /// process it launched for the app. Returns how long the app was awake when this ends its wake.
    public mutating func sessionClosed(_ session: UInt64, app: String, remaining: [UInt64], launchedHere: Bool, at now: Duration) -> Duration? {
        guard !app.isEmpty else { return nil }
        // An app this stack did not launch is not running once its last session is gone.
        if remaining.isEmpty, !launchedHere, recorded[app] != nil {
            recorded[app] = .notRunning
            suspensions[app] = nil
        }
        return endedIdle(app, wakes.closed(session: session, app: app, remaining: remaining, at: now))
    }

    /// When `expire` next has something to do.
    public var nextDeadline: Duration? {
        [suspensions.values.map(\.due).min(), wakes.nextDeadline].compactMap { $0 }.min()
    }

    /// Suspensions and overruns due by `now`, in app order; suspended apps have their state changed here.
    public mutating func expire(at now: Duration) -> [Expiry] {
        var expired: [Expiry] = []
        for (app, suspension) in suspensions.sorted(by: { $0.key < $1.key }) where suspension.due <= now {
            suspensions[app] = nil
            guard recorded[app] == .background else { continue }
            recorded[app] = .suspended
            wakes.end(app)
            expired.append(.suspended(app: app, after: suspension.after))
        }
        for app in wakes.overrun(at: now) where recorded[app] == .background {
            tallies[app, default: WakeTally()].overran += 1
            expired.append(.overran(app: app))
        }
        return expired
    }

    /// Wakes begun since the shell last asked, for its log.
    public mutating func takeWakesBegun() -> [WakeStart] {
        defer { wakesBegun.removeAll() }
        return wakesBegun
    }

    private mutating func beginWake(_ app: String, budget: Duration, at now: Duration) {
        if wakes.begin(app, at: now, budget: budget) {
            tallies[app, default: WakeTally()].begun += 1
            wakesBegun.append(WakeStart(app: app, budget: budget))
        }
    }
}
