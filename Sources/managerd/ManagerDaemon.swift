import BerylCore
import BerylDaemonKit
import BerylEventLoop
import BerylGAP
import BerylHCI
import BerylIPC
import BerylManager
import BerylManagerWire
import BerylStore
import FoundationEssentials
import Glibc

/// managerd's shell: app sessions on managerd.sock; hcid for scanning, connecting and advertising; attd for GATT.
/// The decisions live in BerylManager's sans-IO parts (scan merging, connection ownership).
final class ManagerDaemon {
    let host: DaemonHost
    var hcid: IPCConnection?
    var attd: IPCConnection?
    /// What apps see: poweredOn only when the controller is and attd is attached (the stack can do GATT); a lost attd
    /// reads as resetting, as Core Bluetooth reports a restarting bluetoothd.
    var state: Beryl_Ipc_V1_ControllerState { .init(core.state) }
    let store: PeripheralStore?

    /// Each manager's work (scans, links, services, advertising) and restoration (BerylManager's ManagerCore).
    var core: ManagerCore<Beryl_Ipc_V1_ManagerEvent>
    var book: ConnectionBook { core.book }

    /// One timer, at the earliest deadline of the core (retries, suspensions, budgets, launches, advertising turns) and
    /// of the lab's reset.
    lazy var deadlineTimer = DeadlineTimer(loop: host.loop)

    // Central role.
    /// The scan the controller runs now (nil: none).
    var controllerScan: ControllerScan?
    /// GATT requests waiting for their link's bearer, by the core's token (`GattStep.waitForBearer`).
    var gattWaiting: [UInt64: () -> Void] = [:]
    /// Apps' requests the core is to answer (`.reply`, `.askController`), by the token it was given.
    var awaitingReply: [UInt64: IncomingRequest] = [:]
    var nextReply: UInt64 = 0

    // Apps, background and restoration.
    let appsDir: String?
    /// The preserved managers' records (restoration.sqlite).
    var records: PreservedRecords
    /// The launched apps' exit watches, by app.
    var exitWatches: [String: ProcessExitWatch] = [:]
    /// Sessions of `beryl alerts`, and their users.
    var alertSubscribers: [UInt64: UInt32] = [:]

    // The data plane (ManagerDaemon+DataChannels).
    /// App sessions with a data channel, and whether attd was last told their grant is live.
    var dataGrants: [UInt64: Bool] = [:]
    /// The audiences attd was told, by peripheral value.
    var audiencesTold: [AudienceKey: Beryl_Ipc_V1_NotificationAudience] = [:]
    /// The links attd was told each app with a channel holds as central.
    var heldLinksTold: [UInt64: Set<UInt16>] = [:]
    /// Audiences a lost attd was told, to tell its successor once apps have channels again.
    var audiencesToTellAgain: Set<AudienceKey> = []
    /// Channels attd kept for apps of a managerd before this one (nil until attd says): preserved managers' services
    /// are published again only once there are none, so that an app whose services attd kept gets no second copy.
    var attdOrphans: UInt32?
    var republishWaitsForOrphans = false
    /// Hellos that present a kept data channel, waiting until attd's links are taken back and the stack is on.
    var adoptionsWaiting: [(Bool) -> Void] = []
    var attdLinksTakenBack = false
    /// The controller's identity is hcid's static random address (it has no public one): apps advertise, scan and
    /// connect with it (own address type random) rather than as 00:00:00:00:00:00.
    var identityIsRandom: Bool { identity?.type.isRandom ?? false }
    var ownAddressType: UInt8 { identityIsRandom ? 0x01 : 0x00 }
    /// hcid's identity address, learned once the controller is powered on.
    var identity: DeviceAddress?

    // Device labs.
    var lab = LabCore<IncomingRequest>()
    /// The static random address a lab session's RANDOM procedures use, made once per managerd; the identity itself
    /// when that is random, since the controller has one random address and the apps' procedures use it too.
    let madeLabRandomAddress = makeStaticRandomAddress { UInt8.random(in: 0...255) }
    var labRandomAddress: (address: BDAddress, set: Bool) { LabOwnAddress.labRandomAddress(identity: identity, made: madeLabRandomAddress) }
    /// What lab sessions made here that a factory reset takes back (nil: the file is damaged, and is left as it is).
    let labRecord: LabRecordFile?

    init(host: DaemonHost, appsDir: String?, suspendAfter: Double = 5, restoreGrace: Double = 15) throws {
        self.host = host
        self.appsDir = appsDir
        // Seconds before an app without a manifest is suspended in the background (a manifest says its own).
        core = ManagerCore(suspendAfter: .milliseconds(Int(suspendAfter * 1000)), restoreGrace: .milliseconds(Int(restoreGrace * 1000)),
                           startedAt: host.loop.uptime)
        do {
            records = PreservedRecords(storage: try RestorationStore(path: host.paths.stateDir + "/restoration.sqlite"))
        } catch {
            host.logger.error("restoration store unusable; preserved state will not survive a restart: \(error)")
            records = PreservedRecords(storage: nil)
        }
        do {
            store = try PeripheralStore(path: host.paths.stateDir + "/peripherals.sqlite")
        } catch {
            host.logger.error("peripheral store unusable; identifiers will not survive a restart: \(error)")
            store = nil
        }
        labRecord = Self.openLabRecord(stateDir: host.paths.stateDir, logger: host.logger)
        host.socketMode = 0o666  // apps connect under their own uid; identity comes from SO_PEERCRED
        host.handle = { [unowned self] in self.handle($0) }
        loadCatalog()
        resumePreserved()
        adoptLaunchedApps()
        host.onTerminationSignal = { [unowned self] in self.stopLaunchedApps() }
        _ = try host.loop.after(.zero) { [unowned self] in
            self.host.server?.onSessionClosed = { [unowned self] session, _ in self.sessionClosed(session.id) }
            self.connectToHcid()
            self.connectToAttd()
        }
    }

    func session(_ id: UInt64) -> IPCSession? { host.server?.sessions[id] }

    /// Keeps the one timer at the earliest deadline (the core's relaunch policy's reconnection grace, 3 s, is one: how
    /// long after starting managerd waits for running apps to reconnect). The millisecond keeps a timer that libevent
    /// fires from its cached clock from landing just short, and puts it after a deadline that is "after" a time.
    func armDeadline() {
        let next = [core.nextDeadline, lab.nextDeadline].compactMap { $0 }.min()
        deadlineTimer.arm(at: next.map { $0 + .milliseconds(1) }) { [unowned self] now in
            apply(core.tick(at: now))
            if let due = lab.nextDeadline, due <= now { applyLab(lab.tick(book: book, at: now)) }
            armDeadline()
        }
    }

    /// To the manager's holder: its app's session, or the queue of a preserved manager whose app is not running.
    func send(_ event: Beryl_Ipc_V1_ManagerEvent, to holder: ManagerHolder) {
        switch holder {
        case .session(let id): send(event, to: id)
        case .preserved(let id): queueForAbsentApp(event, preservedID: id)
        }
    }

    func send(_ event: Beryl_Ipc_V1_ManagerEvent, to sessionID: UInt64) {
        guard let live = session(sessionID) else { return }
        var event = event
        guard admit(&event, for: sessionID) else { return }
        var envelope = Event()
        envelope.manager = event
        live.send(.event(envelope))
    }

    // MARK: Daemons

    private func connectToHcid() {
        host.attach(to: "hcid", onEvent: { [unowned self] in hcidEvent($0) }, attached: { [unowned self] connection in
            hcid = connection
            var subscribe = Request()
            subscribe.hci.subscribe.events = true
            connection.request(subscribe) { [unowned self] result in
                guard case .success(let response) = result else { return }
                host.markAttached("hcid")
                learnIdentity(response.hci.controllerInfo)
                controllerChanged(response.hci.controllerInfo.state)
            }
        }, lost: { [unowned self] reason in
            host.logger.warning("lost hcid (\(reason)); its links are gone")
            hcid = nil
            // hcid's successor resets the controller (Core Vol 4 Part E §7.3.2): every link ends with it, and the
            // apps and preserved managers that held one hear so (a preserved one asks for it again). attd says so
            // too, after or before: whichever comes second names links managerd no longer has.
            for handle in core.linksEndingWithHcid(alsoEnding: lab.peripheralLinks) {
                lab.linkGone(handle)
                linkChanged(.disconnected(handle: handle, reason: 0x16), stackFailed: true)
            }
            controllerChanged(.unknown)
        })
    }

    private func connectToAttd() {
        host.attach(to: "attd", onEvent: { [unowned self] in attdEvent($0) }, attached: { [unowned self] connection in
            attd = connection
            host.markAttached("attd")
            dataChannelsLost()
            attdOrphans = nil
            attdLinksTakenBack = false
            adoptOpenLinks(connection)
            republishWhenNoOrphans()
            apply(core.attd(attached: true, isRunning: isRunning))
        }, lost: { [unowned self] reason in
            // attd's database went with it: the apps' services must be published again (their sessions are told).
            host.logger.warning("lost attd (\(reason)); published services are gone")
            attd = nil
            dataChannelsLost()
            attdOrphans = nil
            attdLinksTakenBack = false
            apply(core.attd(attached: false, isRunning: isRunning))
        })
    }

    /// Links that are up already, because managerd restarted under them, are taken back (`ManagerCore.attdBearers`).
    private func adoptOpenLinks(_ connection: IPCConnection) {
        var request = Request()
        request.att.getBearers = .init()
        connection.request(request) { [unowned self] result in
            guard case .success(let response) = result else { return }
            attdOrphansChanged(response.att.bearers.orphanedChannels)
            takeBackLinks(response.att.bearers)
        }
    }

    /// attd's links, whole: the unknown taken, the known ones it lacks ended while it was away (without attd nobody
    /// heard them end). A list attd made before it had hcid's links waits for its LinksTakenOver.
    private func takeBackLinks(_ listed: Beryl_Ipc_V1_Bearers) {
        guard listed.complete else { return }
        let bearers = listed.bearers.map(OpenBearer.init)
        let (outputs, unknown, ended) = core.attdBearers(bearers, complete: true, alsoKnown: lab.peripheralLinks)
        apply(outputs)
        for handle in ended {
            host.logger.info("link 0x\(String(handle, radix: 16)) ended while attd was away")
            linkChanged(.disconnected(handle: handle, reason: HCIStatus.unspecifiedError.rawValue))
        }
        for bearer in unknown {
            guard let peer = bearer.peer else { continue }
            host.logger.info("link 0x\(String(bearer.link, radix: 16)) with \(peer) was up before managerd started; taking it back")
            linkChanged(.connected(handle: bearer.link, central: bearer.isCentral, peer: peer))
        }
        applyLab(lab.attdAttached(bearers: Set(bearers.map(\.link)), book: book))
        nameEveryLink()
        attdLinksTakenBack = true
        adoptWaitingChannels()
    }

    /// attd says a link opened, before anything else about it: the one way managerd learns of a new link.
    private func bearerOpened(_ bearer: OpenBearer) {
        guard let peer = bearer.peer else { return }
        switch core.news(of: bearer) {
        case .bearerOnly:
            nameLink(bearer.link)
        case .replacesEndedLink:
            linkChanged(.disconnected(handle: bearer.link, reason: HCIStatus.unspecifiedError.rawValue))
            linkChanged(.connected(handle: bearer.link, central: bearer.isCentral, peer: peer))
        case .linkUp:
            linkChanged(.connected(handle: bearer.link, central: bearer.isCentral, peer: peer))
        }
        apply(core.bearer(bearer.link, mtu: bearer.mtu))
    }

    /// attd says a link closed, after everything else about it. One managerd ended itself (it saw hcid go) is past.
    private func bearerClosed(_ bearer: Beryl_Ipc_V1_Bearer) {
        let handle = UInt16(truncatingIfNeeded: bearer.connectionHandle)
        if core.knownLinks(alsoKnown: lab.peripheralLinks).contains(handle) {
            linkChanged(.disconnected(handle: handle, reason: UInt8(truncatingIfNeeded: bearer.reason)), stackFailed: bearer.stackFailed)
        }
        core.bearerClosed(handle)
    }

    /// Sends an HCI command; the answer starts with its status (the return parameters of a Command Complete, or a
    /// Command Status's status).
    func command(_ packet: HCICommandPacket, then: @escaping (Result<[UInt8], IPCClientError>) -> Void = { _ in }) {
        guard let hcid else { return then(.failure(.closed)) }
        var request = Request()
        request.hci.sendCommand.opcode = UInt32(packet.opcode)
        request.hci.sendCommand.parameters = Data(packet.parameters)
        hcid.request(request) { [unowned self] result in
            switch result {
            case .success(let response):
                then(.success(response.hci.commandResult.statusAndReturnParameters))
            case .failure(let error):
                self.host.logger.warning("HCI 0x\(String(packet.opcode, radix: 16)) failed: \(error)")
                then(.failure(error))
            }
        }
    }

    /// Runs the HCI command an app's request asked for and answers the request: `reply` from the return parameters
    /// after the status, or the typed refusal.
    func command(_ packet: HCICommandPacket, named name: String, answering incoming: IncomingRequest,
                 reply: @escaping (ArraySlice<UInt8>) throws(WireFailure) -> Response = { _ in .with { $0.ack = .init() } }) {
        command(packet) { result in
            do throws(WireFailure) {
                incoming.respond(try reply(ControllerAnswer.outcome(result, of: name).get()))
            } catch {
                incoming.fail(error)
            }
        }
    }

    /// Asks attd on behalf of an app's request, which hears attd's answer (`answer` makes the reply) or its typed refusal.
    func forwardToAttd(_ request: Request, _ incoming: IncomingRequest,
                       answer: @escaping (Response) -> Response = { _ in .with { $0.ack = .init() } }) throws(WireFailure) {
        guard let attd else { throw .attdUnreachable }
        attd.request(request) { result in
            switch result {
            case .success(let response): incoming.respond(answer(response))
            case .failure(let error): incoming.fail(relaying: error, from: "attd")
            }
        }
    }

    private func learnIdentity(_ info: Beryl_Ipc_V1_ControllerInfo) {
        guard info.state == .poweredOn, let address = DeviceAddress(info.address) else { return }
        identity = address
    }

    func controllerChanged(_ newState: Beryl_Ipc_V1_ControllerState) {
        // Apps stay poweredOn through a lab's controller reset: their database and managers are intact, and what they had
        // running on the controller is set up again when it is back.
        if lab.isResettingController, newState == .resetting { return }
        apply(core.controllerChanged(StackState(newState), isRunning: isRunning))
    }

    /// Whether a holder's app runs (a live session), for what a stack that leaves poweredOn clears.
    func isRunning(_ holder: ManagerHolder) -> Bool { holder.sessionID.flatMap(session) != nil }

    /// Apps hear the stack's new state: a session in its Welcome, and changes after it (`welcomedSessions`).
    func stateChanged(_ newState: StackState) {
        host.logger.info("controller \(newState)")
        var event = Beryl_Ipc_V1_ManagerEvent()
        event.stateChanged = .init(newState)
        for id in core.welcomedSessions { send(event, to: id) }
        if newState == .poweredOn {
            resumeOnController()
            adoptWaitingChannels()
        }
    }

    /// A controller that was reset forgot everything: scanning, advertising and connection attempts resume.
    func resumeOnController() {
        controllerScan = nil
        core.controllerForgotAdvertising()
        // Before scanning and advertising are on again: LE Set Random Address is disallowed while they are (Core Vol 4
        // Part E §7.8.4).
        setLabRandomAddress()
        updateScanning()
        updateAdvertising()
    }

    private func hcidEvent(_ event: Event) {
        switch event.hci.kind {
        case .controllerChanged(let info)?:
            learnIdentity(info)
            controllerChanged(info.state)
        case .event(let packet)?:
            let hci = HCIEventPacket(code: UInt8(truncatingIfNeeded: packet.code), parameters: Array(packet.parameters))
            if let reports = AdvertisingReport.decode(hci) {
                for report in reports {
                    advertisementReceived(report)
                    labReport(report)
                }
                return
            }
            let timing = LinkTiming(hci)
            if let timing { applyLab(lab.timingChanged(timing, isUpdate: hci.parameters.first == LESubevent.connectionUpdateComplete.rawValue, book: book)) }
            if let request = RemoteConnectionParameterRequest(hci) { return answerParameterRequest(request) }
            // Links come and go as attd tells (bearerOpened, bearerClosed); from hcid only what managerd asked of the
            // controller failing, and the end of a link's timing, which came from hcid too.
            switch LinkEvent(hci) {
            case .connectionFailed(let status)?: linkChanged(.connectionFailed(status: status))
            case .disconnected(let handle, _)?: lab.linkGone(handle)
            default: break
            }
        default:
            break
        }
    }

    /// A link came, went or failed: for the apps' managers, then the lab (a link lost with hcid included, so that the
    /// lab forgets a handle the controller may hand to an app's next link).
    private func linkChanged(_ link: LinkEvent, stackFailed: Bool = false) {
        let madeKnown = linkEvent(link, stackFailed: stackFailed)
        applyLab(lab.linkEvent(link, madeKnown: madeKnown, book: book))
        syncHeldLinks()
        switch link {
        case .connected(let handle, _, _): nameLink(handle)
        case .disconnected(let handle, _):
            linkGoneForAudiences(handle)
        default: break
        }
    }

    private func attdEvent(_ event: Event) {
        // Pairing on a lab link is the lab session's to answer and to hear of, not an app's.
        if let kind = event.att.kind, labSecurityEvent(kind) { return }
        switch event.att.kind {
        case .bearerOpened(let bearer)?:
            bearerOpened(OpenBearer(bearer))
        case .mtuChanged(let bearer)?:
            apply(core.bearer(UInt16(truncatingIfNeeded: bearer.connectionHandle), mtu: UInt16(truncatingIfNeeded: bearer.attMtu)))
        case .bearerClosed(let bearer)?:
            bearerClosed(bearer)
        case .linksTakenOver(let bearers)?:
            takeBackLinks(bearers)
        case .gattNotification(let notification)?:
            deliverNotification(notification)
        case .gattServiceChanged(let change)?:
            forwardToHolders(.gattServiceChanged(change), connectionHandle: change.connectionHandle)
        case .gattWriteReady(let ready)?:
            // attd counts refusals per app: the ready is the refused app's alone.
            guard core.admitsWriteReady(for: ready.onBehalfOf, onLink: UInt16(truncatingIfNeeded: ready.connectionHandle)) else { return }
            forwardToHolders(.gattWriteReady(ready), connectionHandle: ready.connectionHandle, only: .session(ready.onBehalfOf))
        case .readRequested(let read)?:
            routeRemoteRequest(read.id, .read, connectionHandle: read.connectionHandle, handles: [UInt16(truncatingIfNeeded: read.handle)],
                               expectsAnswer: true) { .init(read, manager: $0, central: $1, maximumUpdateLength: $2) }
        case .writeRequested(let write)?:
            routeRemoteRequest(write.id, .write, connectionHandle: write.connectionHandle, handles: write.writes.map { UInt16(truncatingIfNeeded: $0.handle) },
                               expectsAnswer: write.withResponse) { .init(write, manager: $0, central: $1, maximumUpdateLength: $2) }
        case .subscriptionChanged(let change)?:
            if let report = ReportedSubscription(change) { routeSubscription(report) }
        case .pairingPrompt?, .pairingFinished?:
            if let kind = event.att.kind { routePairing(kind) }
        case .readyToUpdate(let ready)?:
            send(.with { $0.readyToUpdate.count = ready.count }, to: ready.onBehalfOf)
        case .dataChannelOrphans(let orphans)?:
            attdOrphansChanged(orphans.count)
        default:
            break
        }
    }

    /// Pairing prompts go to the apps holding the link (as central), or to every app with published services or
    /// advertising (a remote central pairing with this device); `peer` is the link's identifier.
    func routePairing(_ kind: Beryl_Ipc_V1_AttEvent.OneOf_Kind) {
        guard let handle = kind.pairingLink, let (identifier, holders) = core.pairingAudience(ofLink: handle),
              let event = Beryl_Ipc_V1_ManagerEvent(pairing: kind, peer: identifier) else { return }
        for holder in holders { send(event, to: holder) }
    }

    // MARK: Sessions

    private func sessionClosed(_ id: UInt64) {
        if lab.isLabSession(id) { host.logger.info("lab session \(id) closed") }
        applyLab(lab.sessionClosed(id, book: book))
        alertSubscribers[id] = nil
        forgetUpdateSender(id)
        defer { dataChannelSessionClosed(id) }
        let preserved = core.restoration.manager(heldBy: .session(id))
        apply(core.sessionClosed(id, poweredOn: state == .poweredOn, at: host.loop.uptime))
        if let preserved, let kept = core.restoration.manager(id: preserved.id), !kept.live {
            host.logger.info("\(kept.appID) is gone; its \(kept.role) manager \(kept.restoreID) is preserved")
        }
    }

    func handle(_ incoming: IncomingRequest) -> Bool {
        guard case .manager(let request)? = incoming.request.kind, let session = incoming.session else { return false }
        let app = core.sessions[session.id, default: AppSession()]
        core.sessions[session.id] = app
        guard let kind = request.kind else {
            incoming.fail(.unknownMessage, "empty manager request")
            return true
        }
        do throws(WireFailure) {
            try dispatch(kind, session: session, app: app, incoming)
        } catch {
            incoming.fail(error)
        }
        // Who holds which link and hears which value may have changed (a connection cancelled, a manager restored).
        refreshAudiences()
        syncHeldLinks()
        return true
    }

    /// The Welcome: the session's app, its restored manager's state (willRestoreState), then the events held for it.
    private func greet(_ hello: Beryl_Ipc_V1_Hello, session: IPCSession, _ incoming: IncomingRequest, waited: Bool = false) throws(WireFailure) {
        // A Hello that presents a kept data channel is taken once attd's links are back and the stack is on, so that
        // the app's session hears nothing (no resetting on the way to poweredOn) before its Welcome.
        if hello.wantsDataChannel, !hello.resumeDataChannel.isEmpty, !waited, !readyToAdopt {
            return whenReadyToAdopt { [unowned self] _ in
                guard self.session(session.id) != nil else { return }
                do throws(WireFailure) { try greet(hello, session: session, incoming, waited: true) } catch { incoming.fail(error) }
            }
        }
        let greeting = try bindSession(hello, session: session)
        var restored: (Beryl_Ipc_V1_PreservedState, [Beryl_Ipc_V1_ManagerEvent])?
        if case .restoring(let preserved) = greeting { restored = restore(preserved, into: session.id) }
        let welcomeWake = core.welcomeWake(session.id, at: host.loop.uptime)
        logWakes()
        let welcome = Response.with {
            $0.manager.welcome = .with {
                $0.sessionID = session.id
                $0.peerPid = session.peer.pid
                $0.peerUid = session.peer.uid
                $0.state = state
                if let restored {
                    $0.wasRestored = true
                    $0.restored = restored.0
                }
                $0.wake = welcomeWake
            }
        }
        let queued = restored?.1 ?? []
        guard hello.wantsDataChannel else {
            incoming.respond(welcome)
            for event in queued { send(event, to: session.id) }
            return
        }
        // The Welcome waits for attd's channel, and what was queued for the app waits for the Welcome.
        let welcomeWithNewChannel = { [unowned self] in
            openDataChannel(for: session.id) { [unowned self] descriptor, token in
                var welcome = welcome
                welcome.manager.welcome.state = state
                if let descriptor {
                    welcome.manager.welcome.dataChannel = true
                    welcome.manager.welcome.dataChannelToken = token
                    incoming.respond(welcome, passing: descriptor)
                } else {
                    incoming.respond(welcome)
                }
                for event in queued { send(event, to: session.id) }
            }
        }
        guard !hello.resumeDataChannel.isEmpty else { return welcomeWithNewChannel() }
        // An app that kept its data channel while managerd restarted: attd hands it over with what the app had.
        guard readyToAdopt else { return welcomeWithNewChannel() }
        adoptDataChannel(hello.resumeDataChannel, for: session.id) { [unowned self] lostLinks in
            guard let lostLinks else { return welcomeWithNewChannel() }
            var welcome = welcome
            welcome.manager.welcome.state = state
            welcome.manager.welcome.dataChannelResumed = true
            welcome.manager.welcome.dataChannelToken = hello.resumeDataChannel
            incoming.respond(welcome)
            // What a restored manager held since this managerd started is its restart's doing (links taken back,
            // values the data channel carried already): the app, which never went, hears none of it.
            if !queued.isEmpty { host.logger.info("session \(session.id) resumed: \(queued.count) event(s) held since managerd started dropped") }
            // Links that ended while managerd was away: nobody told the app yet.
            for lost in lostLinks {
                send(.with { $0.disconnected = .with { $0.manager = 1; $0.peripheral = lost.peripheral; $0.reason = lost.reason } }, to: session.id)
            }
        }
    }

    private func dispatch(_ kind: Beryl_Ipc_V1_ManagerRequest.OneOf_Kind, session: IPCSession, app: AppSession<Beryl_Ipc_V1_ManagerEvent>,
                          _ incoming: IncomingRequest) throws(WireFailure) {
        if kind.needsHello, !app.saidHello { throw .helloFirst }
        switch kind {
        case .hello(let hello):
            return try greet(hello, session: session, incoming)
        case .labOpen, .labAdvertise, .labStopAdvertising, .labScan, .labStopScan, .labConnect, .labCancelConnect, .labDisconnect,
             .labGetLinks, .labFactoryReset, .labGetInfo, .labSecure, .labPairingAnswer, .labListBonds, .labRemoveBond:
            return try handleLab(kind, session: session, saidHello: app.saidHello, incoming)
        case .listApps, .launchApp, .stopApp, .setAppState:
            return try handleApps(kind, session: session, incoming)
        case .getCapabilities(let ask):
            incoming.respond(.with { $0.manager.capabilities = capabilities(appID: ask.appID, uid: session.peer.uid) })
            return
        case .appIdle(let idle):
            apply(core.sessionIdle(session.id, upTo: idle.wake, at: host.loop.uptime))
            incoming.respond(.with { $0.ack = .init() })
            return
        case .renewDataChannel:
            guard attd != nil else { throw .attdUnreachable }
            openDataChannel(for: session.id) { descriptor, token in
                guard let descriptor else { return _ = incoming.fail(.notReady, "attd gave no data channel") }
                incoming.respond(.with { $0.manager.dataChannelRenewed.token = token }, passing: descriptor)
            }
            return
        case .subscribeAlerts:
            alertSubscribers[session.id] = session.peer.uid
            incoming.respond(.with { $0.ack = .init() })
            return
        case .invalidate:
            if let preserved = core.restoration.manager(heldBy: .session(session.id)) { discard(preserved.id) }
            incoming.respond(.with { $0.ack = .init() })
            return
        default:
            break
        }
        if kind.needsPoweredOn, state != .poweredOn {
            throw WireFailure(.notReady, "API misuse: the manager is not powered on (state \(state)); wait for the poweredOn state")
        }
        guard let command = try ManagerCommand(kind, session: session.id) else { throw WireFailure(.unsupported, "not a manager's command") }
        try handleCommand(command, session: session.id, incoming)
    }
}
