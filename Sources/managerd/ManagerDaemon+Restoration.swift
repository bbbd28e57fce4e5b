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

    /// The core checks the app id a session claims and binds its restore identifier; a refusal names its field.
    func bindSession(_ hello: Beryl_Ipc_V1_Hello, session: IPCSession) throws(WireFailure) -> ManagerCore<Beryl_Ipc_V1_ManagerEvent>.Greeting {
        let role: ManagerRole = hello.role == .peripheral ? .peripheral : .central
        switch core.hello(session.id, appID: hello.appID, uid: session.peer.uid, restoreID: hello.restoreIdentifier, role: role,
                          isLabSession: lab.isLabSession(session.id)) {
        case .success(let greeting):
            if case .made(let id) = greeting, let made = core.restoration.manager(id: id) { persist(made) }
            return greeting
        case .failure(let refusal):
            throw WireFailure(refusal)
        }
    }

    /// The app is back: the work managerd held for it moves to the new session, which hears willRestoreState (in the
    /// Welcome) and then the events queued while it was gone.
    func restore(_ id: UInt64, into session: UInt64) -> (Beryl_Ipc_V1_PreservedState, [Beryl_Ipc_V1_ManagerEvent])? {
        guard let preserved = core.restoration.manager(id: id), let (state, queued) = core.restore(id, into: session, name: peripheralName) else { return nil }
        host.logger.info("\(preserved.appID) restored \(preserved.role) manager \(preserved.restoreID) with \(queued.count) queued event(s)")
        return (state.wire, queued.map { event in
            var event = event
            event.retarget(manager: 1)
            return event
        })
    }

    // MARK: What the core decided

    func apply(_ outputs: [ManagerCore<Beryl_Ipc_V1_ManagerEvent>.Output]) {
        // An app's grant follows its lifecycle, told to attd after what these outputs deliver (the events held for an
        // app back in the foreground leave before attd sends it anything directly again).
        defer { if !outputs.isEmpty { syncGrants() } }
        for output in outputs {
            switch output {
            case .persist(let id):
                if let preserved = core.restoration.manager(id: id) { persist(preserved) }
            case .forget(let appID, let restoreID, let role):
                try? records.forget(.init(appID: appID, restoreID: restoreID, role: role))
                host.logger.info("\(appID)'s \(role) manager \(restoreID) discarded")
            case .forgetApp(let appID):
                try? records.forgetApp(appID)
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
                republishWhenNoOrphans()
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
                if let failure { host.logger.warning("\(appID) \(failure); launching again in \(time - host.loop.uptime) if its work still waits") }
            case .launchesChanged:
                recordLaunchedApps()
            case .unsubscribe(let clearing):
                clearSubscription(clearing)
            case .subscriberGone(let owner, let subscription):
                // The record says so already; only a running app is told (an absent one reads its record on return).
                guard case .session(let session) = owner.holder else { break }
                send(Beryl_Ipc_V1_ManagerEvent(subscription: subscription, manager: owner.manager), to: session)
            case .suspended(let appID, let after):
                host.logger.info("\(appID) is suspended (foreground-only, \(after) in the background)")
            case .overran(let appID):
                endOverrunningApp(appID)
            case .idleAgain(let appID, let awake):
                host.logger.info("\(appID) is idle again after \(awake) awake")
            case .gattResumed(let token):
                gattWaiting.removeValue(forKey: token)?()
            case .forgetUpdates(let session):
                forgetUpdateSender(session)
            case .forgetWrites(let session, let link):
                forgetWriteSender(session, on: link)
            case .reply(let token, let result):
                answer(token, result)
            case .askController(let token, let controllerAsk):
                ask(controllerAsk, answering: token)
            case .discovered(let discovery):
                report(discovery)
            case .advertisingAsked(let key):
                updateAdvertising { [unowned self] error in
                    send(.with { $0.advertisingStarted = .with { $0.manager = key.manager; $0.error = error ?? "" } }, to: key.holder)
                }
            case .answerRemote(let id, let isRead, let value, let attError):
                answerAttd(id, isRead: isRead, value: value, error: UInt32(attError))
            case .writesReadyAfresh(let link):
                forwardToHolders(.gattWriteReady(.with { $0.connectionHandle = UInt32(link) }), connectionHandle: UInt32(link))
            }
        }
        armDeadline()
    }

    /// A user quit (or the app invalidated the manager): the preserved work is discarded.
    func discard(_ id: UInt64) { apply(core.discard(id)) }

    // MARK: Events while the app is away

    /// An event for a preserved manager whose app is not running: held (bounded, one discovery per peripheral), and
    /// the app is launched to handle it.
    func queueForAbsentApp(_ event: Beryl_Ipc_V1_ManagerEvent, preservedID: UInt64) {
        guard event.waitsForAbsentApp else { return }
        apply(core.holdForAbsentApp(event, replacing: event.heldKey, for: preservedID, at: host.loop.uptime))
    }

    // MARK: Persistence

    func persist(_ preserved: PreservedManager) {
        do {
            try records.save(preserved.recordKey, snapshot(preserved))
        } catch {
            host.logger.error("cannot persist \(preserved.appID)'s manager \(preserved.restoreID): \(error)")
        }
    }

    func snapshot(_ preserved: PreservedManager) -> PreservedState { core.snapshot(preserved, name: peripheralName) }

    func peripheralName(_ identifier: String) -> String { store?.device(identifier)?.name ?? "" }

    /// After a restart of managerd: every preserved manager's work resumes, held by managerd until its app returns.
    func resumePreserved() {
        guard let (resumable, unreadable) = try? records.load() else { return }
        for (key, error) in unreadable {
            host.logger.error("preserved state of \(key.appID)/\(key.restoreID) is \(error); left in the store as it is, not resumed")
        }
        for record in resumable {
            _ = core.resume(appID: record.key.appID, restoreID: record.key.restoreID, role: record.key.role, from: record.state) { self.store?.device($0)?.address }
            host.logger.info("resumed \(record.key.appID)'s \(record.key.role) manager \(record.key.restoreID) (app not running)")
        }
    }

    /// Publishes preserved services again once attd is there (its database went with its session to managerd).
    func republishPreserved() {
        guard let attd else { return }
        for republication in core.takeRepublications() {
            for preservedService in republication.services {
                var request = Request()
                request.att.publishService.service = preservedService.definition.wire
                attd.request(request) { [unowned self] result in
                    guard case .success(let response) = result, let range = response.att.servicePublished.handles else {
                        host.logger.error("cannot publish a preserved service \(preservedService.definition.uuid) again: \(result)")
                        return
                    }
                    let valueHandles = response.att.servicePublished.valueHandles.map { UInt16(truncatingIfNeeded: $0) }
                    let service = PreservedState.PublishedService(definition: preservedService.definition, handles: range, valueHandles: valueHandles)
                    apply(core.republished(service, at: range, for: republication))
                }
            }
        }
    }
}
