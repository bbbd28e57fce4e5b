import BerylCore
import BerylDaemonKit
import BerylIPC
import BerylManager
import BerylManagerWire
import BerylStore
import Glibc

/// Restoration's shell: BerylManager's Restoration decides which manager a Hello restores and what is held for an
/// absent app; here its managers' scans, links and services move between holders, records are written and apps launched.
extension ManagerDaemon {
    // MARK: Hello

    enum HelloBinding {
        case refused
        case plain
        case restoring(UInt64)
    }

    /// Checks the app id a session claims and binds its restore identifier.
    func bindSession(_ hello: Beryl_Ipc_V1_Hello, session: IPCSession, _ incoming: IncomingRequest) -> HelloBinding {
        if !hello.appID.isEmpty, let manifest = core.catalog.apps[hello.appID], session.peer.uid != manifest.uid {
            incoming.fail(.permissionDenied, "app \(hello.appID) runs as \(manifest.user) (uid \(manifest.uid)); this process is uid \(session.peer.uid)",
                          field: "app_id")
            return .refused
        }
        guard !hello.restoreIdentifier.isEmpty else { return .plain }
        guard core.catalog.apps[hello.appID] != nil else {
            incoming.fail(.invalidArgument, "restoration needs an app manifest for '\(hello.appID)' (apps without one are foreground-only)",
                          field: "restore_identifier")
            return .refused
        }
        let role: ManagerRole = hello.role == .peripheral ? .peripheral : .central
        switch core.restoration.bind(appID: hello.appID, restoreID: hello.restoreIdentifier, role: role, session: session.id) {
        case .inUse:
            incoming.fail(.busy, "restore identifier \(hello.restoreIdentifier) is in use by another manager of \(hello.appID)", field: "restore_identifier")
            return .refused
        case .restorable(let preserved):
            return .restoring(preserved.id)
        case .made(let made):
            persist(made)
            return .plain
        }
    }

    /// The app is back: the work managerd held for it moves to the new session, which hears willRestoreState (in the
    /// Welcome) and then the events queued while it was gone.
    func restore(_ id: UInt64, into session: UInt64) -> (Beryl_Ipc_V1_PreservedState, [Beryl_Ipc_V1_ManagerEvent])? {
        guard let preserved = core.restoration.manager(id: id), let (state, queued) = core.restore(id, into: session, name: peripheralName) else { return nil }
        host.logger.info("\(preserved.appID) restored \(preserved.role) manager \(preserved.restoreID) with \(queued.count) queued event(s)")
        return (state.wire, queued.map { event in
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

    // MARK: What the core decided

    func apply(_ outputs: [ManagerCore<Beryl_Ipc_V1_ManagerEvent>.Output]) {
        for output in outputs {
            switch output {
            case .persist(let id):
                if let preserved = core.restoration.manager(id: id) { persist(preserved) }
            case .forget(let appID, let restoreID, let role):
                try? restorationStore?.remove(appID: appID, restoreID: restoreID, role: PreservedRecord.Role(role))
                host.logger.info("\(appID)'s \(role) manager \(restoreID) discarded")
            case .connections(let connection):
                apply([connection])
            case .unpublish(let start):
                unpublish(start)
            case .answerAbandoned(let id, let isRead):
                answerAttd(id, isRead: isRead, value: [], error: 0x0E)
            case .scanningChanged:
                updateScanning()
            case .advertisingChanged:
                updateAdvertising()
            case .republish:
                republishPreserved()
            case .connectionEvent(let key, let change, let identifier):
                announce(change, identifier: identifier, to: key)
            case .deliver(let session, let events):
                deliver(events, to: session)
            case .stateChanged(let newState):
                stateChanged(newState)
            case .launch(let order):
                spawn(order)
            case .terminate(let appID, let pid, let failure):
                host.logger.warning("\(appID) (pid \(pid)) \(failure); ending it")
                kill(pid, SIGTERM)
            case .launchDeferred(let appID, let time, let failure):
                if let failure { host.logger.warning("\(appID) \(failure); launching again in \(time - host.loop.uptime)") }
                armLaunchTimer()
            case .launchesChanged:
                recordLaunchedApps()
            }
        }
    }

    /// A user quit (or the app invalidated the manager): the preserved work is discarded.
    func discard(_ id: UInt64) { apply(core.discard(id)) }

    // MARK: Events while the app is away

    /// An event for a preserved manager whose app is not running: held (bounded, one discovery per peripheral), and
    /// the app is launched to handle it.
    func queueForAbsentApp(_ event: Beryl_Ipc_V1_ManagerEvent, preservedID: UInt64) {
        switch event.kind {
        case .stateChanged?, .pairingPrompt?, .pairingFinished?, .readyToUpdate?, .readyToWrite?, .advertisingStarted?, nil:
            return  // the restored manager hears the current state; prompts cannot wait
        default:
            guard let appID = core.restoration.hold(event, discoveryOf: event.discoveredPeripheral, for: preservedID) else { return }
            apply(core.launchIfWaiting(appID, at: host.loop.uptime))
        }
    }

    // MARK: Persistence

    func persist(_ preserved: PreservedManager) {
        guard let restorationStore,
              !unreadableRecords.contains(RecordKey(appID: preserved.appID, restoreID: preserved.restoreID, role: preserved.role)) else { return }
        do {
            try restorationStore.save(PreservedRecord(appID: preserved.appID, restoreID: preserved.restoreID, role: PreservedRecord.Role(preserved.role),
                                                      state: snapshot(preserved).encoded()))
        } catch {
            host.logger.error("cannot persist \(preserved.appID)'s manager \(preserved.restoreID): \(error)")
        }
    }

    /// Persists the manager of this holder if it opted into restoration (before its request is acknowledged).
    func persistIfPreserved(_ holder: ManagerHolder) {
        guard let preserved = core.restoration.manager(heldBy: holder) else { return }
        persist(preserved)
    }

    /// Changes the holder's preserved manager, if it opted into restoration, and writes its record.
    func updatePreserved(_ holder: ManagerHolder, _ change: (inout PreservedManager) -> Void) {
        guard let changed = core.restoration.update(heldBy: holder, change) else { return }
        persist(changed)
    }

    func snapshot(_ preserved: PreservedManager) -> PreservedState { core.snapshot(preserved, name: peripheralName) }

    func peripheralName(_ identifier: String) -> String { store?.device(identifier)?.name ?? "" }

    /// After a restart of managerd: every preserved manager's work resumes, held by managerd until its app returns.
    func resumePreserved() {
        guard let restorationStore, let records = try? restorationStore.all() else { return }
        for record in records {
            let state: PreservedState
            do {
                state = try PreservedState.decodeStored(record.state)
            } catch {
                host.logger.error("preserved state of \(record.appID)/\(record.restoreID) is \(error); left in the store as it is, not resumed")
                unreadableRecords.insert(RecordKey(appID: record.appID, restoreID: record.restoreID, role: ManagerRole(record.role)))
                continue
            }
            let preserved = core.resume(appID: record.appID, restoreID: record.restoreID, role: ManagerRole(record.role), from: state) {
                self.store?.device($0)?.address
            }
            if record.state.first != UInt8(ascii: "{") {
                // Version 1 (the wire message) is written again as the current version once it has been read.
                try? restorationStore.save(PreservedRecord(appID: record.appID, restoreID: record.restoreID, role: record.role, state: state.encoded()))
            }
            host.logger.info("resumed \(record.appID)'s \(preserved.role) manager \(record.restoreID) (app not running)")
        }
    }

    /// Publishes preserved services again once attd is there (its database went with its session to managerd).
    func republishPreserved() {
        guard let attd else { return }
        let work = core.pendingRepublish
        core.pendingRepublish.removeAll()
        for (key, specs) in work.sorted(by: { $0.key < $1.key }) {
            guard let preserved = core.restoration.manager(heldBy: key.holder), let republication = core.restoration.startRepublication(heldBy: key.holder) else {
                continue  // discarded meanwhile
            }
            for preservedService in specs {
                var request = Request()
                request.att.publishService.service = preservedService.definition.wire
                attd.request(request) { [unowned self] result in
                    guard case .success(let response) = result else {
                        self.host.logger.error("cannot publish a preserved service \(preservedService.definition.uuid) again: \(result)")
                        return
                    }
                    let published = response.att.servicePublished
                    guard let range = published.handles else {
                        self.host.logger.error("attd answered a preserved service's publication with handles \(published.startHandle)...\(published.endHandle)")
                        return
                    }
                    // Meanwhile the manager may have been discarded, or its app come back and cleared its services.
                    guard let holder = self.core.restoration.owner(of: republication) else {
                        self.host.logger.info("\(preserved.appID)'s service \(preservedService.definition.uuid), published again for it, is withdrawn: the app cleared its services meanwhile")
                        self.unpublish(range.lowerBound)
                        return
                    }
                    // The app may be back (restored) by now: the service is its session's, no longer managerd's.
                    let service = PreservedState.PublishedService(definition: preservedService.definition, handles: range,
                                                                  valueHandles: published.valueHandles.map { UInt16(truncatingIfNeeded: $0) })
                    self.apply(self.core.servicePublished(service, at: range, owner: ManagerKey(holder, manager: key.manager), republishing: specs.count))
                }
            }
        }
    }
}

extension Beryl_Ipc_V1_ManagerEvent {
    /// The peripheral a discovery is of: an app not taking events hears only the latest discovery of each.
    var discoveredPeripheral: String? {
        if case .discovered(let discovery)? = kind { discovery.peripheral.identifier } else { nil }
    }
}

extension ManagerRole {
    init(_ role: PreservedRecord.Role) { self = role == .central ? .central : .peripheral }
}

extension PreservedRecord.Role {
    init(_ role: ManagerRole) { self = role == .central ? .central : .peripheral }
}
