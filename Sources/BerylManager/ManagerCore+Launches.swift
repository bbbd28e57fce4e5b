/// Launching apps for their preserved managers (Core Bluetooth relaunches an app for a restored manager's event),
/// supervising what was launched, and ending what does not restore in time.
extension ManagerCore {
    /// Preserved work of `appID` waits (a record resumed, an event held for it): its app is launched, unless a launch
    /// of it still runs, a manager of it is live, the policy puts it off, or managerd is stopping.
    public mutating func launchIfWaiting(_ appID: String, at now: Duration) -> [Output] {
        guard let manifest = catalog.apps[appID], manifest.launch != nil, !restoration.waitingToRestore(appID).isEmpty else { return [] }
        if case .notBefore(let time) = launches.relaunch.verdict(for: appID, at: now) {
            return launches.deferLaunch(appID, until: time) ? [.launchDeferred(appID: appID, until: time, failure: nil)] : []
        }
        guard !launches.stopping, launches.processes[appID] == nil, !restoration.hasLiveManager(appID) else { return [] }
        return [.launch(order(manifest))]
    }

    /// An event that waits for a preserved manager whose app is away: held (bounded, one discovery per peripheral),
    /// and the app launched to handle it.
    public mutating func holdForAbsentApp(_ event: Event, replacing key: HeldKey?, for preservedID: UInt64, at now: Duration) -> [Output] {
        guard let appID = restoration.hold(event, replacing: key, for: preservedID) else { return [] }
        return launchIfWaiting(appID, at: now)
    }

    /// The launches put off until now or earlier are weighed again.
    public mutating func launchesDue(at now: Duration) -> [Output] {
        launches.takeDue(at: now).flatMap { launchIfWaiting($0, at: now) }
    }

    /// `beryl app launch`: the app starts whether or not work waits for it, with whatever does as its options.
    public func launchAsked(_ appID: String) -> Result<AppLaunch, LaunchRefusal> {
        guard let manifest = catalog.apps[appID], manifest.launch != nil else { return .failure(.noLaunchCommand(appID: appID)) }
        guard !launches.stopping else { return .failure(.stopping) }
        if let running = launches.processes[appID] { return .failure(.alreadyRunning(appID: appID, pid: running.pid)) }
        return .success(order(manifest))
    }

    private func order(_ manifest: AppManifest) -> AppLaunch {
        let waiting = restoration.launchOptions(manifest.id)
        return AppLaunch(manifest: manifest, centrals: waiting.centrals, peripherals: waiting.peripherals)
    }

    /// The shell started the launch's process: the app runs in the background for its work.
    public mutating func launchStarted(_ appID: String, pid: Int32, at now: Duration) -> [Output] {
        launches.started(appID, pid: pid, at: now)
        life.launched(appID)
        return [.launchesChanged]
    }

    /// The launch started no process: tried again after the backoff, if work still waits then.
    public mutating func launchFailed(_ appID: String, reason: String, at now: Duration) -> [Output] {
        let delay = launches.failed(appID, reason: reason, at: now)
        guard !launches.stopping else { return [] }
        return [deferred(appID, until: now + delay)]
    }

    /// A launched process ended (`exit` says how; reaped, or an adopted one seen gone). With work still waiting it is
    /// launched again after the backoff; with nothing of the app left running, the app is not running.
    public mutating func launchEnded(_ appID: String, exit: String, at now: Duration) -> [Output] {
        let waiting = restoration.waitingToRestore(appID).map(\.restoreID)
        var outputs: [Output] = []
        if let delay = launches.ended(appID, exit: exit, waiting: waiting, at: now), !launches.stopping {
            outputs.append(deferred(appID, until: now + delay))
        }
        if !restoration.hasLiveManager(appID), sessions(of: appID).isEmpty { life.exited(appID) }
        return outputs + [.launchesChanged]
    }

    /// Puts the launch off after a failure; one already put off keeps its time, which the output says.
    private mutating func deferred(_ appID: String, until time: Duration) -> Output {
        _ = launches.deferLaunch(appID, until: time)
        return .launchDeferred(appID: appID, until: launches.deferred[appID] ?? time, failure: launches.relaunch.failure(of: appID))
    }

    /// A launched process still runs: one that has not made the managers it was launched to restore within the
    /// grace is ended, so that it is launched again.
    public mutating func launchRunning(_ appID: String, at now: Duration) -> [Output] {
        guard let process = launches.processes[appID] else { return [] }
        let waiting = restoration.waitingToRestore(appID).map(\.restoreID)
        guard launches.overdue(appID, waiting: waiting, at: now), let failure = launches.relaunch.failure(of: appID) else { return [] }
        return [.terminate(appID: appID, pid: process.pid, failure: failure)]
    }

    /// When a running launch whose managers still wait to be restored has had its grace: `tick` ends it after that.
    var restoreGraceDeadline: Duration? {
        launches.processes.keys.filter { !restoration.waitingToRestore($0).isEmpty }.compactMap { launches.relaunch.restoreGraceEnds(of: $0) }.min()
    }

    /// A process an earlier managerd launched for a declared app still runs: this one watches it as its own.
    public mutating func adoptLaunch(_ appID: String, pid: Int32) {
        guard catalog.apps[appID] != nil else { return }
        launches.adopt(appID, pid: pid)
    }

    /// managerd is stopping: no app is launched again. Returns the launched processes, for the shell to end.
    public mutating func stopLaunching() -> [Int32] { launches.stop() }
}
