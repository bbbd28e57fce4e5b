import BerylCore
import BerylDaemonKit
import BerylEventLoop
import BerylGAP
import BerylIPC
import BerylManager
import BerylManagerWire
import BerylStore
import FoundationEssentials
import Glibc

extension ManagerDaemon {
    // MARK: Manifests

    func loadCatalog() {
        guard let appsDir else { return }
        let me = getuid()
        // Launch commands are trusted only from files root (or managerd's own user, for unprivileged lab stacks) controls.
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: appsDir)) ?? []).filter { $0.hasSuffix(".json") }.sorted()
        let files = names.map { name in
            let path = appsDir + "/" + name
            if let untrusted = Accounts.whyUntrusted(path, owner: me) { return ManifestFile(path: path, refused: untrusted) }
            guard let data = FileManager.default.contents(atPath: path) else { return ManifestFile(path: path, refused: "cannot read the file") }
            return ManifestFile(path: path, data: data)
        }
        core.catalog = AppCatalog(files: files, lookup: { Accounts.ids(ofUser: $0).map { Account(uid: $0.uid, gid: $0.gid) } })
        for error in core.catalog.refused { host.logger.error("app manifest refused: \(error)") }
        host.logger.info("\(core.catalog.apps.count) app manifest(s) from \(appsDir)")
    }

    /// Starts the manifest's command as its user, with the launch options in the environment. Returns why it did not.
    @discardableResult
    func spawn(_ order: AppLaunch) -> Error? {
        let manifest = order.manifest
        guard let command = manifest.launch else { return LaunchRefusal.noLaunchCommand(appID: manifest.id) }
        let environment = order.environment(runtimeDir: host.paths.runtimeDir)
        try? FileManager.default.createDirectory(atPath: host.paths.logDir, withIntermediateDirectories: true)
        // The app would exit unable to connect, and say so only in its own log.
        if let why = SocketReach.whyUnreachable(user: manifest.user, socket: host.paths.socket("managerd")) {
            host.logger.warning("\(manifest.id) runs as \(manifest.user), who cannot reach managerd: \(why)")
        }
        do {
            let pid = try Spawn.start(command, environment: environment, logPath: host.paths.logDir + "/app-\(manifest.id).log",
                                      uid: manifest.uid, gid: manifest.gid, user: manifest.user)
            let restoring = order.centrals + order.peripherals
            host.logger.info("launched \(manifest.id) as \(manifest.user) (pid \(pid))"
                             + (restoring.isEmpty ? "" : " to restore \(restoring.joined(separator: ", "))"))
            apply(core.launchStarted(manifest.id, pid: pid, at: host.loop.uptime))
            watchExit(of: manifest.id, pid: pid)
            return nil
        } catch {
            host.logger.error("cannot launch \(manifest.id): \(error)")
            apply(core.launchFailed(manifest.id, reason: "\(error)", at: host.loop.uptime))
            return error
        }
    }

    /// The core hears of a launched app's exit when it happens (its restore grace is the core's deadline, not a look).
    func watchExit(of appID: String, pid: Int32) {
        do {
            exitWatches[appID] = try ProcessExitWatch(pid: pid, on: host.loop) { [unowned self] in reap(appID, pid: pid) }
        } catch {
            host.logger.error("cannot watch \(appID) (pid \(pid)) for its exit: \(error)")
        }
    }

    /// A launched app's process that ended is reaped (one an earlier managerd launched is not this one's child, and is
    /// only known gone), and the core told; one still running is left alone.
    func reap(_ appID: String, pid: Int32) {
        guard let process = core.launches.processes[appID], process.pid == pid else { return }
        let exit: String
        if process.adopted {
            guard !ProcessStats.isAlive(pid: pid) else { return }
            exit = "exited"
        } else {
            guard let ended = Spawn.reap(pid) else { return }
            exit = "\(ended.exit)"
        }
        exitWatches[appID] = nil
        apply(core.launchEnded(appID, exit: exit, at: host.loop.uptime))
    }

    /// Reaps now whichever launched apps have ended: what ending them looks at between its signals.
    func reapEndedApps() {
        for (appID, process) in core.launches.processes.sorted(by: { $0.key < $1.key }) { reap(appID, pid: process.pid) }
    }

    /// The app's processes: its sessions' peers and what managerd launched for it (never init or managerd itself).
    func processes(of appID: String) -> [Int32] {
        core.processes(of: appID, sessionPIDs: sessionsOf(appID).map(\.peer.pid)).filter { $0 > 1 && $0 != getpid() }
    }

    func sessionsOf(_ appID: String) -> [IPCSession] {
        core.sessions(of: appID).compactMap(session)
    }

    // MARK: beryl app

    func handleApps(_ kind: Beryl_Ipc_V1_ManagerRequest.OneOf_Kind, session: IPCSession, _ incoming: IncomingRequest) throws(WireFailure) {
        func authorized(_ appID: String) throws(WireFailure) -> AppManifest {
            do { return try core.control(appID, byUID: session.peer.uid, managerdUID: getuid()).get() } catch { throw WireFailure(error) }
        }
        switch kind {
        case .listApps:
            incoming.respond(.with { $0.manager.apps = .with { list in
                let running = (host.server?.sessions.keys.map { $0 } ?? []).compactMap { core.sessions[$0]?.appID }
                list.apps = core.listedApps(running: running).map { info(forApp: $0) }
                list.refused = core.catalog.refused.map(\.description)
            } })
        case .launchApp(let launchRequest):
            let manifest = try authorized(launchRequest.appID)
            switch core.launchAsked(manifest.id) {
            case .failure(let refusal):
                throw WireFailure(refusal)
            case .success(let order):
                if let error = spawn(order) { throw WireFailure(.notReady, "\(error)", field: "app_id") }
                incoming.respond(.with { $0.manager.apps.apps = [info(forApp: manifest.id)] })
            }
        case .stopApp(let stop):
            let manifest = try authorized(stop.appID)
            if stop.userQuit { apply(core.userQuit(manifest.id)) }
            let pids = processes(of: manifest.id)
            for pid in pids { kill(pid, SIGTERM) }
            host.logger.info("\(stop.userQuit ? "quit" : "terminated") \(manifest.id) (pids \(pids.sorted()))")
            incoming.respond(.with { $0.manager.apps.apps = [info(forApp: manifest.id)] })
        case .setAppState(let change):
            let setter: ManagerCore<Beryl_Ipc_V1_ManagerEvent>.StateSetter
            do {
                setter = try core.stateSetter(of: change.appID, session: session.id, uid: session.peer.uid, managerdUID: getuid(),
                                              runningAs: sessionsOf(change.appID).map(\.peer.uid)).get()
            } catch { throw WireFailure(error) }
            guard let state = LifecycleState(settable: change.state) else {
                throw WireFailure(.invalidArgument, "an app is not running when its process exits; use terminate or quit", field: "state")
            }
            setLifecycle(change.appID, state, reason: setter == .app ? "reported by the app" : "set by uid \(session.peer.uid)")
            incoming.respond(.with { $0.manager.apps.apps = [info(forApp: change.appID)] })
        default:
            throw WireFailure(.unsupported, "not an app request")
        }
    }

    /// An app with a manifest, or one running without (foreground-only, no restoration).
    func info(forApp appID: String) -> Beryl_Ipc_V1_AppInfo {
        .init(core.status(of: appID, sessionPIDs: sessionsOf(appID).map(\.peer.pid)))
    }
}

// MARK: Launched apps across managerd's life

extension ManagerDaemon {
    var launchedAppsPath: String { host.paths.stateDir + "/launched-apps.json" }

    func recordLaunchedApps() {
        let running = core.launches.processes.compactMap { app, process in
            ProcessStats.startTicks(pid: process.pid).map { LaunchedApps.Entry(app: app, pid: process.pid, start: $0) }
        }
        do {
            try LaunchedApps(running).save(to: launchedAppsPath)
        } catch {
            host.logger.error("cannot record the launched apps: \(error)")
        }
    }

    /// Apps an earlier managerd launched and that outlived it (it crashed, or was killed) are this one's to watch
    /// and, at the end, to stop.
    func adoptLaunchedApps() {
        let running = LaunchedApps.load(from: launchedAppsPath).stillRunning {
            ProcessStats.isAlive(pid: $0) ? ProcessStats.startTicks(pid: $0) : nil
        }
        for entry in running where core.catalog.apps[entry.app] != nil {
            // Only the pid is taken: the app's lifecycle state went with the old managerd, and is what it was for an
            // app that reconnects (foreground, until it or `beryl app state` says otherwise).
            core.adoptLaunch(entry.app, pid: entry.pid)
            watchExit(of: entry.app, pid: entry.pid)
            host.logger.info("\(entry.app) (pid \(entry.pid)), launched before this managerd started, is still running")
        }
        recordLaunchedApps()
    }

    /// managerd stopped (SIGTERM: `beryl down`, systemd) ends the apps it launched, as the system ends a
    /// background app: their preserved managers stay, so a later managerd launches them again for their events.
    /// A managerd that crashes leaves them running, to reconnect to its successor.
    func stopLaunchedApps() {
        guard !core.launches.stopping else { return }
        let pids = core.stopLaunching().filter { ProcessStats.isAlive(pid: $0) }
        if !pids.isEmpty { host.logger.info("ending the apps it launched (pids \(pids.sorted()))") }
        var ending = ProcessEnding(grace: Self.appStopGrace)
        // Only while still a launch of the core's: a pid reaped during the grace may be another process's by now.
        ending.isAlive = { [unowned self] pid in core.launches.processes.values.contains { $0.pid == pid } && ProcessStats.isAlive(pid: pid) }
        ending.end(pids, on: host.loop, look: { [unowned self] in reapEndedApps() }) { [unowned self] killed in
            if !killed.isEmpty { host.logger.warning("apps \(killed.sorted()) ignored SIGTERM; killed them") }
            finishStopping()
        }
    }

    /// Within the supervisor's 5 s before it kills managerd itself.
    static let appStopGrace = Duration.seconds(3)

    private func finishStopping() {
        recordLaunchedApps()
        host.stop()
    }
}
