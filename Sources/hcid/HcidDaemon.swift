import BerylCore
import BerylDaemonKit
import BerylEventLoop
import BerylHardware
import BerylHCI
import BerylIPC
import BerylTransport
import FoundationEssentials
import Glibc

/// What one client session asked hcid for.
struct Subscription {
    var events = false
    var acl = false
    var monitor = false
    /// Sends paced ACL under credits, and takes inbound ACL in batches.
    var credits = false
}

/// hcid's shell: moves bytes between the transport and the sans-IO `HCIHost`, and between it and clients.
final class HcidDaemon {
    static let maxUnclaimedACLPackets = 256
    /// ACL that arrived while no client subscribed to ACL, for the first one that does.
    var unclaimedACL: [Event] = []
    /// Each client session's subscription, by session id.
    var subscriptions: [UInt64: Subscription] = [:]
    let host: DaemonHost
    let core: HCIHost
    let transport: TransportSpec
    let profile: AdapterProfile?
    var fd: Int32?
    var reader: EventRegistration?
    var writer: EventRegistration?
    var outbound: [UInt8] = []
    var timer: EventRegistration?
    var reconnect: EventRegistration?
    var connecting: EventRegistration?
    var detail = ""
    var pending: [UInt64: IncomingRequest] = [:]
    var nextToken: UInt64 = 1
    var monitorFramer = H4Framer()
    /// Clients that asked for a controller reset, answered when bring-up ends one way or the other.
    var resetsAwaitingBringUp: [IncomingRequest] = []
    /// The identity a controller without a public address gets, and whether it is in the state directory yet.
    var identity: StaticIdentity.Loaded

    init(host: DaemonHost, transport: TransportSpec, profile: AdapterProfile?, patch: [VendorStep], commandTimeout: Duration) {
        self.host = host
        self.transport = transport
        self.profile = profile
        identity = StaticIdentity.load(stateDir: host.paths.stateDir)
        let identityAddress: BDAddress
        switch identity {
        case .stored(let address), .fresh(let address): identityAddress = address
        case .unusable(let address, let reason):
            identityAddress = address
            host.logger.error("\(reason); left as it is, and a controller without a public address uses \(address) for this run only")
        }
        core = HCIHost(commandTimeout: commandTimeout, quirks: profile?.quirks ?? ControllerQuirks(),
                       vendorSteps: (profile?.vendorSteps ?? []) + patch, staticIdentity: identityAddress,
                       transportBaud: { if case .uart(_, let baud, _) = transport { baud } else { nil } }())
        host.handle = { [unowned self] in self.handle($0) }
        host.decorateStatus = { [unowned self] status in status.runtimeDir = self.host.paths.runtimeDir }
        host.server?.onSessionClosed = { _, _ in }
        host.onShutdown = { [unowned self] in self.closeTransport() }
        // Start once the loop runs, after the control socket is listening.
        _ = try? host.loop.after(.zero) { [unowned self] in
            self.host.server?.onSessionClosed = { [unowned self] session, _ in
                self.core.clientGone(session.id)
                // The last taker of ACL (attd) gone: what it owed peers dies with it.
                let tookACL = self.subscriptions.removeValue(forKey: session.id)?.acl == true
                let others = self.subscriptions.values.contains { $0.acl }
                if tookACL && !others { self.core.attOwnerGone(at: self.host.loop.uptime) }
                self.drain()
            }
            self.openTransport()
        }
    }

    // MARK: Transport

    func openTransport() {
        reconnect = nil
        do {
            let fd = try ControllerTransport.open(transport)
            self.fd = fd
            guard case .tcp = transport else { return transportOpened(fd) }
            // The TCP handshake completes off the loop: writable means done, one way or the other.
            connecting = try? host.loop.onWritable(fd) { [unowned self] in
                self.connecting?.cancel()
                self.connecting = nil
                if let why = ControllerTransport.connectionFailure(fd, self.transport) {
                    self.closeTransport()
                    self.fail(.poweredOff(why), why: why, retry: true)
                    self.drain()
                } else {
                    self.transportOpened(fd)
                }
            }
            return
        } catch {
            switch error {
            case .unsupported(let why): fail(.unsupported(why), why: why, retry: false)
            case .unauthorized(let why): fail(.unauthorized(why), why: why, retry: false)
            case .unavailable(let why): fail(.poweredOff(why), why: why, retry: true)
            }
        }
        drain()
    }

    private func transportOpened(_ fd: Int32) {
        overriddenState = nil
        reader = try? host.loop.onReadable(fd) { [unowned self] in self.readController() }
        detail = ""
        host.logger.info("opened \(transport)" + (profile.map { " with profile \($0.id)" } ?? ""))
        core.start(at: host.loop.uptime)
        drain()
    }

    private func fail(_ state: ControllerState, why: String, retry: Bool) {
        answerResets(state)
        detail = why
        host.logger.warning("controller: \(state)")
        broadcastInfo(overriding: state)
        if retry {
            reconnect = try? host.loop.after(.seconds(1)) { [unowned self] in self.openTransport() }
        }
    }

    private var overriddenState: ControllerState?

    private func broadcastInfo(overriding state: ControllerState? = nil) {
        overriddenState = state
        var event = Event()
        event.hci.controllerChanged = controllerInfo()
        broadcast(event) { $0.events }
    }

    private func closeTransport() {
        connecting?.cancel()
        connecting = nil
        reader?.cancel()
        writer?.cancel()
        reader = nil
        writer = nil
        if let fd { close(fd) }
        fd = nil
        outbound.removeAll()
    }

    private func readController() {
        guard let fd else { return }
        switch StreamSocket.read(fd) {
        case .data(let bytes):
            monitor(bytes, received: true)
            core.controllerBytes(bytes, at: host.loop.uptime)
            drain()
        case .wouldBlock:
            return
        case .closed:
            closeTransport()
            fail(.poweredOff("the transport closed"), why: "the transport closed", retry: true)
        }
    }

    private func flush() {
        guard let fd, !outbound.isEmpty else { return }
        guard let written = StreamSocket.write(fd, outbound[...]) else {
            closeTransport()
            fail(.poweredOff("the transport closed while writing"), why: "the transport closed while writing", retry: true)
            return
        }
        outbound.removeFirst(written)
        if outbound.isEmpty {
            writer?.cancel()
            writer = nil
        } else if writer == nil {
            writer = try? host.loop.onWritable(fd) { [unowned self] in self.flush() }
        }
    }

    // MARK: Core outputs

    func drain() {
        var inbound: [Beryl_Ipc_V1_AclPacket] = []
        // Inbound ACL keeps its place before the events that follow it (a link's last PDU before its disconnection).
        func deliverHeldACL() {
            guard !inbound.isEmpty else { return }
            deliverInbound(inbound)
            inbound.removeAll()
        }
        for output in core.takeOutputs() {
            switch output {
            case .toController(let bytes):
                // Written together after the drain: one system call for every packet the controller's credits let out.
                monitor(bytes, received: false)
                outbound += bytes
            case .aclCredits(let client, let grants, let mtu):
                var event = Event()
                event.hci.aclCredits = .with {
                    $0.aclMtu = UInt32(mtu)
                    $0.links = grants.map { grant in .with { $0.handle = UInt32(grant.handle); $0.credits = UInt32(grant.credits); $0.fresh = grant.fresh } }
                }
                host.server?.sessions[client]?.send(.event(event))
            case .commandAnswered(_, let token, let event):
                var response = Response()
                response.hci.commandResult.eventCode = UInt32(event.code)
                response.hci.commandResult.parameters = Data(event.parameters)
                pending.removeValue(forKey: token)?.respond(response)
            case .commandFailed(_, let token, let reason):
                let (code, controllerReason): (IPCErrorCode, Beryl_Ipc_V1_ControllerReason) = switch reason {
                case .unresponsive: (.timeout, .unresponsive)
                case .resetting: (.notReady, .resetting)
                case .notReady: (.notReady, .notReady)
                case .reservedCommand: (.permissionDenied, .reservedCommand)
                }
                pending.removeValue(forKey: token)?.fail(code, reason.description, detail: RemoteDetail(controllerReason: controllerReason))
            case .event(let packet):
                deliverHeldACL()
                var event = Event()
                event.hci.event.code = UInt32(packet.code)
                event.hci.event.parameters = Data(packet.parameters)
                broadcast(event) { $0.events }
            case .aclReceived(let packet):
                inbound.append(.with {
                    $0.handle = UInt32(packet.handle)
                    $0.boundary = UInt32(packet.boundary.rawValue)
                    $0.data = Data(packet.data)
                })
            case .stateChanged(let state):
                deliverHeldACL()
                host.logger.info("controller \(state)" + (state == .poweredOn ? ": \(core.facts.address)\(core.facts.addressIsRandom ? " (static random identity: no public address)" : ""), "
                                 + "LE ACL \(core.facts.aclMTU) × \(core.facts.aclBuffers)" : ""))
                if state == .poweredOn, core.facts.addressIsRandom, case .fresh(let address) = identity {
                    do {
                        try StaticIdentity.save(address, stateDir: host.paths.stateDir)
                        identity = .stored(address)
                    } catch {
                        host.logger.error("cannot keep the identity \(address) in \(StaticIdentity.path(stateDir: host.paths.stateDir)): \(error)")
                    }
                }
                detail = state == .poweredOn ? "" : state.description
                broadcastInfo()
                answerResets(state)
            case .switchTransportBaud(let baud):
                if let fd, case .uart = transport {
                    host.logger.info("switching the UART to \(baud) baud")
                    _ = ControllerTransport.setUARTBaud(fd, baud)
                }
            case .log(let message):
                host.logger.info(message)
            }
        }
        deliverHeldACL()
        if fd != nil { flush() } else { outbound.removeAll() }
        // Re-arm only when the deadline moves: each re-arm is a timerfd system call, and drain runs per packet.
        let deadline = core.nextDeadline
        guard deadline != timerDeadline || timer?.isActive != true else { return }
        timer?.cancel()
        timer = nil
        timerDeadline = deadline
        if let deadline {
            timer = try? host.loop.after(max(deadline - host.loop.uptime, .milliseconds(1))) { [unowned self] in
                self.timerDeadline = nil
                self.core.tick(at: self.host.loop.uptime)
                self.drain()
            }
        }
    }

    private var timerDeadline: Duration?

    /// After the subscribers heard the new state: a reset's asker learns the controller is back (or why it is not).
    private func answerResets(_ state: ControllerState) {
        guard state != .resetting, !resetsAwaitingBringUp.isEmpty else { return }
        let waiting = resetsAwaitingBringUp
        resetsAwaitingBringUp.removeAll()
        for incoming in waiting {
            if state == .poweredOn {
                var response = Response()
                response.hci.controllerInfo = controllerInfo()
                incoming.respond(response)
            } else {
                incoming.fail(.notReady, "the controller did not come back from the reset: \(state)")
            }
        }
    }

    private func broadcast(_ event: Event, to wants: (Subscription) -> Bool) {
        host.server?.broadcast(event) { session in subscriptions[session.id].map(wants) ?? false }
    }

    private func monitor(_ bytes: [UInt8], received: Bool) {
        guard subscriptions.values.contains(where: \.monitor) else { return }
        let now = Date().timeIntervalSince1970
        let packets: [[UInt8]]
        if received {
            packets = monitorFramer.feed(bytes).compactMap { if case .packet(let packet) = $0 { return packet.h4Bytes } else { return nil } }
        } else {
            packets = [bytes]  // the core hands over one whole packet at a time
        }
        for packet in packets {
            var event = Event()
            event.hci.monitor.received = received
            event.hci.monitor.h4 = Data(packet)
            event.hci.monitor.timestampUs = UInt64(now * 1_000_000)
            broadcast(event) { $0.monitor }
        }
    }

    /// Inbound ACL of one drain: one datagram to each subscriber that takes batches, one per packet to the others.
    /// With no one to carry it (attd starting or restarting), a peer's PDU is held, not lost: a dropped ATT request
    /// would stall that peer's bearer for its 30-second timeout.
    private func deliverInbound(_ packets: [Beryl_Ipc_V1_AclPacket]) {
        let singles = packets.map { packet in Event.with { $0.hci.acl = packet } }
        guard subscriptions.values.contains(where: \.acl) else {
            unclaimedACL += singles.prefix(Self.maxUnclaimedACLPackets - unclaimedACL.count)
            return
        }
        // Encoded once, whoever takes them.
        lazy var batch: [UInt8] = Envelope.event(.with { $0.hci.aclBatch.packets = packets }).encoded()
        lazy var encodedSingles = singles.map { Envelope.event($0).encoded() }
        for (id, subscription) in subscriptions where subscription.acl {
            guard let session = host.server?.sessions[id] else { continue }
            if subscription.credits, packets.count > 1 {
                session.send(encoded: batch)
            } else {
                for event in encodedSingles { session.send(encoded: event) }
            }
        }
    }

    // MARK: Requests

    func controllerInfo() -> Beryl_Ipc_V1_ControllerInfo {
        var info = Beryl_Ipc_V1_ControllerInfo()
        let state = overriddenState ?? core.state
        info.state = switch state {
        case .unknown: .unknown
        case .resetting: .resetting
        case .unsupported: .unsupported
        case .unauthorized: .unauthorized
        case .poweredOff: .poweredOff
        case .poweredOn: .poweredOn
        case .unresponsive: .unresponsive
        }
        info.transport = transport.description
        info.profile = profile?.id ?? "none"
        info.detail = detail
        info.unansweredCommands = core.unansweredTuning.map { UInt32($0.rawValue) }.sorted()
        info.timesUnresponsive = UInt32(core.timesUnresponsive)
        info.cancelsNeverCompleted = UInt32(core.cancelsNeverCompleted)
        let facts = core.facts
        if state == .poweredOn {
            info.address = DeviceAddress(facts.address, type: facts.addressIsRandom ? .random : .public).description
            info.leAclMtu = UInt32(facts.aclMTU)
            info.leAclBuffers = UInt32(core.quirks.maxACLBuffers.map { min($0, facts.aclBuffers) } ?? facts.aclBuffers)
            info.hciVersion = UInt32(facts.hciVersion)
            info.manufacturer = UInt32(facts.manufacturer)
            info.aclBufferSource = facts.aclBufferSource
            info.filterAcceptListSize = UInt32(facts.filterAcceptListSize)
            info.resolvingListSize = UInt32(facts.resolvingListSize)
            info.aclInFlight = UInt32(core.aclInFlight)
            info.links = core.connections.sorted { $0.key < $1.key }.map { handle, link in
                .with { $0.handle = UInt32(handle); $0.central = link.central; $0.peer = link.peer.description }
            }
        }
        return info
    }

    func handle(_ incoming: IncomingRequest) -> Bool {
        guard case .hci(let request)? = incoming.request.kind, let session = incoming.session else { return false }
        switch request.kind {
        case .getControllerInfo?:
            var response = Response()
            response.hci.controllerInfo = controllerInfo()
            incoming.respond(response)
        case .sendCommand(let command)?:
            guard command.opcode <= 0xFFFF, command.opcode != 0 else {
                incoming.fail(.invalidArgument, "opcode \(command.opcode) is not a 16-bit HCI opcode", field: "opcode")
                return true
            }
            guard command.parameters.count <= 255 else {
                incoming.fail(.invalidArgument, "HCI command parameters are at most 255 bytes", field: "parameters")
                return true
            }
            let token = nextToken
            nextToken += 1
            pending[token] = incoming
            core.submitCommand(HCICommandPacket(opcode: UInt16(command.opcode), parameters: Array(command.parameters)),
                               client: session.id, token: token, at: host.loop.uptime)
            drain()
        case .sendAcl(let acl)?:
            if submit(acl, from: session.id, incoming, field: "") { incoming.respond(.with { $0.hci.accepted = .init() }) }
            drain()
        case .sendAclBatch(let batch)?:
            // Each on its own: one for a link that has just ended must not hold back another link's answer.
            var allQueued = true
            for (index, acl) in batch.pdus.enumerated() {
                allQueued = submit(acl, from: session.id, incoming, field: "pdus[\(index)].") && allQueued
            }
            if allQueued { incoming.respond(.with { $0.hci.accepted = .init() }) }
            drain()
        case .subscribe(let wanted)?:
            subscriptions[session.id] = Subscription(events: wanted.events, acl: wanted.acl, monitor: wanted.monitor, credits: wanted.acl && wanted.aclCredits)
            if wanted.acl, wanted.aclCredits { core.attachCreditedClient(session.id) } else { core.detachCreditedClient(session.id) }
            var response = Response()
            response.hci.controllerInfo = controllerInfo()
            incoming.respond(response)
            if wanted.acl, !unclaimedACL.isEmpty {
                // After the answer, whose link list tells the subscriber which links these belong to.
                let open = Set(core.connections.keys)
                for event in unclaimedACL where open.contains(UInt16(event.hci.acl.handle)) { session.send(.event(event)) }
                unclaimedACL.removeAll()
            }
            drain()  // the credits granted on the links up now
        case .resetController?:
            guard fd != nil, connecting == nil else {
                incoming.fail(.notReady, "the controller's transport is not open (\(overriddenState ?? core.state))")
                return true
            }
            resetsAwaitingBringUp.append(incoming)
            // One reset serves everyone who asks while it runs.
            if resetsAwaitingBringUp.count == 1 {
                host.logger.info("controller reset asked by session \(session.id)")
                core.resetController(at: host.loop.uptime)
            }
            drain()
        case nil:
            incoming.fail(.unknownMessage, "empty HCI request")
        }
        return true
    }

    /// Queues one PDU on its lane; false after answering `incoming` with why it was not.
    private func submit(_ acl: Beryl_Ipc_V1_SendAcl, from session: UInt64, _ incoming: IncomingRequest, field: String) -> Bool {
        guard acl.handle <= 0x0EFF else {
            incoming.fail(.invalidArgument, "connection handles are 0x000–0xEFF", field: field + "handle")
            return false
        }
        let lane: ACLLane
        switch acl.lane {
        case .bounded: lane = .bounded
        case .credited: lane = .credited(session)
        case .urgent: lane = .urgent
        case .UNRECOGNIZED(let value):
            incoming.fail(.invalidArgument, "ACL lane \(value) is not one this hcid knows", field: field + "lane")
            return false
        }
        switch core.submitACL(handle: UInt16(acl.handle), pdu: Array(acl.pdu), lane: lane, at: host.loop.uptime) {
        case .queued:
            return true
        case .busy:
            let why = switch acl.lane {
            case .credited: subscriptions[session]?.credits == true ? "sent past the link's ACL credits" : "this session did not subscribe with acl_credits"
            default: "ACL queue full; wait for completed packets"
            }
            incoming.fail(.busy, why)
        case .unknownLink:
            incoming.fail(.notFound, "no connection with handle 0x\(String(acl.handle, radix: 16))", field: field + "handle")
        case .notReady(let state):
            incoming.fail(.notReady, "controller is \(state)")
        }
        return false
    }
}
