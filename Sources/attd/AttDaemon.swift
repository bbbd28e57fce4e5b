import BerylATT
import BerylAttWire
import BerylCore
import BerylDaemonKit
import BerylEventLoop
import BerylGATT
import BerylHCI
import BerylIPC
import BerylCrypto
import BerylLink
import BerylSMP
import BerylStore
import FoundationEssentials
import Glibc

/// attd's shell: links from hcid's events and ACL, one `LinkSession` per connection over a shared
/// attribute database, and the services publishers add over attd.sock.
final class AttDaemon {
    let host: DaemonHost
    let database = AttributeDatabase()
    let serverMTU: UInt16
    var hcid: IPCConnection?
    /// attd attached to hcid and took over its links: `links` is every link the controller has.
    var hasHcidsLinks = false
    var links: [UInt16: LinkSession] = [:]
    /// Which publisher owns which handles, and the answers they owe.
    var router: ServiceRouter
    /// Apps' data channels and what each may touch (AttDaemon+DataChannels), and what went on them.
    var grants = DataGrants()
    var dataPlane = Beryl_Ipc_V1_DataPlaneCounters()
    /// How each app's service was published, for a restarted managerd that adopts the app's channel.
    var serviceSpecs: [UInt16: Beryl_Ipc_V1_ServiceSpec] = [:]
    /// When each orphaned channel is closed if no restarted managerd has adopted it (AttDaemon+DataChannels).
    var orphanDeadlines: [UInt64: Duration] = [:]
    var pacer = TransmitPacer()
    /// PDUs for hcid from this loop wake-up, sent as one datagram when it ends.
    var outgoingACL = ACLBatch()
    /// Sends `outgoingACL` when the wake-up that queued it ends (nil if the loop could not make the task: no batching).
    lazy var aclFlush: EndOfWakeUpTask? = try? host.loop.endOfWakeUpTask { [unowned self] in flushACL() }
    /// At the router's next deadline.
    lazy var deadlineTimer = DeadlineTimer(loop: host.loop)
    /// Apps' GATT client requests, by the operation id their link's client core knows them by.
    var clientAnswers: [GATTClient.OperationID: IncomingRequest] = [:]
    var nextClientOperation: GATTClient.OperationID = 1

    // Security (AttDaemon+Security).
    let security: SecurityManager
    var securityWaiters: [SecurityWaiter: SecurityCompletion] = [:]
    var nextSecurityWaiter: UInt64 = 1

    init(host: DaemonHost, deviceName: String, serverMTU: UInt16, answerTimeout: Duration, security: SecurityConfiguration, autoAccept: Bool) throws {
        self.host = host
        router = ServiceRouter(answerTimeout: answerTimeout)
        self.serverMTU = serverMTU
        // A store that cannot be opened is left as it is (never overwritten): attd runs without bonds and says why.
        do {
            self.security = try SecurityManager(configuration: security, autoAccept: autoAccept,
                                                storage: try BondStore(path: host.paths.stateDir + "/bonds.sqlite"))
            host.logger.info("bond store: \(self.security.bonds.count) bond(s)")
        } catch {
            host.logger.error("bond store unusable, running without bonds: \(error)")
            self.security = try SecurityManager(configuration: security, autoAccept: autoAccept, storage: nil)
        }
        try database.addCoreServices(deviceName: deviceName)
        host.handle = { [unowned self] in self.handle($0) }
        host.confines = { [unowned self] in grants.isChannel($0) }
        host.decorateStatus = { [unowned self] status in
            status.dataPlane = dataPlane
            status.dataPlane.channels = UInt32(grants.channelCount)
            status.dataPlane.orphanedChannels = UInt32(grants.orphanCount)
        }
        _ = try host.loop.after(.zero) { [unowned self] in
            self.host.server?.onSessionClosed = { [unowned self] session, _ in self.sessionClosed(session.id) }
            self.connectToHcid()
        }
        // The GATT client's 30-second transaction timeout needs the time now and then.
        _ = try host.loop.every(.seconds(1)) { [unowned self] in
            self.tickBearers()
            self.tickSecurity()
        }
    }

    // MARK: hcid

    private func connectToHcid() {
        host.attach(to: "hcid", onEvent: { [unowned self] in hcidEvent($0) }, attached: { [unowned self] connection in
            hcid = connection
            var subscribe = Request()
            subscribe.hci.subscribe = .with { $0.events = true; $0.acl = true; $0.aclCredits = true }
            connection.request(subscribe) { [unowned self] result in
                switch result {
                case .failure(let error):
                    host.logger.warning("hcid subscription failed: \(error)")
                case .success(let response):
                    host.markAttached("hcid")
                    host.logger.info("attached to hcid")
                    learnLocalAddress(response.hci.controllerInfo.address)
                    adoptLinks(response.hci.controllerInfo.links)
                    hasHcidsLinks = true
                    broadcastToClients(Event(linksTakenOver: openBearers))
                }
            }
        }, lost: { [unowned self] reason in
            host.logger.warning("lost hcid (\(reason)); links are gone")
            hcid = nil
            hasHcidsLinks = false
            outgoingACL.removeAll()
            pacer.hcidGone()
            // Its successor resets the controller (Core Vol 4 Part E §7.3.2): the links are the stack's loss.
            for handle in links.keys.sorted() { linkClosed(handle, reason: 0x16, stackFailed: true) }
        })
    }

    /// Our identity for key distribution: the controller's public address (or hcid's static random identity, for a
    /// controller without one) and the IRK kept in the bond store.
    private func learnLocalAddress(_ text: String) {
        guard let address = DeviceAddress(text) else { return }
        applySecurity(security.learnIdentity(address))
    }

    /// Links that came up before attd attached (attd restarted under a live link): ATT resumes on them at once.
    private func adoptLinks(_ existing: [Beryl_Ipc_V1_LinkInfo]) {
        for info in existing {
            let handle = UInt16(truncatingIfNeeded: info.handle)
            guard links[handle] == nil, let peer = DeviceAddress(info.peer) else { continue }
            host.logger.info("link 0x\(String(handle, radix: 16)) with \(peer) was up before attd attached; taking it over")
            openLink(handle, central: info.central, peer: peer)
        }
    }

    private func openLink(_ handle: UInt16, central: Bool, peer: DeviceAddress) {
        let link = LinkSession(handle: handle, isCentral: central, database: database, serverMTU: serverMTU)
        links[handle] = link
        host.logger.info("link 0x\(String(handle, radix: 16)) up with \(peer) (\(central ? "central" : "peripheral"))")
        // The bearer first: what the security manager restores for a bonded peer (its subscriptions) is news about it.
        broadcastToClients(Event(bearerOpened: handle, mtu: link.server.mtu, central: central, peer: peer))
        applySecurity(security.linkOpened(handle, isCentral: central, peer: peer, at: host.loop.uptime))
        if central { applyGATT(link.gatt.exchangeMTU(offering: serverMTU, at: host.loop.uptime), on: link) }
    }

    private func hcidEvent(_ event: Event) {
        switch event.hci.kind {
        case .controllerChanged(let info)?:
            if security.localIdentity == nil { learnLocalAddress(info.address) }
        case .event(let packet)?:
            switch LinkEvent(HCIEventPacket(code: UInt8(truncatingIfNeeded: packet.code), parameters: Array(packet.parameters))) {
            case .connected(let handle, let central, let peer)?:
                openLink(handle, central: central, peer: peer)
            case .encryptionChanged(let handle, let status, let enabled)?:
                applySecurity(security.encryptionChanged(handle, status: status, enabled: enabled, at: host.loop.uptime))
            case .longTermKeyRequested(let handle, let rand, let ediv)?:
                applySecurity(security.longTermKeyRequested(handle, rand: rand, ediv: ediv))
            case .disconnected(let handle, let reason)?:
                linkClosed(handle, reason: reason)
            default:
                break
            }
        case .aclCredits(let credits)?:
            credited(credits)
        case .acl(let acl)?:
            received(acl)
        case .aclBatch(let batch)?:
            for acl in batch.packets { received(acl) }
        default:
            break
        }
    }

    private func received(_ acl: Beryl_Ipc_V1_AclPacket) {
        guard let link = links[UInt16(acl.handle)] else { return }
        let boundary = ACLBoundary(rawValue: UInt8(acl.boundary & 0x3)) ?? .continuing
        link.now = host.loop.uptime
        let mtu = link.server.mtu
        apply(link.receive(boundary: boundary, data: Array(acl.data)), on: link)
        // The peer exchanged the MTU with our server: clients hear of the wider bearer too.
        if link.server.mtu != mtu { broadcastMTU(link) }
    }

    /// The links as GetBearers lists them and LinksTakenOver announces them.
    var openBearers: [Beryl_Ipc_V1_Bearer] {
        links.values.sorted { $0.handle < $1.handle }.map {
            Beryl_Ipc_V1_Bearer(link: $0.handle, mtu: $0.server.mtu, central: $0.isCentral, peer: security.peer(of: $0.handle))
        }
    }

    private func linkClosed(_ handle: UInt16, reason: UInt8, stackFailed: Bool = false) {
        guard let link = links.removeValue(forKey: handle) else { return }
        applyGATT(link.gatt.linkClosed(), on: link)
        applySecurity(security.linkClosed(handle, reason: reason))
        router.linkClosed(handle)
        grants.linkClosed(handle, reason: reason)
        applyPacer(pacer.linkClosed(handle))
        outgoingACL.drop(link: handle)
        host.logger.info("link 0x\(String(handle, radix: 16)) down (HCI reason 0x\(String(reason, radix: 16)))")
        // Last: whatever else this link's end causes reaches the clients first.
        broadcastToClients(Event(bearerClosed: handle, central: link.isCentral, reason: reason, stackFailed: stackFailed))
    }

    /// An answer a peer waits on goes on hcid's urgent lane, ahead of the link's queued PDUs; anything else (requests,
    /// indications) keeps its place behind the notifications and writes without response sent before it.
    func send(_ pdu: [UInt8], on handle: UInt16) {
        if ACLUrgency.isAnswer(pdu) {
            queueACL(pdu, on: handle, lane: .urgent)
        } else {
            applyPacer(pacer.enqueue(pdu, on: handle))
        }
    }

    // MARK: Link outputs

    func apply(_ outputs: [LinkSession.Output], on link: LinkSession) {
        for output in outputs {
            switch output {
            case .send(let pdu):
                send(pdu, on: link.handle)
            case .log(let message):
                host.logger.info(message)
            case .parameterUpdateRequested(let identifier, let parameters):
                // As central, accept what the peripheral asks for when it is valid (the signalling core checked).
                send(link.answerParameterUpdate(identifier: identifier, accepted: true), on: link.handle)
                sendCommand(HCICommands.leConnectionUpdate(handle: link.handle, intervalMin: parameters.intervalMin, intervalMax: parameters.intervalMax,
                                                           latency: parameters.latency, supervisionTimeout: parameters.timeout))
            case .server(let serverOutput):
                serverEvent(serverOutput, on: link)
            case .client(let clientOutput):
                clientEvent(clientOutput, on: link)
            case .security(let pdu):
                applySecurity(security.receive(pdu, on: link.handle, at: host.loop.uptime))
            }
        }
    }

    private func serverEvent(_ output: ATTServerOutput, on link: LinkSession) {
        switch output {
        case .send(let bytes):
            send(link.attPDU(bytes), on: link.handle)
        case .readRequested(let id, _, _), .writeRequested(let id, _, _):
            let sessions = host.server?.sessions ?? [:]
            defer { armDeadline() }
            // An app whose channel outlived managerd still answers on it.
            let isLive = { [grants] (owner: UpdateSender) in sessions[owner.publisher] != nil || grants.liveChannel(of: owner) != nil }
            if let (owner, event) = router.route(output, on: link.handle, isLive: isLive, at: host.loop.uptime) {
                deliverRequest(event, for: owner, on: link)
            } else if case .readRequested = output {
                apply(wrap(link.server.completeRead(id: id, with: .failure(.unlikelyError)), for: link), on: link)
            } else if case .writeRequested(_, _, true) = output {
                apply(wrap(link.server.completeWrite(id: id, error: .unlikelyError), for: link), on: link)
            }
        case .subscriptionChanged(let valueHandle, let notify, let indicate):
            owner(of: valueHandle)?.send(.event(Event(subscriptionChanged: valueHandle, link: link.handle, notify: notify, indicate: indicate)))
            persistClientState(of: link)
        case .clientFeaturesChanged:
            persistClientState(of: link)
        case .signCounterAccepted(let counter):
            applySecurity(security.peerSignCounterAccepted(counter, on: link.handle))
        case .log(let message):
            host.logger.debug(message)
        case .indicationConfirmed:
            applyPacer(pacer.indicationConfirmed(on: link.handle, hasRoom: link.server.hasIndicationRoom))
        case .indicationTimedOut(let handle):
            // tickBearers ends the link, now and on each tick while it lasts.
            host.logger.warning("link 0x\(String(link.handle, radix: 16)): indication of 0x\(String(handle, radix: 16)) unconfirmed for 30 s; disconnecting")
        }
    }

    func wrap(_ outputs: [ATTServerOutput], for link: LinkSession) -> [LinkSession.Output] {
        outputs.map { if case .send(let bytes) = $0 { return .send(link.attPDU(bytes)) } else { return .server($0) } }
    }

    func complete(_ answer: ServiceRouter.OwedAnswer, read: Result<[UInt8], ATTError>, writeError: ATTError?, valueStartsAtOffset: Bool = false) {
        guard let link = links[answer.link] else { return }
        let outputs = answer.isRead ? link.server.completeRead(id: answer.serverID, with: read, offset: valueStartsAtOffset ? 0 : answer.offset)
            : link.server.completeWrite(id: answer.serverID, error: writeError)
        apply(wrap(outputs, for: link), on: link)
    }

    func owner(of handle: UInt16) -> IPCSession? { router.owner(of: handle).flatMap { host.server?.sessions[$0] } }

    private func sessionClosed(_ session: UInt64) {
        switch grants.sessionClosed(session) {
        case .channel(let app, let wasOrphaned):
            // Nobody is left to withdraw what was published for an orphan's app.
            if wasOrphaned { orphanGone(session, app: app) }
        case .publisher(let orphaned):
            // Its apps' channels outlive it, with their services, until a restarted managerd adopts them.
            publisherGone(session, keeping: Set(orphaned.compactMap { grants.app(of: $0) }))
            if !orphaned.isEmpty { channelsOrphaned(orphaned) }
        }
    }

    func publisherGone(_ session: UInt64, keeping kept: Set<UpdateSender> = []) {
        pacer.publisherGone(session, keeping: kept)
        withdraw(router.publisherGone(session, keeping: Set(kept.map(\.onBehalfOf))), "with its publisher")
    }

    func withdraw(_ gone: (ranges: [ClosedRange<UInt16>], unanswered: [ServiceRouter.OwedAnswer]), _ why: String) {
        // Its peers hear Unlikely Error now, not at the answer deadline.
        for answer in gone.unanswered { complete(answer, read: .failure(.unlikelyError), writeError: .unlikelyError) }
        armDeadline()
        for range in gone.ranges {
            _ = database.removeService(at: range.lowerBound)
            serviceSpecs[range.lowerBound] = nil
            host.logger.info("service at \(range) removed \(why)")
            announceDatabaseChange(range)
        }
    }

    /// Tells every connected client that subscribed to Service Changed which handles moved (Core Vol 3 Part G §7.1).
    func announceDatabaseChange(_ range: ClosedRange<UInt16>) {
        applySecurity(security.databaseChanged(range, serviceChangedValueHandle: database.serviceChangedHandle))
        for link in links.values {
            let (subscribed, outputs) = link.server.indicateServiceChanged(range)
            if subscribed { host.logger.info("service changed \(range) indicated to link 0x\(String(link.handle, radix: 16))") }
            apply(wrap(outputs, for: link), on: link)
        }
    }

    func broadcastMTU(_ link: LinkSession) {
        broadcastToClients(Event(mtuChanged: link.client.mtu, link: link.handle, central: link.isCentral))
    }

}
