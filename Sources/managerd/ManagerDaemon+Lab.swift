import BerylCore
import BerylDaemonKit
import BerylGAP
import BerylHCI
import BerylIPC
import BerylManager
import BerylManagerWire
import BerylStore
import Foundation

/// The lab session's shell: BerylManager's LabSession decides; this turns its requests and answers into HCI commands,
/// attd requests and lab events.
extension ManagerDaemon {
    func handleLab(_ kind: Beryl_Ipc_V1_ManagerRequest.OneOf_Kind, session: IPCSession, saidHello: Bool, _ incoming: IncomingRequest) {
        if case .labOpen = kind { return openLab(session: session, saidHello: saidHello, incoming) }
        guard let lab, lab.session == session.id else {
            incoming.fail(.permissionDenied, "not a lab session: send LabOpen first")
            return
        }
        switch kind {
        case .labAdvertise(let request):
            let advertising: LabAdvertising
            do {
                advertising = try LabAdvertising(request)
            } catch {
                incoming.fail(.invalidArgument, "\(error)", field: error.field)
                return
            }
            self.lab?.advertising = advertising
            announceLabLink(central: false, peer: nil, ownAddress: advertising.ownAddress)
            updateAdvertising { error in
                if let error { incoming.fail(.internal, error) } else { incoming.respond(.with { $0.ack = .init() }) }
            }
        case .labStopAdvertising:
            self.lab?.advertising = nil
            announceLabLink(central: false, peer: nil, ownAddress: nil)
            updateAdvertising()
            incoming.respond(.with { $0.ack = .init() })
        case .labScan(let request):
            self.lab?.scan = .init(passive: request.passive, ownAddress: LabOwnAddress(request.ownAddressType))
            controllerScan = nil  // new parameters: the scan is set up again
            command(HCICommands.leSetScanEnable(false))
            updateScanning()
            incoming.respond(.with { $0.ack = .init() })
        case .labStopScan:
            self.lab?.scan = nil
            updateScanning()
            incoming.respond(.with { $0.ack = .init() })
        case .labConnect(let request):
            labConnect(request, lab: lab, incoming)
        case .labCancelConnect:
            if let attempt = self.lab?.endAttempt() {
                announceLabLink(central: true, peer: attempt.address, ownAddress: nil)
                applyLab((try? core.connections.cancel(lab.key, identifier: attempt.identifier)) ?? [])
                labAttemptReply?.fail(.cancelled, "the connection attempt to \(attempt.address) was cancelled")
                labAttemptReply = nil
            }
            incoming.respond(.with { $0.ack = .init() })
        case .labDisconnect(let request):
            let handle = UInt16(truncatingIfNeeded: request.handle)
            guard request.handle <= 0x0EFF, book.identifier(for: handle) != nil else {
                incoming.fail(.notFound, "no link 0x\(String(request.handle, radix: 16))", field: "handle")
                return
            }
            command(HCICommands.disconnect(handle: handle)) { result in
                switch result {
                case .success(let status) where status.first == 0: incoming.respond(.with { $0.ack = .init() })
                case .success(let status): incoming.fail(.internal, "the controller refused Disconnect (HCI 0x\(String(status.first ?? 0xFF, radix: 16)))")
                case .failure(let error): incoming.fail(.notReady, "\(error)")
                }
            }
        case .labGetLinks:
            incoming.respond(.with { $0.manager.labLinks.links = book.links.values.sorted { $0.handle < $1.handle }.map(labLink) })
        case .labSecure(let request):
            labSecure(UInt16(truncatingIfNeeded: request.handle), incoming)
        case .labPairingAnswer(let answer):
            guard isLabLink(UInt16(truncatingIfNeeded: answer.handle)) else {
                incoming.fail(.notFound, "no lab link 0x\(String(answer.handle, radix: 16))", field: "handle")
                return
            }
            forwardToAttd(.with { $0.att.pairingAnswer = .with { $0.connectionHandle = answer.handle; $0.accept = answer.accept; $0.passkey = answer.passkey } },
                          incoming) { _ in .with { $0.ack = .init() } }
        case .labListBonds:
            forwardToAttd(.with { $0.att.listBonds = .init() }, incoming) { response in .with { $0.manager.labBonds = response.att.bonds } }
        case .labRemoveBond(let remove):
            guard DeviceAddress(remove.address) != nil else {
                incoming.fail(.invalidArgument, "'\(remove.address)' is not an address", field: "address")
                return
            }
            forwardToAttd(.with { $0.att.removeBond.identity = remove.address }, incoming) { [unowned self] _ in
                forgetLabBond(remove.address)
                return .with { $0.ack = .init() }
            }
        case .labGetInfo:
            answerLabInfo(session: session.id, incoming)
        case .labFactoryReset(let reset):
            labFactoryReset(keepBonds: reset.keepBonds, incoming)
        default:
            incoming.fail(.unknownMessage, "not a lab request")
        }
    }

    private func openLab(session: IPCSession, saidHello: Bool, _ incoming: IncomingRequest) {
        guard !saidHello else {
            incoming.fail(.invalidArgument, "an app session cannot become a lab session", field: "lab_open")
            return
        }
        guard labAccessGranted(session.peer) else {
            incoming.fail(.permissionDenied, "unauthorized: a lab session needs root or the \(LabAccess.groupName) group (uid \(session.peer.uid))")
            return
        }
        if let lab, lab.session != session.id, self.session(lab.session) != nil {
            incoming.fail(.busy, "another lab session is open (session \(lab.session))")
            return
        }
        // LabOpen again (same session, or one whose close was not seen yet) starts afresh: its pending connect is told.
        labAttemptReply?.fail(.cancelled, "the lab session was opened again")
        labAttemptReply = nil
        labOpenings += 1
        lab = LabSession(session: session.id)
        host.logger.info("lab session \(session.id) opened by pid \(session.peer.pid) (uid \(session.peer.uid))")
        setLabRandomAddress()
        answerLabInfo(session: session.id, incoming)
    }

    /// The controller's state and addresses as hcid knows them now (the public one is unknown until bring-up read it).
    private func answerLabInfo(session: UInt64, _ incoming: IncomingRequest) {
        let welcome = { [unowned self] (address: String) in
            _ = incoming.respond(.with {
                $0.manager.labWelcome = .with {
                    $0.sessionID = session
                    $0.state = state
                    $0.publicAddress = address
                    $0.randomAddress = DeviceAddress(labRandomAddress, type: .random).description
                }
            })
        }
        guard let hcid else {
            welcome("")
            return
        }
        var request = Request()
        request.hci.getControllerInfo = .init()
        hcid.request(request) { result in welcome((try? result.get())?.hci.controllerInfo.address ?? "") }
    }

    /// Tells attd how the lab's next link in a role pairs (nil: withdraws it), before the link exists: a peer may
    /// start pairing before a message naming the link's handle could reach attd.
    private func announceLabLink(central: Bool, peer: DeviceAddress?, ownAddress: LabOwnAddress?) {
        var request = Request()
        request.att.setLinkPairing = .with {
            $0.forNextLink = true
            $0.central = central
            $0.peer = peer?.description ?? ""
            $0.clear = ownAddress == nil
            $0.justWorksConsent = true
            if ownAddress?.needsRandomAddress == true { $0.localAddress = DeviceAddress(labRandomAddress, type: .random).description }
        }
        attd?.request(request)
    }

    private func labAccessGranted(_ peer: PeerCredentials) -> Bool {
        let user = Accounts.user(uid: peer.uid)
        let labGroup = Accounts.group(named: LabAccess.groupName)
        // The socket's gid is the peer's effective group: a process started under the lab group is granted too.
        return LabAccess.isGranted(uid: peer.uid, primaryGroup: user?.primaryGroup, userName: user?.name, labGroup: labGroup.map { ($0.gid, $0.members) })
            || (labGroup != nil && peer.gid == labGroup?.gid)
    }

    /// The random address exists on the controller only after LE Set Random Address (Core Vol 4 Part E §7.8.4), and a
    /// reset forgets it; set while the lab's advertising and scanning are off, as the command requires.
    func setLabRandomAddress() {
        guard lab != nil, state == .poweredOn else { return }
        command(HCICommands.leSetRandomAddress(labRandomAddress))
    }

    private func labConnect(_ request: Beryl_Ipc_V1_LabConnect, lab: LabSession, _ incoming: IncomingRequest) {
        let address: DeviceAddress
        do {
            guard let parsed = try LabFieldError.address(request.address, field: "address") else { return }
            address = parsed
        } catch {
            incoming.fail(.invalidArgument, "\(error)", field: error.field)
            return
        }
        do {
            try lab.mayConnect(to: address, in: book)
        } catch {
            switch error {
            case .attemptUnderWay: incoming.fail(.busy, "\(error)")
            case .linkExists: incoming.fail(.alreadyExists, "\(error)", field: "address")
            }
            return
        }
        guard let store else {
            incoming.fail(.internal, "the peripheral store is unusable")
            return
        }
        let madeKnown = store.device(at: address) == nil
        let identifier = store.seen(address, at: Date().timeIntervalSince1970).identifier
        if madeKnown { updateLabRecord { $0.peripherals.append(identifier) } }
        let ownAddress = LabOwnAddress(request.ownAddressType)
        try? self.lab?.startConnecting(identifier: identifier, address: address, ownAddress: ownAddress)
        labAttemptReply = incoming
        announceLabLink(central: true, peer: address, ownAddress: ownAddress)
        applyLab(core.connections.connect(lab.key, identifier: identifier, address: address))
    }

    /// The lab hears of its links as lab events, not as an app's manager events.
    private func applyLab(_ outputs: [CentralConnections.Output]) {
        apply(outputs.filter { if case .controller = $0 { true } else { false } })
    }

    /// The Own_Address_Type for a central attempt: the lab's when the lab asked for that peer.
    func labOwnAddressType(connectingTo address: DeviceAddress) -> UInt8 {
        lab?.ownAddress(connectingTo: address)?.rawValue ?? ownAddressType
    }

    /// Leaves the controller as the lab found it (BerylManager's LabReset says the steps): no lab advertising, scanning or
    /// attempt, the lab's links down, and (unless `keepBonds`) the lab's bonds and the identifiers it made known
    /// forgotten; then the controller is reset. Apps' managers, services and preserved state are not touched, and what
    /// they had running resumes after the reset.
    private func labFactoryReset(keepBonds: Bool, _ incoming: IncomingRequest) {
        guard labRecord != nil else {
            incoming.fail(.internal, "the lab's record in the state directory is unreadable, so what the lab made cannot be told apart; see managerd's log")
            return
        }
        do {
            let outputs = try labReset.start(keepBonds: keepBonds, links: Set(book.links.values.map(\.handle)), at: host.loop.uptime)
            labResetReply = incoming
            applyLabReset(outputs)
        } catch {
            incoming.fail(.busy, "a factory reset is under way")
        }
    }

    func applyLabReset(_ outputs: [LabReset.Output]) {
        for output in outputs {
            switch output {
            case .endLabWork:
                endLabWork()
            case .removeLabBonds:
                // Each leaves the record once attd removed it: one not removed (attd away, or refusing) is taken back
                // by the next reset.
                for identity in labRecord?.record.bonds ?? [] {
                    var request = Request()
                    request.att.removeBond.identity = identity
                    attd?.request(request) { [unowned self] result in
                        switch result {
                        case .success, .failure(.remote(.notFound, _, _, _)), .failure(.remote(.invalidArgument, _, _, _)):
                            forgetLabBond(identity)  // removed, gone already, or never a bond attd could hold
                        case .failure(let error):
                            host.logger.warning("the lab's bond with \(identity) was not removed: \(error)")
                        }
                    }
                }
            case .disconnect(let handle):
                command(HCICommands.disconnect(handle: handle))
            case .resetController:
                resetController()
            case .forgetLabPeripherals:
                forgetLabPeripherals()
            case .finished(let failure):
                if let failure { labResetReply?.fail(.notReady, failure) } else { labResetReply?.respond(.with { $0.ack = .init() }) }
                labResetReply = nil
            }
        }
        labResetTimer.arm(at: labReset.nextDeadline) { [unowned self] now in applyLabReset(labReset.tick(at: now)) }
    }

    /// The lab's advertising, scan, attempt and links end; its bonds and records stay.
    private func endLabWork() {
        guard let lab else { return }
        let attempt = self.lab?.endWork()
        announceLabLink(central: false, peer: nil, ownAddress: nil)
        if let attempt {
            applyLab((try? core.connections.cancel(lab.key, identifier: attempt.identifier)) ?? [])
            labAttemptReply?.fail(.cancelled, "factory reset")
            labAttemptReply = nil
        }
        for handle in lab.links(endingWithWorkIn: book) { command(HCICommands.disconnect(handle: handle)) }
        updateAdvertising()
        updateScanning()
    }

    /// HCI Reset through hcid, which brings the controller up again before it answers. Apps stay poweredOn meanwhile.
    private func resetController() {
        guard let hcid else { return applyLabReset(labReset.controllerReset(failure: "hcid is not attached")) }
        var request = Request()
        request.hci.resetController = .init()
        hcid.request(request) { [unowned self] result in
            switch result {
            case .success(let response):
                let outputs = labReset.controllerReset(failure: nil)
                controllerChanged(response.hci.controllerInfo.state)
                // Still poweredOn to apps: what they had running on the controller is set up again, links asked for again.
                resumeOnController()
                apply(core.connections.controller(poweredOn: core.state == .poweredOn))
                applyLabReset(outputs)
            case .failure(let error):
                applyLabReset(labReset.controllerReset(failure: "the controller reset failed: \(error)"))
            }
        }
    }

    /// Identifiers only the lab's links made known, and no app was handed since, are forgotten.
    private func forgetLabPeripherals() {
        guard let store else { return }
        var kept: [String] = []
        for identifier in labRecord?.record.peripherals ?? [] {
            // Still wanted by a manager (a link, an attempt): kept, and taken back by a later reset.
            if book.link(for: identifier) != nil || book.pendingIdentifiers.contains(identifier) {
                kept.append(identifier)
                continue
            }
            do {
                try store.forget(identifier)
            } catch {
                host.logger.error("cannot forget the lab's peripheral \(identifier): \(error)")
                kept.append(identifier)
            }
        }
        updateLabRecord { $0.peripherals = kept }
    }

    func labSessionClosed(_ id: UInt64) {
        guard let lab, lab.session == id else { return }
        host.logger.info("lab session \(id) closed")
        endLabWork()  // what it made stays recorded for the next factory reset
        self.lab = nil
        updateAdvertising()
        updateScanning()
    }

    // MARK: Events for the lab

    func labReport(_ report: AdvertisingReport) {
        guard let lab, lab.scan != nil else { return }
        send(.with { $0.lab.scanReport = .init(report) }, to: lab.session)
    }

    /// `madeKnown`: the identifier a new link's peer was just given, which is the lab's to take back if the link is.
    func labLinkEvent(_ event: LinkEvent, madeKnown: String?) {
        guard let lab else { return }
        var out = Beryl_Ipc_V1_ManagerEvent()
        switch event {
        case .connected(let handle, let central, let peer):
            guard let identifier = book.identifier(for: handle), let link = book.link(for: identifier),
                  let up = self.lab?.linkUp(handle, central: central, peer: peer, holders: link.holders) else { return }
            if up.isLab {
                if let madeKnown { updateLabRecord { $0.peripherals.append(madeKnown) } }
                // The lab answers every pairing on its links, Just Works included (it may refuse); and pairing hashes the
                // address the link uses, which is the lab's random one when it asked for that.
                let own = up.ownAddress
                var options = Request()
                options.att.setLinkPairing = .with {
                    $0.connectionHandle = UInt32(handle)
                    $0.justWorksConsent = true
                    if own?.needsRandomAddress == true { $0.localAddress = DeviceAddress(labRandomAddress, type: .random).description }
                }
                attd?.request(options)
            }
            out.lab.linkUp = labLink(link)
            if up.answers != nil {
                labAttemptReply?.respond(.with { $0.manager.labLink = labLink(link) })
                labAttemptReply = nil
            }
        case .connectionFailed(let status):
            out.lab.connectFailed = UInt32(status)
        case .disconnected(let handle, let reason):
            out.lab.linkDown = .with { $0.handle = UInt32(handle); $0.reason = UInt32(reason) }
            self.lab?.linkDown(handle, reason: reason)
        default:
            return
        }
        send(out, to: lab.session)
    }

    func labTimingChanged(_ timing: LinkTiming, isUpdate: Bool) {
        linkTimings[timing.handle] = timing
        guard isUpdate, let lab, let identifier = book.identifier(for: timing.handle), let link = book.link(for: identifier) else { return }
        var event = Beryl_Ipc_V1_ManagerEvent()
        event.lab.linkUpdated = labLink(link)
        send(event, to: lab.session)
    }

    private func labLink(_ link: ConnectionBook.Link) -> Beryl_Ipc_V1_LabLink {
        .init(link, security: lab?.security(of: link.handle), timing: linkTimings[link.handle])
    }
}

extension ManagerDaemon {
    // MARK: Security on lab links

    func isLabLink(_ handle: UInt16) -> Bool {
        lab?.owns(handle, holders: book.identifier(for: handle).flatMap { book.link(for: $0)?.holders }) ?? false
    }

    /// attd pairs (or encrypts with a bond's key); its events, which come before its answer, say how it failed.
    private func labSecure(_ handle: UInt16, _ incoming: IncomingRequest) {
        guard isLabLink(handle) else {
            incoming.fail(.notFound, "no lab link 0x\(String(handle, radix: 16))", field: "handle")
            return
        }
        guard let attd else {
            incoming.fail(.notReady, "attd is not attached")
            return
        }
        lab?.securing(handle)
        let opening = labOpenings
        var request = Request()
        request.att.pair.connectionHandle = UInt32(handle)
        attd.request(request) { [unowned self] result in
            // A lab opened since (even by the same session) is not this one's to change or answer from.
            var outcome: LabSecurityOutcome?
            if self.lab != nil, self.labOpenings == opening {
                switch result {
                case .success(let response): outcome = self.lab?.secured(handle, LabSecurity(response.att.paired))
                case .failure: outcome = self.lab?.securingFailed(handle)
                }
            }
            guard let outcome else {
                incoming.fail(.cancelled, "the lab session closed")
                return
            }
            incoming.respond(.with { $0.manager.labSecurity = outcome.wire(handle: handle) })
        }
    }

    /// attd's pairing and encryption events on a lab link, for the lab session; false when the link is not the lab's.
    func labSecurityEvent(_ event: Beryl_Ipc_V1_AttEvent.OneOf_Kind) -> Bool {
        guard let session = lab?.session, let event = LabSecurityEvent(event), isLabLink(event.handle) else { return false }
        let outcome: LabSecurityOutcome?
        switch event {
        case .prompt(_, let prompt):
            send(.with { $0.lab.pairingPrompt = prompt }, to: session)
            return true
        case .pairingFinished(let handle, let result, let bondIdentity):
            outcome = lab?.pairingFinished(handle, result)
            if let bondIdentity { rememberLabBond(bondIdentity) }
        case .securityChanged(let handle, let status, let encrypted, let authenticated, let bonded):
            outcome = lab?.securityChanged(handle, status: status, encrypted: encrypted, authenticated: authenticated, bonded: bonded)
        }
        if let outcome { send(.with { $0.lab.security = outcome.wire(handle: event.handle) }, to: session) }
        return true
    }

    private func forwardToAttd(_ request: Request, _ incoming: IncomingRequest, answer: @escaping (Response) -> Response) {
        guard let attd else {
            incoming.fail(.notReady, "attd is not attached")
            return
        }
        attd.request(request) { result in
            switch result {
            case .success(let response): incoming.respond(answer(response))
            case .failure(let error): incoming.fail(relaying: error, from: "attd")
            }
        }
    }

    // MARK: What the lab made, kept so that a factory reset takes it back and nothing else

    static func openLabRecord(stateDir: String, logger: Logger) -> LabRecordFile? {
        do {
            return try LabRecordFile.open(stateDir: stateDir)
        } catch {
            logger.error("the lab record is unusable, so a lab's factory reset will be refused: \(error)")
            return nil
        }
    }

    func updateLabRecord(_ change: (inout LabRecord) -> Void) {
        do {
            try labRecord?.update(change)
        } catch {
            host.logger.error("cannot record what the lab made: \(error)")
        }
    }

    func rememberLabBond(_ identity: String) { updateLabRecord { $0.bonds.append(identity) } }
    func forgetLabBond(_ identity: String) { updateLabRecord { $0.bonds.removeAll { $0 == identity } } }
}
