/// The core's one clock: the shell keeps a single timer at `nextDeadline` and hands the time in through `tick`.
extension ManagerCore {
    /// The earliest time a part waits for: a connection attempt's retry, a background app's suspension or budget, a
    /// launch put off or one that had its grace to restore, the end of an advertiser's turn.
    public var nextDeadline: Duration? {
        [connections.nextDeadline, life.nextDeadline, launches.nextDeadline, restoreGraceDeadline, advertising.turnEnds].compactMap { $0 }.min()
    }

    /// What came due by `now`, part by part: connection retries, suspensions and overrun budgets, launches put off,
    /// launches ended for not restoring in time, the next advertiser's turn.
    public mutating func tick(at now: Duration) -> [Output] {
        var outputs = connections.tick(at: now).map(Output.connections)
        if advertising.tick(at: now) { outputs.append(.advertisingChanged) }
        for expiry in life.expire(at: now) {
            switch expiry {
            case .suspended(let appID, let after):
                outputs.append(.suspended(appID: appID, after: after))
                outputs += lifecycleChanged(appID)
            case .overran(let appID):
                outputs.append(.overran(appID: appID))
            }
        }
        for appID in launches.processes.keys.sorted() { outputs += launchRunning(appID, at: now) }
        return outputs + launchesDue(at: now)
    }
}
