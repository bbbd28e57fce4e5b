import BerylCore
import BerylDaemonKit
import BerylEventLoop
import BerylGAP
import BerylIPC
import BerylManager
import BerylStore
import Foundation
import Glibc

/// One manager that opted into restoration: while its app runs its session holds the manager's work; while it does
/// not, managerd holds it under the preserved manager's own id, and queues its events.
final class PreservedManager {
    let id: UInt64
    let appID: String
    let restoreID: String
    let role: PreservedRecord.Role
    var holder: ManagerHolder
    var live: Bool { holder.sessionID != nil }
    var queued = SuspendedQueue<Beryl_Ipc_V1_ManagerEvent>()
    /// What the app last discovered on each peripheral, and the values it subscribed to (for willRestoreState).
    var databases: [String: Beryl_Ipc_V1_GattDatabase] = [:]
    var notifying: [String: Set<UInt32>] = [:]
    var connectOptions: [String: Beryl_Ipc_V1_Connect] = [:]
    /// What the manager had published when attd or the controller went away, until it is published again: by the
    /// app (Core Bluetooth's rule: it adds its services again on poweredOn) or, for an app not running, by managerd.
    /// Its record keeps these meanwhile, so an app killed before it adds them again, or a managerd killed with it,
    /// still has its services and advertising back on restoration.
    var unrepublished: (services: [Beryl_Ipc_V1_PreservedService], advertiser: Advertiser?)?
    /// Counts the app's Remove All Services: a publication managerd started for the manager before one lands after
    /// it (an app back from a managerd restart clears, then adds its own), and is withdrawn rather than kept twice.
    var publicationEpoch = 0

    init(id: UInt64, appID: String, restoreID: String, role: PreservedRecord.Role, holder: ManagerHolder) {
        self.id = id
        self.appID = appID
        self.restoreID = restoreID
        self.role = role
        self.holder = holder
    }

    var key: ManagerKey { ManagerKey(holder, manager: 1) }
}

/// An app's processes as managerd sees them.
struct AppRuntime {
    var launchedPID: Int32?
    /// Launched by an earlier managerd: not this process's child, so watched for exit rather than reaped.
    var adopted = false
    var launches = 0

    /// A launch is still the app's: a child of ours until superviseApps reaps it (ended but unreaped, a zombie, it
    /// still waits for the reaping that schedules the next launch with backoff); an adopted app while it lives.
    var holdsLaunch: Bool {
        guard let pid = launchedPID else { return false }
        return !adopted || ProcessStats.isAlive(pid: pid)
    }
}

/// Events held for an app that cannot take them now (suspended, or not running): one discovery per peripheral.
extension SuspendedQueue where Event == Beryl_Ipc_V1_ManagerEvent {
    mutating func hold(_ event: Event) {
        let discovered: String? = if case .discovered(let discovery)? = event.kind { discovery.peripheral.identifier } else { nil }
        append(event, discoveryOf: discovered)
    }
}

extension ManagerDaemon {
    // MARK: Manifests

    func loadCatalog() {
        guard let appsDir else { return }
        let me = getuid()
        catalog = AppCatalog(directory: appsDir, lookup: { name in
            guard let entry = getpwnam(name) else { return nil }
            return Account(uid: entry.pointee.pw_uid, gid: entry.pointee.pw_gid)
        }, ownerAllowed: { path in
            var info = stat()
            guard stat(path, &info) == 0 else { return "cannot stat the file" }
            // Launch commands are trusted only from files root (or managerd's own user, for unprivileged lab stacks) controls.
            guard info.st_uid == 0 || info.st_uid == me else { return "owned by uid \(info.st_uid), not root" }
            guard info.st_mode & 0o022 == 0 else { return "writable by group or others" }
            return nil
        })
        for error in catalog.refused { host.logger.error("app manifest refused: \(error)") }
        host.logger.info("\(catalog.apps.count) app manifest(s) from \(appsDir)")
    }

    // MARK: Hello

    enum HelloBinding {
        case refused
        case plain
        case restoring(PreservedManager)
    }

    /// Checks the app id a session claims and binds its restore identifier.
    func bindSession(_ hello: Beryl_Ipc_V1_Hello, session: IPCSession, app: AppSession, _ incoming: IncomingRequest) -> HelloBinding {
        if !hello.appID.isEmpty, let manifest = catalog.apps[hello.appID], session.peer.uid != manifest.uid {
            incoming.fail(.permissionDenied, "app \(hello.appID) runs as \(manifest.user) (uid \(manifest.uid)); this process is uid \(session.peer.uid)",
                          field: "app_id")
            return .refused
        }
        guard !hello.restoreIdentifier.isEmpty else { return .plain }
        guard catalog.apps[hello.appID] != nil else {
            incoming.fail(.invalidArgument, "restoration needs an app manifest for '\(hello.appID)' (apps without one are foreground-only)",
                          field: "restore_identifier")
            return .refused
        }
        let role: PreservedRecord.Role = hello.role == .peripheral ? .peripheral : .central
        if let preserved = preservedManagers.first(where: { $0.appID == hello.appID && $0.restoreID == hello.restoreIdentifier && $0.role == role }) {
            guard !preserved.live else {
                incoming.fail(.busy, "restore identifier \(hello.restoreIdentifier) is in use by another manager of \(hello.appID)", field: "restore_identifier")
                return .refused
            }
            return .restoring(preserved)
        }
        let made = PreservedManager(id: makePreservedID(), appID: hello.appID, restoreID: hello.restoreIdentifier, role: role, holder: .session(session.id))
        preservedManagers.append(made)
        app.preserved = made
        persist(made)
        return .plain
    }

    /// The app is back: the work managerd held for it moves to the new session, which hears willRestoreState (in the
    /// Welcome) and then the events queued while it was gone.
    func restore(_ preserved: PreservedManager, into session: UInt64, app: AppSession) -> (Beryl_Ipc_V1_PreservedState, [Beryl_Ipc_V1_ManagerEvent]) {
        let state = snapshot(preserved)
        rebind(from: preserved.holder, to: .session(session))
        preserved.holder = .session(session)
        app.preserved = preserved
        let queued = preserved.queued.drain()
        host.logger.info("\(preserved.appID) restored \(preserved.role) manager \(preserved.restoreID) with \(queued.count) queued event(s)")
        return (state, queued.map { event in
            var event = event
            retarget(&event, manager: 1)
            return event
        })
    }

    private func retarget(_ event: inout Beryl_Ipc_V1_ManagerEvent, manager: UInt32) {
        switch event.kind {
        case .discovered?: event.discovered.manager = manager
        case .connected?: event.connected.manager = manager
        case .disconnected?: event.disconnected.manager = manager
        default: break
        }
    }

    // MARK: Session end

    func makePreservedID() -> UInt64 {
        defer { nextPreservedID += 1 }
        return nextPreservedID
    }

    /// A session of an opted-in manager closed without the app quitting: managerd holds its work meanwhile.
    func preserveOnClose(_ sessionID: UInt64) -> Bool {
        guard let preserved = preservedManagers.first(where: { $0.holder == .session(sessionID) }) else { return false }
        rebind(from: preserved.holder, to: .preserved(preserved.id))
        preserved.holder = .preserved(preserved.id)
        if let stash = preserved.unrepublished {
            // Gone before it added its services again: managerd publishes them for it, as for a restored manager.
            if !stash.services.isEmpty { pendingRepublish.append((preserved.key, stash.services)) }
            if advertisers[preserved.key] == nil, let advertiser = stash.advertiser { advertisers[preserved.key] = advertiser }
            if state == .poweredOn {
                republishPreserved()
                updateAdvertising()
            }
        }
        persist(preserved)
        host.logger.info("\(preserved.appID) is gone; its \(preserved.role) manager \(preserved.restoreID) is preserved")
        return true
    }

    private func rebind(from old: ManagerHolder, to new: ManagerHolder) {
        scans.rebind(old, to: new)
        book.rebind(old, to: new)
        for index in services.indices where services[index].owner.holder == old { services[index].owner.holder = new }
        for (key, advertiser) in advertisers where key.holder == old {
            advertisers[key] = nil
            advertisers[ManagerKey(new, manager: key.manager)] = advertiser
        }
        for (id, open) in openRequests where open.owner.holder == old { openRequests[id] = (ManagerKey(new, manager: open.owner.manager), open.isRead) }
        if notifyRefused.remove(old) != nil { notifyRefused.insert(new) }
        for index in pendingRepublish.indices where pendingRepublish[index].0.holder == old { pendingRepublish[index].0.holder = new }
    }

    /// A user quit (or the app invalidated the manager): the preserved work is discarded.
    func discard(_ preserved: PreservedManager) {
        preservedManagers.removeAll { $0 === preserved }
        try? restorationStore?.remove(appID: preserved.appID, restoreID: preserved.restoreID, role: preserved.role)
        if !preserved.live { releaseWork(of: preserved.holder) }
        host.logger.info("\(preserved.appID)'s \(preserved.role) manager \(preserved.restoreID) discarded")
    }

    // MARK: Events while the app is away

    /// An event for a preserved manager whose app is not running: queued (bounded, one discovery per peripheral),
    /// and the app is launched to handle it.
    func queueForAbsentApp(_ event: Beryl_Ipc_V1_ManagerEvent, preservedID: UInt64) {
        guard let preserved = preservedManagers.first(where: { $0.holder == .preserved(preservedID) }) else { return }
        switch event.kind {
        case .stateChanged?, .pairingPrompt?, .pairingFinished?, .readyToUpdate?, .readyToWrite?, .advertisingStarted?, nil:
            return  // the restored manager hears the current state; prompts cannot wait
        default:
            preserved.queued.hold(event)
        }
        launchForRestoration(preserved.appID)
    }

    func launchForRestoration(_ appID: String) {
        guard let manifest = catalog.apps[appID], manifest.launch != nil,
              !waitingToRestore(appID).isEmpty else { return }
        switch relaunch.verdict(for: appID, at: host.loop.uptime) {
        case .launch:
            break
        case .notBefore(let time):
            // Apps that ran under an earlier managerd may be reconnecting, or a crash loop is backing off: one try at
            // that time. The margin keeps a timer that libevent fires from its cached clock from landing just short.
            deferLaunch(appID, until: time)
            return
        }
        guard !stoppingApps else { return }
        var runtime = apps[appID, default: AppRuntime()]
        if runtime.holdsLaunch { return }
        if preservedManagers.contains(where: { $0.appID == appID && $0.live }) { return }
        runtime.launches += 1
        apps[appID] = runtime
        _ = launch(manifest)
    }

    /// Starts the manifest's command as its user, with the launch options in the environment.
    func launch(_ manifest: AppManifest) -> String? {
        guard let command = manifest.launch else { return "\(manifest.id) has no launch command" }
        guard !stoppingApps else { return "managerd is stopping" }
        var environment = ["PATH": "/usr/local/bin:/usr/bin:/bin", "BERYL_APP_ID": manifest.id, "BERYL_RUNTIME_DIR": host.paths.runtimeDir,
                           "HOME": "/", "LANG": "C.UTF-8"]
        let waiting = preservedManagers.filter { $0.appID == manifest.id && !$0.live }
        environment["BERYL_LAUNCH_CENTRALS"] = waiting.filter { $0.role == .central }.map(\.restoreID).joined(separator: ",")
        environment["BERYL_LAUNCH_PERIPHERALS"] = waiting.filter { $0.role == .peripheral }.map(\.restoreID).joined(separator: ",")
        var runtime = apps[manifest.id, default: AppRuntime()]
        try? FileManager.default.createDirectory(atPath: host.paths.logDir, withIntermediateDirectories: true)
        do {
            let pid = try Spawn.start(command, environment: environment, logPath: host.paths.logDir + "/app-\(manifest.id).log",
                                      uid: manifest.uid, gid: manifest.gid)
            runtime.launchedPID = pid
            runtime.adopted = false
            relaunch.launched(manifest.id, at: host.loop.uptime)
            life.launched(manifest.id)
            host.logger.info("launched \(manifest.id) as \(manifest.user) (pid \(pid))"
                             + (waiting.isEmpty ? "" : " to restore \(waiting.map(\.restoreID).joined(separator: ", "))"))
            apps[manifest.id] = runtime
            recordLaunchedApps()
            return nil
        } catch {
            let delay = relaunch.launchFailed(manifest.id, reason: "\(error)", at: host.loop.uptime)
            apps[manifest.id] = runtime
            host.logger.error("cannot launch \(manifest.id): \(error); trying again in \(delay) if its work still waits")
            deferLaunch(manifest.id, until: host.loop.uptime + delay)
            return "\(error)"
        }
    }

    /// The app's preserved managers with events held for it: what a relaunch is for.
    private func waitingToRestore(_ appID: String) -> [PreservedManager] {
        preservedManagers.filter { $0.appID == appID && !$0.live && $0.queued.count > 0 }
    }

    private func deferLaunch(_ appID: String, until time: Duration) {
        guard deferredLaunches.insert(appID).inserted else { return }
        _ = try? host.loop.after(max(.zero, time - host.loop.uptime) + .milliseconds(10)) { [unowned self] in
            self.deferredLaunches.remove(appID)
            self.launchForRestoration(appID)
        }
    }

    /// Reaps launched apps; one that ended with preserved work still waiting is launched again, with backoff.
    func superviseApps() {
        for (appID, runtime) in apps {
            guard let pid = runtime.launchedPID else { continue }
            let ended = runtime.adopted ? (ProcessStats.isAlive(pid: pid) ? nil : "exited") : Spawn.reap(pid).map { "\($0.exit)" }
            guard let reason = ended else {
                // Up, but it has not made the managers it was launched to restore: ended, so that it is launched again.
                let waiting = waitingToRestore(appID)
                if relaunch.overdue(appID, waiting: waiting.map(\.restoreID), at: host.loop.uptime) {
                    host.logger.warning("\(appID) (pid \(pid)) \(relaunch.failure(of: appID).map { "\($0)" } ?? ""); ending it")
                    kill(pid, SIGTERM)
                }
                continue
            }
            var updated = runtime
            updated.launchedPID = nil
            updated.adopted = false
            defer { recordLaunchedApps() }
            let waiting = waitingToRestore(appID)
            if let delay = relaunch.exited(appID, exit: reason, waiting: waiting.map(\.restoreID), at: host.loop.uptime) {
                host.logger.warning("\(appID) \(relaunch.failure(of: appID).map { "\($0)" } ?? ""); launching again in \(delay)")
                deferLaunch(appID, until: host.loop.uptime + delay)
            }
            if !preservedManagers.contains(where: { $0.appID == appID && $0.live }), sessionsOf(appID).isEmpty { life.exited(appID) }
            apps[appID] = updated
        }
    }

    func sessionsOf(_ appID: String) -> [IPCSession] {
        (host.server?.sessions.values.map { $0 } ?? []).filter { appSessions[$0.id]?.appID == appID }
    }

    static func wire(_ failure: LaunchFailure?) -> Beryl_Ipc_V1_LaunchFailureKind {
        switch failure {
        case nil: .none
        case .couldNotStart?: .couldNotStart
        case .didNotRestore?: .didNotRestore
        case .exitedWithoutRestoring?: .exitedWithoutRestoring
        }
    }

    // MARK: Persistence

    func persist(_ preserved: PreservedManager) {
        guard let restorationStore else { return }
        do {
            let bytes: [UInt8] = try snapshot(preserved).serializedBytes()
            try restorationStore.save(PreservedRecord(appID: preserved.appID, restoreID: preserved.restoreID, role: preserved.role, state: bytes))
        } catch {
            host.logger.error("cannot persist \(preserved.appID)'s manager \(preserved.restoreID): \(error)")
        }
    }

    /// Persists the manager of this holder if it opted into restoration (before its request is acknowledged).
    func persistIfPreserved(_ holder: ManagerHolder) {
        guard let preserved = preservedManagers.first(where: { $0.holder == holder }) else { return }
        persist(preserved)
    }

    func snapshot(_ preserved: PreservedManager) -> Beryl_Ipc_V1_PreservedState {
        let key = preserved.key
        var state = Beryl_Ipc_V1_PreservedState()
        switch preserved.role {
        case .central:
            state.central = .with { central in
                if let scan = scans.request(for: key) {
                    central.scanning = true
                    central.scanServiceUuids = scan.services.map(\.description)
                    central.allowDuplicates = scan.allowDuplicates
                    central.solicitedServiceUuids = scan.solicited.map(\.description)
                }
                let (connected, pending) = book.held(by: key)
                central.links = (connected.map { ($0, false) } + pending.map { ($0, true) }).map { identifier, isPending in
                    .with { link in
                        link.identifier = identifier
                        link.pending = isPending
                        link.name = store?.device(identifier)?.name ?? ""
                        if let options = preserved.connectOptions[identifier] {
                            link.notifyOnConnection = options.notifyOnConnection
                            link.notifyOnDisconnection = options.notifyOnDisconnection
                            link.notifyOnNotification = options.notifyOnNotification
                        }
                        // What the app discovered stays known across a reconnection, so a restored app need not discover again.
                        if let database = preserved.databases[identifier] {
                            link.database = database
                            link.notifyingValueHandles = isPending ? [] : (preserved.notifying[identifier] ?? []).sorted()
                        }
                    }
                }
            }
        case .peripheral:
            state.peripheral = .with { peripheral in
                peripheral.services = preserved.unrepublished?.services ?? services.filter { $0.owner == key }.compactMap { serviceSpecs[$0.range.lowerBound] }
                if let advertiser = advertisers[key] ?? preserved.unrepublished?.advertiser {
                    peripheral.advertising = true
                    peripheral.localName = advertiser.localName
                    peripheral.advertisedServiceUuids = advertiser.serviceUUIDs.map(\.description)
                }
                let ranges = services.filter { $0.owner == key }.map(\.range)
                peripheral.subscriptions = subscribers.filter { entry in ranges.contains { $0.contains(UInt16(truncatingIfNeeded: entry.valueHandle)) } }
            }
        }
        return state
    }

    /// After a restart of managerd: every preserved manager's work resumes, held by managerd until its app returns.
    func resumePreserved() {
        guard let restorationStore, let records = try? restorationStore.all() else { return }
        for record in records {
            guard let state = try? Beryl_Ipc_V1_PreservedState(serializedBytes: record.state) else {
                host.logger.error("preserved state of \(record.appID)/\(record.restoreID) unreadable; dropped")
                continue
            }
            let id = makePreservedID()
            let preserved = PreservedManager(id: id, appID: record.appID, restoreID: record.restoreID, role: record.role, holder: .preserved(id))
            preservedManagers.append(preserved)
            let key = preserved.key
            if state.hasCentral {
                let central = state.central
                if central.scanning {
                    scans.start(key, ScanRequest(services: central.scanServiceUuids.compactMap(BluetoothUUID.init), allowDuplicates: central.allowDuplicates,
                                                 solicited: central.solicitedServiceUuids.compactMap(BluetoothUUID.init)))
                }
                for link in central.links {
                    guard let device = store?.device(link.identifier) else { continue }
                    // A link that was up is wanted again: the connection is re-requested and never times out.
                    _ = book.connect(key, identifier: device.identifier, address: device.address)
                    preserved.connectOptions[link.identifier] = .with {
                        $0.notifyOnConnection = link.notifyOnConnection
                        $0.notifyOnDisconnection = link.notifyOnDisconnection
                        $0.notifyOnNotification = link.notifyOnNotification
                    }
                    if link.hasDatabase { preserved.databases[link.identifier] = link.database }
                }
            }
            if state.hasPeripheral {
                pendingRepublish.append((key, state.peripheral.services))
                let peripheral = state.peripheral
                if peripheral.advertising {
                    let uuids = peripheral.advertisedServiceUuids.compactMap(BluetoothUUID.init)
                    advertisers[key] = Advertiser(localName: peripheral.localName, serviceUUIDs: uuids)
                }
            }
            host.logger.info("resumed \(record.appID)'s \(record.role) manager \(record.restoreID) (app not running)")
        }
    }

    /// Publishes preserved services again once attd is there (its database went with its session to managerd).
    func republishPreserved() {
        guard let attd else { return }
        let work = pendingRepublish
        pendingRepublish.removeAll()
        for (key, specs) in work {
            guard let preserved = preservedManagers.first(where: { $0.holder == key.holder }) else { continue }  // discarded meanwhile
            let epoch = preserved.publicationEpoch
            for preservedService in specs {
                var request = Request()
                request.att.publishService.service = preservedService.spec
                attd.request(request) { [unowned self] result in
                    guard case .success(let response) = result else {
                        self.host.logger.error("cannot publish a preserved service \(preservedService.spec.uuid) again: \(result)")
                        return
                    }
                    let published = response.att.servicePublished
                    let range = UInt16(published.startHandle)...UInt16(published.endHandle)
                    // Meanwhile the manager may have been discarded, or its app come back and cleared its services.
                    guard self.preservedManagers.contains(where: { $0 === preserved }), preserved.publicationEpoch == epoch else {
                        self.host.logger.info("\(preserved.appID)'s service \(preservedService.spec.uuid), published again for it, is withdrawn: the app cleared its services meanwhile")
                        self.unpublish(range.lowerBound)
                        return
                    }
                    // The app may be back (restored) by now: the service is its session's, no longer managerd's.
                    let owner = ManagerKey(preserved.holder, manager: key.manager)
                    self.services.append(PublishedService(range: range, owner: owner))
                    self.serviceSpecs[range.lowerBound] = .with { $0.spec = preservedService.spec; $0.published = published }
                    if self.services.filter({ $0.owner == owner }).count >= specs.count { preserved.unrepublished = nil }
                    self.persist(preserved)
                }
            }
        }
    }

    // MARK: beryl app

    func handleApps(_ kind: Beryl_Ipc_V1_ManagerRequest.OneOf_Kind, session: IPCSession, _ incoming: IncomingRequest) {
        func authorized(_ appID: String) -> AppManifest? {
            guard let manifest = catalog.apps[appID] else {
                incoming.fail(.notFound, "no app manifest declares '\(appID)'", field: "app_id")
                return nil
            }
            guard session.peer.uid == 0 || session.peer.uid == getuid() || session.peer.uid == manifest.uid else {
                incoming.fail(.permissionDenied, "only root, managerd's user or \(manifest.user) may drive \(appID)", field: "app_id")
                return nil
            }
            return manifest
        }
        switch kind {
        case .listApps:
            incoming.respond(.with { $0.manager.apps = .with { list in
                let running = Set((host.server?.sessions.values.map { $0 } ?? []).compactMap { appSessions[$0.id]?.appID }.filter { !$0.isEmpty })
                list.apps = Set(catalog.apps.keys).union(running).sorted().map { info(forApp: $0) }
                list.refused = catalog.refused.map(\.description)
            } })
        case .launchApp(let launchRequest):
            guard let manifest = authorized(launchRequest.appID) else { return }
            if let error = launch(manifest) {
                incoming.fail(.notReady, error, field: "app_id")
            } else {
                apps[manifest.id]?.launches += 1
                incoming.respond(.with { $0.manager.apps.apps = [appInfo(manifest)] })
            }
        case .stopApp(let stop):
            guard let manifest = authorized(stop.appID) else { return }
            if stop.userQuit {
                // A user force-quit: nothing of the app's is kept (its live sessions release their work as they close).
                for preserved in preservedManagers where preserved.appID == manifest.id { discard(preserved) }
                try? restorationStore?.removeAll(appID: manifest.id)
                for live in sessionsOf(manifest.id) { appSessions[live.id]?.quitting = true }
            }
            var pids = Set(sessionsOf(manifest.id).map(\.peer.pid))
            if let pid = apps[manifest.id]?.launchedPID { pids.insert(pid) }
            for pid in pids where pid > 1 { kill(pid, SIGTERM) }
            host.logger.info("\(stop.userQuit ? "quit" : "terminated") \(manifest.id) (pids \(pids.sorted()))")
            incoming.respond(.with { $0.manager.apps.apps = [appInfo(manifest)] })
        case .setAppState(let change):
            // An app reports its own state; root, managerd's user, or the app's own user may force it (labs, tests).
            let own = appSessions[session.id]?.appID == change.appID && !change.appID.isEmpty
            let users = Set(sessionsOf(change.appID).map(\.peer.uid) + [catalog.apps[change.appID]?.uid].compactMap { $0 })
            guard own || session.peer.uid == 0 || session.peer.uid == getuid() || users.contains(session.peer.uid) else {
                incoming.fail(.permissionDenied, "only the app, root or managerd's user may set \(change.appID)'s state", field: "app_id")
                return
            }
            guard catalog.apps[change.appID] != nil || !sessionsOf(change.appID).isEmpty else {
                incoming.fail(.notFound, "no app '\(change.appID)' is declared or running", field: "app_id")
                return
            }
            guard let state = Self.lifecycle(change.state) else {
                incoming.fail(.invalidArgument, "an app is not running when its process exits; use terminate or quit", field: "state")
                return
            }
            setLifecycle(change.appID, state, reason: own ? "reported by the app" : "set by uid \(session.peer.uid)")
            incoming.respond(.with { $0.manager.apps.apps = [info(forApp: change.appID)] })
        default:
            incoming.fail(.unsupported, "not an app request")
        }
    }

    /// An app with a manifest, or one running without (foreground-only, no restoration).
    func info(forApp appID: String) -> Beryl_Ipc_V1_AppInfo {
        if let manifest = catalog.apps[appID] { return appInfo(manifest) }
        return .with {
            $0.id = appID
            $0.state = lifecycleProto(lifecycle(of: appID))
            $0.pids = Array(Set(sessionsOf(appID).map(\.peer.pid))).sorted()
            $0.queuedEvents = UInt32(sessionsOf(appID).compactMap { appSessions[$0.id]?.held.count }.reduce(0, +))
        }
    }

    /// The states an app can be put in: not running is what its process exiting makes it.
    static func lifecycle(_ state: Beryl_Ipc_V1_AppLifecycle) -> LifecycleState? {
        switch state {
        case .foreground: .foreground
        case .background: .background
        case .suspended: .suspended
        case .notRunning, .UNRECOGNIZED: nil
        }
    }

    func lifecycleProto(_ state: LifecycleState) -> Beryl_Ipc_V1_AppLifecycle {
        switch state {
        case .foreground: .foreground
        case .background: .background
        case .suspended: .suspended
        case .notRunning: .notRunning
        }
    }

    func appInfo(_ manifest: AppManifest) -> Beryl_Ipc_V1_AppInfo {
        let runtime = apps[manifest.id] ?? AppRuntime()
        let mine = preservedManagers.filter { $0.appID == manifest.id }
        let preservedQueued: Int = mine.map(\.queued.count).reduce(0, +)
        let held: Int = sessionsOf(manifest.id).compactMap { appSessions[$0.id]?.held.count }.reduce(0, +)
        var pids: Set<Int32> = Set(sessionsOf(manifest.id).map(\.peer.pid))
        if let launched = runtime.launchedPID { pids.insert(launched) }
        return .with {
            $0.id = manifest.id
            $0.manifest = manifest.file
            $0.user = manifest.user
            $0.backgroundModes = manifest.backgroundModes.map(\.rawValue).sorted()
            $0.launchable = manifest.launch != nil
            $0.state = lifecycleProto(lifecycle(of: manifest.id))
            $0.pids = pids.sorted()
            $0.preservedCentrals = mine.filter { $0.role == .central }.map(\.restoreID).sorted()
            $0.preservedPeripherals = mine.filter { $0.role == .peripheral }.map(\.restoreID).sorted()
            $0.queuedEvents = UInt32(preservedQueued + held)
            $0.launches = UInt32(runtime.launches)
            $0.lastLaunchError = relaunch.failure(of: manifest.id)?.description ?? ""
            $0.lastLaunchFailure = Self.wire(relaunch.failure(of: manifest.id))
        }
    }
}

// MARK: Launched apps across managerd's life

extension ManagerDaemon {
    var launchedAppsPath: String { host.paths.stateDir + "/launched-apps.json" }

    func recordLaunchedApps() {
        let running = apps.compactMap { appID, runtime in runtime.launchedPID.map { (app: appID, pid: $0) } }
        do {
            try LaunchedApps(running: running).save(to: launchedAppsPath)
        } catch {
            host.logger.error("cannot record the launched apps: \(error)")
        }
    }

    /// Apps an earlier managerd launched and that outlived it (it crashed, or was killed) are this one's to watch
    /// and, at the end, to stop.
    func adoptLaunchedApps() {
        let running = LaunchedApps.load(from: launchedAppsPath).stillRunning()
        for entry in running where catalog.apps[entry.app] != nil {
            var runtime = apps[entry.app, default: AppRuntime()]
            // Only the pid is taken: the app's lifecycle state went with the old managerd, and is what it was for an
            // app that reconnects (foreground, until it or `beryl app state` says otherwise).
            runtime.launchedPID = entry.pid
            runtime.adopted = true
            apps[entry.app] = runtime
            host.logger.info("\(entry.app) (pid \(entry.pid)), launched before this managerd started, is still running")
        }
        recordLaunchedApps()
    }

    /// managerd stopped (SIGTERM: `beryl down`, systemd) ends the apps it launched, as the system ends a
    /// background app: their preserved managers stay, so a later managerd launches them again for their events.
    /// A managerd that crashes leaves them running, to reconnect to its successor.
    func stopLaunchedApps() {
        guard !stoppingApps else { return }
        stoppingApps = true
        let pids = launchedAppsAlive
        guard !pids.isEmpty else { finishStopping(); return }
        host.logger.info("ending the apps it launched (pids \(pids.sorted()))")
        for pid in pids { kill(pid, SIGTERM) }
        let deadline = ContinuousClock.now + Self.appStopGrace
        func check() {
            superviseApps()
            let left = launchedAppsAlive
            if left.isEmpty { finishStopping(); return }
            if ContinuousClock.now >= deadline {
                host.logger.warning("apps \(left.sorted()) ignored SIGTERM; killing them")
                for pid in left { kill(pid, SIGKILL) }
                // Reaped at one more look on the loop, not waited for on it.
                _ = try? host.loop.after(.milliseconds(50)) { [unowned self] in
                    superviseApps()
                    finishStopping()
                }
                return
            }
            _ = try? host.loop.after(.milliseconds(50)) { check() }
        }
        check()
    }

    private var launchedAppsAlive: [Int32] { apps.values.compactMap(\.launchedPID).filter { ProcessStats.isAlive(pid: $0) } }

    /// Within the supervisor's 5 s before it kills managerd itself.
    static let appStopGrace = Duration.seconds(3)

    private func finishStopping() {
        recordLaunchedApps()
        host.stop()
    }
}
