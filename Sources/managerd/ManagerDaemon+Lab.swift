import BerylCore
import BerylDaemonKit
import BerylGAP
import BerylHCI
import BerylIPC
import BerylManager
import BerylManagerWire
import BerylStore
import FoundationEssentials
import Glibc

/// The lab session's shell: BerylManager's LabCore decides; this translates its requests from the wire and its outputs
/// into HCI commands, attd requests, lab events and answers.
extension ManagerDaemon {
    func handleLab(_ kind: Beryl_Ipc_V1_ManagerRequest.OneOf_Kind, session: IPCSession, saidHello: Bool, _ incoming: IncomingRequest) throws(WireFailure) {
        if case .labOpen = kind {
            let granted = labAccessGranted(session.peer)
            applyLab(lab.open(session: session.id, saidHello: saidHello, granted: granted, uid: session.peer.uid,
                              otherSessionIsLive: { self.session($0) != nil }, incoming))
            if lab.isLabSession(session.id) { host.logger.info("lab session \(session.id) opened by pid \(session.peer.pid) (uid \(session.peer.uid))") }
            return
        }
        guard lab.isLabSession(session.id) else { throw WireFailure(LabRefusal.notLabSession) }
        switch kind {
        case .labAdvertise(let request):
            do { applyLab(lab.advertise(try LabAdvertising(request), incoming)) } catch { throw WireFailure(error) }
        case .labStopAdvertising:
            applyLab(lab.stopAdvertising(incoming))
        case .labScan(let request):
            applyLab(lab.scan(.init(passive: request.passive, ownAddress: LabOwnAddress(request.ownAddressType)), incoming))
        case .labStopScan:
            applyLab(lab.stopScan(incoming))
        case .labConnect(let request):
            let address: DeviceAddress?
            do { address = try LabFieldError.address(request.address, field: "address") } catch { throw WireFailure(error) }
            guard let address else { throw WireFailure(.missingField, "LabConnect names no address", field: "address") }
            applyLab(lab.connect(to: address, ownAddress: LabOwnAddress(request.ownAddressType), book: book, see: { [store] address in
                guard let store else { return nil }
                let madeKnown = store.device(at: address) == nil
                return (store.seen(address, at: Date().timeIntervalSince1970).identifier, madeKnown)
            }, incoming))
        case .labCancelConnect:
            applyLab(lab.cancelConnect(incoming))
        case .labDisconnect(let request):
            applyLab(lab.disconnect(request.handle, book: book, incoming))
        case .labGetLinks:
            incoming.respond(.with { $0.manager.labLinks.links = book.links.values.sorted { $0.handle < $1.handle }.map(labLink) })
        case .labSecure(let request):
            try labSecure(request.handle, incoming)
        case .labPairingAnswer(let answer):
            guard answer.handle <= 0x0EFF, lab.owns(UInt16(answer.handle), in: book) else { throw WireFailure(LabRefusal.noLabLink(handle: answer.handle)) }
            try forwardToAttd(.with { $0.att = .init(pairingAnswerOn: UInt16(answer.handle), accept: answer.accept, passkey: answer.passkey) }, incoming)
        case .labListBonds:
            try forwardToAttd(.with { $0.att.listBonds = .init() }, incoming) { response in .with { $0.manager.labBonds = response.att.bonds } }
        case .labRemoveBond(let remove):
            guard DeviceAddress(remove.address) != nil else { throw WireFailure(.invalidArgument, "'\(remove.address)' is not an address", field: "address") }
            try forwardToAttd(.with { $0.att.removeBond.identity = remove.address }, incoming) { [unowned self] _ in
                forgetLabBond(remove.address)
                return .with { $0.ack = .init() }
            }
        case .labGetInfo:
            answerLabInfo(session: session.id, incoming)
        case .labFactoryReset(let reset):
            applyLab(lab.factoryReset(keepBonds: reset.keepBonds, recordReadable: labRecord != nil, book: book, at: host.loop.uptime, incoming))
        default:
            throw WireFailure(.unknownMessage, "not a lab request")
        }
    }

    /// What the lab core decided, done.
    func applyLab(_ outputs: [LabCore<IncomingRequest>.Output]) {
        for output in outputs {
            switch output {
            case .answer(let reply, .ack):
                reply.respond(.with { $0.ack = .init() })
            case .answer(let reply, .link(let handle)):
                guard let identifier = book.identifier(for: handle), let link = book.link(for: identifier) else {
                    reply.fail(WireFailure(LabRefusal.noLabLink(handle: UInt32(handle))))
                    continue
                }
                reply.respond(.with { $0.manager.labLink = labLink(link) })
            case .refuse(let reply, let refusal):
                reply.fail(WireFailure(refusal))
            case .welcome(let reply, let session):
                answerLabInfo(session: session, reply)
            case .disconnect(let handle, let reply):
                if let reply { command(HCICommands.disconnect(handle: handle), named: "Disconnect", answering: reply) } else { command(HCICommands.disconnect(handle: handle)) }
            case .setRandomAddress:
                setLabRandomAddress()
            case .pairingForNextLink(let central, let peer, let ownAddress):
                setLinkPairing(ownAddress: ownAddress) {
                    $0.forNextLink = true
                    $0.central = central
                    $0.peer = peer?.description ?? ""
                    $0.clear = ownAddress == nil
                }
            case .pairingForLink(let handle, let ownAddress):
                setLinkPairing(ownAddress: ownAddress) { $0.connectionHandle = UInt32(handle) }
            case .connect(let key, let identifier, let address):
                applyLabConnections(core.connections.connect(key, identifier: identifier, address: address))
            case .cancelConnect(let key, let identifier):
                applyLabConnections((try? core.connections.cancel(key, identifier: identifier)) ?? [])
            case .advertisingChanged(let reply):
                updateAdvertising { error in
                    guard let reply else { return }
                    if let error { reply.fail(.internal, error) } else { reply.respond(.with { $0.ack = .init() }) }
                }
            case .scanChanged(let restart):
                if restart {
                    controllerScan = nil  // new parameters: the scan is set up again
                    command(HCICommands.leSetScanEnable(false))
                }
                updateScanning()
            case .event(let session, let event):
                guard let wire = Beryl_Ipc_V1_LabEvent(event, link: { book.identifier(for: $0).flatMap(book.link(for:)).map(labLink) }) else { continue }
                send(.with { $0.lab = wire }, to: session)
            case .removeLabBonds:
                removeLabBonds()
            case .resetController:
                resetController()
            case .forgetLabPeripherals:
                forgetLabPeripherals()
            case .recordPeripheral(let identifier):
                updateLabRecord { $0.peripherals.append(identifier) }
            }
        }
        armDeadline()
    }

    /// attd's SetLinkPairing for the lab: it answers every pairing (Just Works too), hashing the lab's random address
    /// when its procedure used one.
    private func setLinkPairing(ownAddress: LabOwnAddress?, _ which: (inout Beryl_Ipc_V1_SetLinkPairing) -> Void) {
        var request = Request()
        request.att.setLinkPairing = .with {
            which(&$0)
            $0.justWorksConsent = true
            if ownAddress?.needsRandomAddress == true { $0.localAddress = DeviceAddress(labRandomAddress.address, type: .random).description }
        }
        attd?.request(request)
    }

    /// The controller's state and addresses as hcid knows them now (the public one is unknown until bring-up read it).
    private func answerLabInfo(session: UInt64, _ incoming: IncomingRequest) {
        let welcome = { [unowned self] (address: String) in
            _ = incoming.respond(.with {
                $0.manager.labWelcome = .with {
                    $0.sessionID = session
                    $0.state = state
                    $0.publicAddress = address
                    $0.randomAddress = DeviceAddress(labRandomAddress.address, type: .random).description
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
        guard lab.session != nil, state == .poweredOn, labRandomAddress.set else { return }
        command(HCICommands.leSetRandomAddress(labRandomAddress.address))
    }

    /// The lab hears of its links as lab events, not as an app's manager events.
    private func applyLabConnections(_ outputs: [CentralConnections.Output]) {
        apply(outputs.filter { if case .controller = $0 { true } else { false } })
    }

    /// Each bond leaves the record once attd removed it: one not removed (attd away, or refusing) is taken back by the
    /// next reset.
    private func removeLabBonds() {
        for identity in labRecord?.record.bonds ?? [] {
            var request = Request()
            request.att.removeBond.identity = identity
            attd?.request(request) { [unowned self] result in
                if LabRecord.bondGone(after: result) { forgetLabBond(identity) } else { host.logger.warning("the lab's bond with \(identity) was not removed: \(result)") }
            }
        }
    }

    /// HCI Reset through hcid, which brings the controller up again before it answers. Apps stay poweredOn meanwhile.
    private func resetController() {
        guard let hcid else { return applyLab(lab.controllerReset(failure: "hcid is not attached", book: book)) }
        var request = Request()
        request.hci.resetController = .init()
        hcid.request(request) { [unowned self] result in
            switch result {
            case .success(let response):
                let outputs = lab.controllerReset(failure: nil, book: book)
                controllerChanged(response.hci.controllerInfo.state)
                // Still poweredOn to apps: what they had running on the controller is set up again, links asked for again.
                resumeOnController()
                apply(core.connections.controller(poweredOn: core.state == .poweredOn))
                applyLab(outputs)
            case .failure(let error):
                applyLab(lab.controllerReset(failure: "the controller reset failed: \(error)", book: book))
            }
        }
    }

    /// Identifiers only the lab's links made known, and no app was handed since, are forgotten.
    private func forgetLabPeripherals() {
        guard let store else { return }
        var (forget, keep) = LabReset.peripheralsToForget(labRecord?.record.peripherals ?? [], book: book)
        for identifier in forget {
            do {
                _ = try store.forget(identifier)
            } catch {
                host.logger.error("cannot forget the lab's peripheral \(identifier): \(error)")
                keep.append(identifier)
            }
        }
        updateLabRecord { $0.peripherals = keep }
    }

    // MARK: Events for the lab

    func labReport(_ report: AdvertisingReport) {
        guard let session = lab.session, session.scan != nil else { return }
        send(.with { $0.lab.scanReport = .init(report) }, to: session.session)
    }

    private func labLink(_ link: ConnectionBook.Link) -> Beryl_Ipc_V1_LabLink {
        .init(link, security: lab.session?.security(of: link.handle), timing: lab.timings[link.handle])
    }
}

extension ManagerDaemon {
    // MARK: Security on lab links

    /// attd pairs (or encrypts with a bond's key); its events, which come before its answer, say how it failed.
    private func labSecure(_ handle: UInt32, _ incoming: IncomingRequest) throws(WireFailure) {
        let opening: UInt64
        switch lab.secure(handle, book: book, attdAttached: attd != nil) {
        case .success(let current): opening = current
        case .failure(let refusal): throw WireFailure(refusal)
        }
        guard let attd else { return }  // refused above
        attd.request(.with { $0.att.pair.connectionHandle = handle }) { [unowned self] result in
            let state = try? LabSecurity(result.get().att.paired)
            switch lab.secured(UInt16(handle), opening: opening, state) {
            case .success(let outcome): incoming.respond(.with { $0.manager.labSecurity = outcome.wire(handle: UInt16(handle)) })
            case .failure(let refusal): incoming.fail(WireFailure(refusal))
            }
        }
    }

    /// attd's pairing and encryption events on a lab link, for the lab session; false when the link is not the lab's.
    func labSecurityEvent(_ event: Beryl_Ipc_V1_AttEvent.OneOf_Kind) -> Bool {
        guard let session = lab.session?.session, let event = LabSecurityEvent(event), lab.owns(event.handle, in: book) else { return false }
        switch event {
        case .prompt(_, let prompt):
            send(.with { $0.lab.pairingPrompt = prompt }, to: session)
        case .pairingFinished(let handle, let result, let bondIdentity):
            applyLab(lab.pairingFinished(handle, result))
            if let bondIdentity { rememberLabBond(bondIdentity) }
        case .securityChanged(let handle, let status, let encrypted, let authenticated, let bonded):
            applyLab(lab.securityChanged(handle, status: status, encrypted: encrypted, authenticated: authenticated, bonded: bonded))
        }
        return true
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

    /// An app holds this identifier from now on: a lab's factory reset no longer takes it back.
    func handedOut(_ identifier: String) {
        guard labRecord?.record.peripherals.contains(identifier) == true else { return }
        updateLabRecord { $0.peripherals.removeAll { $0 == identifier } }
    }

    func rememberLabBond(_ identity: String) { updateLabRecord { $0.bonds.append(identity) } }
    func forgetLabBond(_ identity: String) { updateLabRecord { $0.bonds.removeAll { $0 == identity } } }
}
