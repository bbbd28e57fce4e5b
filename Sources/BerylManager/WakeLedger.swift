/// Background wakes as iOS runs them (sans-IO, time passed in): an event reaching a background app with a background
/// mode wakes it for a budget; each event a session gets during the wake carries a number, and the session says when
/// it has handled everything up to one; the wake ends when every session of the app has, and an app still awake at
/// its deadline has overrun (the shell ends it).
public struct WakeLedger: Sendable {
    public struct Wake: Equatable, Sendable {
        public var started: Duration
        public var deadline: Duration
    }

    public private(set) var wakes: [String: Wake] = [:]
    /// Per session: the last wake number sent and the last one it has handled.
    private var sent: [UInt64: UInt64] = [:]
    private var handled: [UInt64: UInt64] = [:]

    public init() {}

    public func isAwake(_ app: String) -> Bool { wakes[app] != nil }

    /// Starts a wake unless one is under way; true when it started.
    @discardableResult
    public mutating func begin(_ app: String, at now: Duration, budget: Duration) -> Bool {
        guard wakes[app] == nil else { return false }
        wakes[app] = Wake(started: now, deadline: now + budget)
        return true
    }

    /// The number an event (or a Welcome) to this session carries: 0 when its app is not awake.
    public mutating func stamp(session: UInt64, app: String) -> UInt64 {
        guard wakes[app] != nil else { return 0 }
        let next = sent[session, default: 0] + 1
        sent[session] = next
        return next
    }

    /// The session has handled everything up to `wake`. Returns how long the app was awake when this ends its wake.
    public mutating func idle(session: UInt64, upTo wake: UInt64, app: String, sessions: [UInt64], at now: Duration) -> Duration? {
        handled[session] = max(handled[session, default: 0], min(wake, sent[session, default: 0]))
        return endIfIdle(app, sessions: sessions, at: now)
    }

    /// A session is gone: it owes nothing. Returns how long the app was awake when this ends its wake.
    public mutating func closed(session: UInt64, app: String, remaining sessions: [UInt64], at now: Duration) -> Duration? {
        sent[session] = nil
        handled[session] = nil
        return endIfIdle(app, sessions: sessions, at: now)
    }

    /// The app said it is idle itself (or its state was set): the wake is over.
    public mutating func end(_ app: String) { wakes[app] = nil }

    /// The earliest deadline, for the shell's timer.
    public var nextDeadline: Duration? { wakes.values.map(\.deadline).min() }

    /// The apps whose wake has run past its deadline: their wakes are over, and the shell ends them.
    public mutating func overrun(at now: Duration) -> [String] {
        let late = wakes.filter { $0.value.deadline <= now }.keys.sorted()
        for app in late { wakes[app] = nil }
        return late
    }

    private mutating func endIfIdle(_ app: String, sessions: [UInt64], at now: Duration) -> Duration? {
        guard let wake = wakes[app], sessions.allSatisfy({ handled[$0, default: 0] >= sent[$0, default: 0] }) else { return nil }
        wakes[app] = nil
        return now - wake.started
    }
}
