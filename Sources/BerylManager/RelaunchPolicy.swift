import BerylCore

/// When managerd launches an app again so that it restores its preserved managers (Core Bluetooth relaunches an app
/// for its restored managers' events): not while apps from before a managerd restart may still be reconnecting, not
/// before the backoff of a crash loop is over, and an app that runs but does not restore in time is ended. Sans-IO:
/// spawning, reaping and signals stay in the shell, which reports what happened with the time it happened.
public struct RelaunchPolicy: Sendable {
    public enum Verdict: Equatable, Sendable {
        case launch
        /// Ask again at this time: apps that ran under an earlier managerd may still reconnect, or the backoff after
        /// the last exit or failed start is not over.
        case notBefore(Duration)
    }

    private struct Record: Sendable {
        /// When the running launch started; nil once it is known not to restore (ended for it, or never started).
        var launchedAt: Duration?
        var nextLaunch: Duration?
        var backoff: RestartBackoff
        var failure: LaunchFailure?
        /// Ended for not restoring, and its exit not yet reported: launching now would skip the backoff.
        var endedAwaitingExit = false
        var tally = RelaunchTally()
    }

    /// Launches ended for not restoring in time; exits with work still waiting, each putting the next launch off by
    /// the backoff; and launches made while an ended one had not yet exited (which skipped the backoff and left a
    /// zombie behind: always 0 unless the shell launches before it reaps).
    public struct RelaunchTally: Equatable, Sendable {
        public var endedUnrestored = 0
        public var backedOff = 0
        public var launchedBeforeReaped = 0
        public init(endedUnrestored: Int = 0, backedOff: Int = 0, launchedBeforeReaped: Int = 0) {
            self.endedUnrestored = endedUnrestored
            self.backedOff = backedOff
            self.launchedBeforeReaped = launchedBeforeReaped
        }
    }

    public let restoreGrace: Duration
    public let reconnectionGrace: Duration
    public let startedAt: Duration
    private let freshBackoff = RestartBackoff(initial: .seconds(1), maximum: .seconds(60), stableAfter: .seconds(30))
    private var records: [String: Record] = [:]

    public init(restoreGrace: Duration, reconnectionGrace: Duration = .seconds(3), startedAt: Duration) {
        self.restoreGrace = restoreGrace
        self.reconnectionGrace = reconnectionGrace
        self.startedAt = startedAt
    }

    public func failure(of app: String) -> LaunchFailure? { records[app]?.failure }

    public func tally(of app: String) -> RelaunchTally { records[app]?.tally ?? RelaunchTally() }

    public func verdict(for app: String, at now: Duration) -> Verdict {
        let settled = startedAt + reconnectionGrace
        if now < settled { return .notBefore(settled) }
        if let next = records[app]?.nextLaunch, now < next { return .notBefore(next) }
        return .launch
    }

    public mutating func launched(_ app: String, at now: Duration) {
        update(app) {
            if $0.endedAwaitingExit { $0.tally.launchedBeforeReaped += 1 }
            $0.launchedAt = now
            $0.failure = nil
        }
    }

    /// The launch did not start a process; returns the wait before the next try.
    public mutating func launchFailed(_ app: String, reason: String, at now: Duration) -> Duration {
        var delay = Duration.zero
        update(app) {
            $0.failure = .couldNotStart(reason: reason)
            delay = $0.backoff.delay(afterRunning: .zero)
            $0.nextLaunch = now + delay
        }
        return delay
    }

    /// When the running launch's grace to restore ends; nil when none runs, or it was ended for not restoring.
    public func restoreGraceEnds(of app: String) -> Duration? { records[app]?.launchedAt.map { $0 + restoreGrace } }

    /// A launch still running while `waiting` managers are not restored: true when its grace is over, and the shell
    /// ends it (its exit then backs off as a crash would, since it never became useful).
    public mutating func overdue(_ app: String, waiting: [String], at now: Duration) -> Bool {
        guard !waiting.isEmpty, let launchedAt = records[app]?.launchedAt, now - launchedAt > restoreGrace else { return false }
        let failure = LaunchFailure.didNotRestore(restoreIDs: waiting, within: restoreGrace)
        update(app) {
            $0.launchedAt = nil
            $0.failure = failure
            $0.endedAwaitingExit = true
            $0.tally.endedUnrestored += 1
        }
        return true
    }

    /// A launch ended (`exit` says how) with `waiting` managers not restored: returns the wait before the next launch,
    /// or nil when nothing waits (and a later launch starts the backoff over).
    public mutating func exited(_ app: String, exit: String, waiting: [String], at now: Duration) -> Duration? {
        var delay: Duration?
        let fresh = freshBackoff
        update(app) { record in
            record.endedAwaitingExit = false
            guard !waiting.isEmpty else {
                record.backoff = fresh
                return
            }
            // One that ran a while starts the backoff over; a crash loop, or one ended for not restoring, doubles it.
            let uptime = record.launchedAt.map { now - $0 } ?? .zero
            let wait = record.backoff.delay(afterRunning: uptime)
            record.nextLaunch = now + wait
            if record.launchedAt != nil || record.failure == nil {
                record.failure = .exitedWithoutRestoring(exit: exit, restoreIDs: waiting)
            }
            record.tally.backedOff += 1
            delay = wait
        }
        return delay
    }

    private mutating func update(_ app: String, _ change: (inout Record) -> Void) {
        var record = records[app] ?? Record(backoff: freshBackoff)
        change(&record)
        records[app] = record
    }
}
