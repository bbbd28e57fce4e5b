/// The processes managerd launched for apps, and when it launches one again: the relaunch policy's verdicts, the
/// launches put off until a time (the reconnection grace after a restart, a crash loop's backoff), and whether
/// managerd is stopping. Sans-IO: spawning, reaping and signals stay in the shell, which reports each with its time.
public struct AppLaunches: Sendable {
    /// A launched app's process; `adopted` when an earlier managerd launched it, so it is watched rather than reaped.
    public struct Process: Equatable, Sendable {
        public var pid: Int32
        public var adopted: Bool
        public init(pid: Int32, adopted: Bool) {
            self.pid = pid
            self.adopted = adopted
        }
    }

    /// One process per app while it runs (or, for a child, until it is reaped: a zombie still holds its launch, so the
    /// next one waits for the reaping that schedules it with backoff).
    public private(set) var processes: [String: Process] = [:]
    /// Launches tried, started or not.
    public private(set) var counts: [String: Int] = [:]
    public private(set) var relaunch: RelaunchPolicy
    /// Apps whose launch waits until this time.
    public private(set) var deferred: [String: Duration] = [:]
    /// Set once managerd is told to stop: its launched apps are being ended, and none is launched again.
    public private(set) var stopping = false

    public init(relaunch: RelaunchPolicy) { self.relaunch = relaunch }

    /// When a launch put off is due.
    public var nextDeadline: Duration? { deferred.values.min() }

    /// Keeps the first time asked for: when it comes the launch is weighed again, and put off again if need be.
    mutating func deferLaunch(_ appID: String, until time: Duration) -> Bool {
        guard deferred[appID] == nil else { return false }
        deferred[appID] = time
        return true
    }

    mutating func takeDue(at now: Duration) -> [String] {
        let due = deferred.filter { $0.value <= now }.keys.sorted()
        for appID in due { deferred[appID] = nil }
        return due
    }

    mutating func started(_ appID: String, pid: Int32, at now: Duration) {
        processes[appID] = Process(pid: pid, adopted: false)
        counts[appID, default: 0] += 1
        relaunch.launched(appID, at: now)
    }

    mutating func failed(_ appID: String, reason: String, at now: Duration) -> Duration {
        counts[appID, default: 0] += 1
        return relaunch.launchFailed(appID, reason: reason, at: now)
    }

    mutating func ended(_ appID: String, exit: String, waiting: [String], at now: Duration) -> Duration? {
        processes[appID] = nil
        return relaunch.exited(appID, exit: exit, waiting: waiting, at: now)
    }

    mutating func overdue(_ appID: String, waiting: [String], at now: Duration) -> Bool {
        relaunch.overdue(appID, waiting: waiting, at: now)
    }

    mutating func adopt(_ appID: String, pid: Int32) {
        processes[appID] = Process(pid: pid, adopted: true)
    }

    mutating func stop() -> [Int32] {
        stopping = true
        deferred = [:]
        return processes.values.map(\.pid).sorted()
    }
}

/// An app to start: its manifest, and the preserved managers it is launched to restore (its launch options,
/// UIApplicationLaunchOptionsBluetoothCentralsKey and …PeripheralsKey).
public struct AppLaunch: Equatable, Sendable {
    public var manifest: AppManifest
    public var centrals: [String]
    public var peripherals: [String]

    /// The whole environment the app starts with: its id, where the stack's sockets are, and the launch options
    /// (the restore identifiers it is launched for, which the library reads as Core Bluetooth's launch options keys).
    public func environment(runtimeDir: String) -> [String: String] {
        ["PATH": "/usr/local/bin:/usr/bin:/bin", "BERYL_APP_ID": manifest.id, "BERYL_RUNTIME_DIR": runtimeDir, "HOME": "/", "LANG": "C.UTF-8",
         "BERYL_LAUNCH_CENTRALS": centrals.joined(separator: ","), "BERYL_LAUNCH_PERIPHERALS": peripherals.joined(separator: ",")]
    }
}

/// Why `beryl app launch` starts nothing.
public enum LaunchRefusal: Error, Equatable, Sendable, CustomStringConvertible {
    case noLaunchCommand(appID: String)
    case stopping
    /// Its launch still runs (or is not reaped yet): a second would leave the first unwatched, never reaped nor ended.
    case alreadyRunning(appID: String, pid: Int32)

    public var description: String {
        switch self {
        case .noLaunchCommand(let appID): "\(appID) has no launch command"
        case .stopping: "managerd is stopping"
        case .alreadyRunning(let appID, let pid): "\(appID) runs already (pid \(pid))"
        }
    }
}
