import BerylCore

public typealias HCIClientID = UInt64

/// Why a client's command will not be answered by the controller.
public enum HCICommandFailure: Equatable, Sendable, CustomStringConvertible {
    /// No answer within the command timeout: the controller is taken to be hung.
    case unresponsive
    case resetting
    case notReady(ControllerState)
    /// HCI Reset belongs to hcid.
    case reservedCommand

    public var description: String {
        switch self {
        case .unresponsive: "controller unresponsive"
        case .resetting: "controller is being reset"
        case .notReady(let state): "controller is \(state)"
        case .reservedCommand: "HCI Reset is hcid's; restart hcid to reset the controller"
        }
    }
}

/// What the host core asks its shell to do.
public enum HCIHostOutput: Equatable, Sendable {
    /// H4 bytes for the controller.
    case toController([UInt8])
    /// The Command Complete or Command Status answering a client's command.
    case commandAnswered(client: HCIClientID, token: UInt64, HCIEventPacket)
    /// A client's command that will not be answered by the controller (timeout, reset, bad request).
    case commandFailed(client: HCIClientID, token: UInt64, reason: HCICommandFailure)
    /// Any other event, for subscribers.
    case event(HCIEventPacket)
    /// Inbound ACL, as the controller delivered it.
    case aclReceived(ACLPacket)
    case stateChanged(ControllerState)
    /// Credits for a client's credited lane: granted afresh for a new link or client, returned as fragments leave.
    case aclCredits(client: HCIClientID, [ACLCreditGrant], mtu: Int)
    /// Set the UART to this speed now: the controller has switched after a vendor baud-rate command.
    case switchTransportBaud(Int)
    case log(String)
}

/// How the host took a client's PDU.
public enum ACLSubmission: Equatable, Sendable {
    case queued
    /// The link's bounded queue is full, or a credited PDU went past the client's credits.
    case busy
    case unknownLink
    case notReady(ControllerState)
}

/// hcid's sans-IO core: brings the controller up, then multiplexes clients' commands under the
/// controller's command credits and clients' ACL under its buffer credits (Core Vol 4 Part E §4.4, §4.1).
public final class HCIHost {
    public private(set) var state: ControllerState = .unknown
    public private(set) var facts = ControllerFacts()
    public let commandTimeout: Duration
    public var quirks: ControllerQuirks
    public var vendorSteps: [VendorStep]
    /// The static random address this host takes as its identity when the controller has no public address.
    public let staticIdentity: BDAddress?
    /// A UART's speed at power-on, which a controller restarting its firmware falls back to (nil: not a UART).
    public let transportBaud: Int?
    public private(set) var outputs: [HCIHostOutput] = []

    private var framer = H4Framer()
    private var now: Duration = .zero
    private var bringUp: BringUp?
    private var commandCredits = 1
    private var outstanding: [UInt16: Pending] = [:]
    private var queues: [HCIClientID: [Pending]] = [:]
    private var rotation: [HCIClientID] = []
    private var internalQueue: [Pending] = []
    private var recoveryAt: Duration?
    /// When bring-up, waiting on the controller (a firmware booting), goes on.
    private var bringUpResumeAt: Duration?
    let acl: ACLScheduler
    private var attAnswers = ATTAnswerWatch()
    /// When the controller last sent a whole packet: the sign of life that tells an unimplemented command from a frozen
    /// controller.
    private var lastPacketAt: Duration?
    /// Link-tuning commands this controller left unanswered while it went on sending: not asked again.
    public private(set) var unansweredTuning: Set<HCIOpcode> = []
    /// How many times the controller fell silent since this host started: once for each silence, however many resets
    /// it took to end.
    public private(set) var timesUnresponsive = 0
    /// Silent, and not poweredOn since: a reset that goes unanswered too is the same silence.
    private var silent = false
    /// How many times the controller confirmed LE Create Connection Cancel and never completed it.
    public private(set) var cancelsNeverCompleted = 0
    /// When the controller confirmed LE Create Connection Cancel, until the LE Connection Complete that must follow.
    private var cancelConfirmedAt: Duration?
    /// The commands hcid sends on its own to tune a new link; a controller without them loses nothing but speed.
    static let tuningCommands: Set<HCIOpcode> = [.leSetPHY, .leSetDataLength]

    struct Pending {
        var owner: Owner
        var command: HCICommandPacket
        var sentAt: Duration = .zero
    }

    enum Owner: Equatable {
        case host
        case client(HCIClientID, token: UInt64)
    }

    public init(commandTimeout: Duration = .seconds(2), quirks: ControllerQuirks = ControllerQuirks(), vendorSteps: [VendorStep] = [],
                staticIdentity: BDAddress? = nil, transportBaud: Int? = nil) {
        self.commandTimeout = commandTimeout
        self.quirks = quirks
        self.vendorSteps = vendorSteps
        self.staticIdentity = staticIdentity
        self.transportBaud = transportBaud
        acl = ACLScheduler()
    }

    public func takeOutputs() -> [HCIHostOutput] {
        for (client, links) in acl.takeReturned() where creditClients.contains(client) {
            for (handle, count) in links { grants[client, default: [:]][handle, default: ACLCreditGrant(handle: handle, credits: 0, fresh: false)].credits += count }
        }
        for client in grants.keys.sorted() {
            guard let links = grants[client], !links.isEmpty else { continue }
            outputs.append(.aclCredits(client: client, links.values.sorted { $0.handle < $1.handle }, mtu: acl.mtu))
        }
        grants.removeAll(keepingCapacity: true)
        defer { outputs.removeAll(keepingCapacity: true) }
        return outputs
    }

    // MARK: ACL lanes

    /// Queued fragments a link takes on the bounded lane before it refuses as busy: tens of milliseconds of air time.
    public static let boundedFragmentsPerLink = 128
    public static let boundedFragmentsInAll = 4096
    /// The largest PDU a client sends: ATT_MTU 517 with its L2CAP header (Core Vol 3 Part F §3.2.9).
    static let largestPDU = 517 + 4

    /// Credits per link and client: a couple of connection events of the controller's buffers, and never less than
    /// the largest PDU, so a credited PDU always fits a fresh grant.
    public var creditsPerLink: Int { max(2 * acl.buffers, acl.fragments(of: Self.largestPDU)) }

    private var creditClients: Set<HCIClientID> = []
    private var grants: [HCIClientID: [UInt16: ACLCreditGrant]] = [:]

    /// A client that sends paced ACL on the credited lane: it is granted credits on every link up now and every link
    /// that comes up, afresh (what an earlier session of the same daemon spent is not its debt).
    public func attachCreditedClient(_ client: HCIClientID) {
        creditClients.insert(client)
        for handle in acl.openHandles { grantFresh(handle, to: client) }
    }

    /// The client no longer sends on the credited lane (it subscribed again without credits).
    public func detachCreditedClient(_ client: HCIClientID) {
        guard creditClients.remove(client) != nil else { return }
        grants[client] = nil
        acl.forget(client)
    }

    private func grantFresh(_ handle: UInt16, to client: HCIClientID) {
        // What came back already is inside the fresh figure, not on top of it.
        acl.clearReturned(to: client, on: handle)
        grants[client, default: [:]][handle] = ACLCreditGrant(handle: handle, credits: creditsPerLink - acl.spent(by: client, on: handle), fresh: true)
    }

    /// Queues an L2CAP PDU for `handle` on its lane; fragments go out as buffer credits allow.
    public func submitACL(handle: UInt16, pdu: [UInt8], lane: ACLLane = .bounded, at time: Duration) -> ACLSubmission {
        now = max(now, time)
        guard state == .poweredOn else { return .notReady(state) }
        guard acl.isOpen(handle) else { return .unknownLink }
        let cost = acl.fragments(of: pdu.count)
        switch lane {
        case .bounded:
            guard acl.queuedFragments < Self.boundedFragmentsInAll, acl.queuedFragments(for: handle) < Self.boundedFragmentsPerLink else { return .busy }
        case .credited(let client):
            guard creditClients.contains(client), acl.spent(by: client, on: handle) + cost <= creditsPerLink else { return .busy }
        case .urgent:
            // Answers are bounded by what peers ask; a flood past every bound is refused rather than queued.
            guard acl.queuedFragments < Self.boundedFragmentsInAll else { return .busy }
        }
        attAnswers.sending(handle: handle, pdu: pdu)
        acl.enqueue(handle: handle, pdu: pdu, lane: lane)
        pumpACL()
        return .queued
    }

    /// Starts (or restarts) bring-up with HCI Reset; clients' commands wait until the controller is on.
    public func start(at time: Duration) {
        start(at: time, linksEndWith: .connectionTimeout)
    }

    /// A reset a client asked for (a lab's factory reset): the same bring-up, but the links end because this host ended
    /// them, and clients hear Connection Terminated by Local Host (Core Vol 1 Part F §2.22).
    public func resetController(at time: Duration) {
        outputs.append(.log("resetting the controller as a client asked"))
        start(at: time, linksEndWith: .connectionTerminatedByLocalHost)
    }

    private func start(at time: Duration, linksEndWith reason: HCIStatus) {
        now = time
        framer.reset()
        partialPacketSince = nil
        recoveryAt = nil
        cancelConfirmedAt = nil
        failEverything(reason: .resetting)
        acl.reset()
        grants.removeAll()
        attAnswers.reset()
        endingUnknown.removeAll()
        // Said before the links it ends, so that clients tell them from a peer's: they are the stack's losses.
        setState(.resetting)
        // HCI Reset ends every link with no Disconnection Complete (Core Vol 4 Part E §7.3.2): clients hear of each
        // here, or they would keep a bearer that no longer exists until an ATT timeout, and then not even a Disconnect
        // could end it.
        for handle in connections.keys.sorted() { outputs.append(.event(Self.linkLost(handle, reason: reason))) }
        connections.removeAll()
        for parked in parkedDisconnects { outputs.append(.commandFailed(client: parked.client, token: parked.token, reason: .resetting)) }
        parkedDisconnects.removeAll()
        commandCredits = 1
        bringUp = BringUp()
        facts.suggestedDataLength = nil  // learned again, or not, by this bring-up
        bringUpResumeAt = nil
        send(HCICommandPacket(.reset), owner: .host)
    }

    /// When the core next needs `tick`: the oldest outstanding command's timeout or a recovery attempt.
    public var nextDeadline: Duration? {
        let oldest = outstanding.values.map { $0.sentAt + commandTimeout }.min()
        // No credit and nothing outstanding to bring one back: the controller has as long as a command to grant one.
        let starved = commandCredits == 0 && outstanding.isEmpty && hasQueuedCommands ? creditsExhaustedAt.map { $0 + commandTimeout } : nil
        let stalledRead = partialPacketSince.map { $0 + partialPacketLimit }
        let uncompletedCancel = cancelConfirmedAt.map { $0 + commandTimeout }
        return [oldest, recoveryAt, starved, stalledRead, parkedDisconnects.map(\.until).min(), bringUpResumeAt, uncompletedCancel].compactMap { $0 }.min()
    }

    private var creditsExhaustedAt: Duration?
    static let bringUpAttempts = 3
    private var failedBringUps = 0
    private var hasQueuedCommands: Bool { !internalQueue.isEmpty || queues.values.contains { !$0.isEmpty } }

    public func tick(at time: Duration) {
        now = max(now, time)
        releaseParkedDisconnects()
        if let since = partialPacketSince, now - since >= partialPacketLimit {
            return resynchronise(because: "\(framer.bufferedByteCount) bytes of a packet unfinished for \(partialPacketLimit)")
        }
        if let resumeAt = bringUpResumeAt, now >= resumeAt, var bringUp {
            bringUpResumeAt = nil
            let result = bringUp.resume(host: self)
            self.bringUp = bringUp
            settle(result)
        }
        if let recoveryAt, now >= recoveryAt {
            self.recoveryAt = nil
            outputs.append(.log("trying to recover the controller with HCI Reset"))
            outstanding.removeAll()
            start(at: now)
            return
        }
        if let confirmedAt = cancelConfirmedAt, now - confirmedAt >= commandTimeout {
            return resetAfterUncompletedCancel()
        }
        forgetUnansweredTuning()
        let stalledOpcode: UInt16
        if let stalled = outstanding.values.first(where: { now - $0.sentAt >= commandTimeout }) {
            stalledOpcode = stalled.command.opcode
            outputs.append(.log("command 0x\(String(stalledOpcode, radix: 16)) got no answer in \(commandTimeout)"))
        } else if commandCredits == 0, outstanding.isEmpty, hasQueuedCommands, let since = creditsExhaustedAt, now - since >= commandTimeout {
            stalledOpcode = 0
            outputs.append(.log("the controller granted no command credit for \(commandTimeout)"))
        } else {
            return
        }
        failEverything(reason: .unresponsive)
        if !silent { timesUnresponsive += 1 }
        silent = true
        bringUp = nil
        bringUpResumeAt = nil
        setState(.unresponsive(opcode: stalledOpcode))
        recoveryAt = now + commandTimeout
    }

    /// A tuning command of hcid's own that went unanswered for the command timeout while the controller kept sending
    /// packets is one it does not implement, though its features claim it (Bumble's controllers send no Command Status
    /// for LE Set PHY): the link keeps its PHY and length, the command's credit comes back (as Linux takes it back on a
    /// command timeout), and it is not asked again. A controller that sent nothing since is frozen, and `tick` says so.
    private func forgetUnansweredTuning() {
        guard let lastPacketAt else { return }
        var forgot = false
        for (opcode, pending) in outstanding where pending.owner == .host && now - pending.sentAt >= commandTimeout && lastPacketAt > pending.sentAt {
            guard let tuning = HCIOpcode(rawValue: opcode), Self.tuningCommands.contains(tuning) else { continue }
            outstanding[opcode] = nil
            unansweredTuning.insert(tuning)
            commandCredits = max(commandCredits, 1)
            forgot = true
            outputs.append(.log("the controller left command 0x\(String(opcode, radix: 16)) (\(tuning)) unanswered for \(commandTimeout) "
                                + "while it went on sending; not asking for it again"))
        }
        if forgot { pumpCommands() }
    }

    /// A controller that confirmed LE Create Connection Cancel owes an LE Connection Complete with status 0x02 (Core Vol 4
    /// Part E §7.8.13); one that never sends it still thinks it is initiating and refuses every later LE Create Connection
    /// with Command Disallowed (Bumble 0.0.236's controller), so no connect would ever go out again. Only a reset ends
    /// that; clients see the controller go through resetting and back, and managerd asks for its pending links again.
    private func resetAfterUncompletedCancel() {
        cancelConfirmedAt = nil
        cancelsNeverCompleted += 1
        outputs.append(.log("the controller confirmed LE Create Connection Cancel but sent no LE Connection Complete in \(commandTimeout); "
                            + "resetting it (\(cancelsNeverCompleted) time(s) since hcid started)"))
        // This host ends the links the reset takes with it: clients hear Connection Terminated by Local Host.
        start(at: now, linksEndWith: .connectionTerminatedByLocalHost)
    }

    // MARK: Clients

    public func submitCommand(_ command: HCICommandPacket, client: HCIClientID, token: UInt64, at time: Duration) {
        submitCommand(command, client: client, token: token, at: time, parkable: true)
    }

    private func submitCommand(_ command: HCICommandPacket, client: HCIClientID, token: UInt64, at time: Duration, parkable: Bool) {
        now = max(now, time)
        if parkable, state == .poweredOn, command.opcode == HCIOpcode.disconnect.rawValue, command.parameters.count >= 2 {
            let handle = (UInt16(command.parameters[0]) | UInt16(command.parameters[1]) << 8) & 0x0FFF
            if acl.isOpen(handle), acl.pending(for: handle) > 0 {
                parkedDisconnects.append((handle, client, token, command, now + Self.disconnectGrace))
                return
            }
        }
        guard state == .poweredOn else {
            outputs.append(.commandFailed(client: client, token: token, reason: .notReady(state)))
            return
        }
        // Reset and flow-control-sensitive commands belong to hcid alone.
        if command.opcode == HCIOpcode.reset.rawValue {
            outputs.append(.commandFailed(client: client, token: token, reason: .reservedCommand))
            return
        }
        if queues[client] == nil {
            queues[client] = []
            // A newcomer goes first once; everyone served since is behind it.
            rotation.insert(client, at: 0)
        }
        queues[client]!.append(Pending(owner: .client(client, token: token), command: command))
        pumpCommands()
    }

    public var aclQueuedFragments: Int { acl.queuedFragments }
    public func aclQueuedFragments(for handle: UInt16) -> Int { acl.queuedFragments(for: handle) }
    public var aclInFlight: Int { acl.inFlight }

    /// The links the controller has, as its connection events said: for clients that attach after a link came up.
    public private(set) var connections: [UInt16: (central: Bool, peer: DeviceAddress)] = [:]

    /// A Disconnect waits (at most this long) for the link's queued data to reach the peer: a client that sends and then
    /// disconnects (keys at the end of pairing, a last write without response) must not lose what it sent.
    public static let disconnectGrace: Duration = .seconds(1)
    private var parkedDisconnects: [(handle: UInt16, client: HCIClientID, token: UInt64, command: HCICommandPacket, until: Duration)] = []

    private func releaseParkedDisconnects() {
        let ready = parkedDisconnects.filter { acl.pending(for: $0.handle) == 0 || now >= $0.until || !acl.isOpen($0.handle) }
        guard !ready.isEmpty else { return }
        parkedDisconnects.removeAll { parked in ready.contains { $0.token == parked.token && $0.client == parked.client } }
        for parked in ready { submitCommand(parked.command, client: parked.client, token: parked.token, at: now, parkable: false) }
    }

    /// A client went away: its queued commands are dropped; one already sent is answered into the void.
    public func clientGone(_ client: HCIClientID) {
        // A parked Disconnect still goes out: the client wanted the link down.
        for index in parkedDisconnects.indices where parkedDisconnects[index].client == client { parkedDisconnects[index].until = now }
        releaseParkedDisconnects()
        queues.removeValue(forKey: client)
        rotation.removeAll { $0 == client }
        creditClients.remove(client)
        grants[client] = nil
        acl.forget(client)
        for (opcode, pending) in outstanding {
            if case .client(client, _) = pending.owner { outstanding[opcode]?.owner = .host }
        }
    }

    /// The client that took the links' ATT traffic (attd) went away. A peer it owed a response or a confirmation
    /// would wait out the 30 s transaction timeout and then give up on the link (Core Vol 3 Part F §3.3.3): those
    /// links end now, Remote User Terminated Connection (Core Vol 4 Part E §7.1.6), and their peers reconnect at once.
    /// Links with nothing owed stay up for attd's successor.
    public func attOwnerGone(at time: Duration) {
        now = max(now, time)
        guard state == .poweredOn else { return }
        for handle in attAnswers.awaitingAnswer.sorted() where acl.isOpen(handle) {
            outputs.append(.log("link 0x\(String(handle, radix: 16)) was owed an ATT answer by the client that went away; disconnecting it"))
            send(HCICommands.disconnect(handle: handle), owner: .host)
        }
        attAnswers.reset()
    }

    private var endingUnknown: Set<UInt16> = []

    /// The Disconnection Complete a controller never sent (its link ended by a reset, or the event lost), as clients
    /// would have had it: success, Connection Timeout, as the peer sees it.
    private static func linkLost(_ handle: UInt16, reason: HCIStatus = .connectionTimeout) -> HCIEventPacket {
        HCIEventPacket(code: HCIEventCode.disconnectionComplete.rawValue,
                       parameters: [0x00, UInt8(handle & 0xFF), UInt8(handle >> 8), reason.rawValue])
    }

    /// Whether the controller has yet to answer (or be sent) the Reset that starts bring-up.
    private var resetPending: Bool {
        outstanding[HCIOpcode.reset.rawValue] != nil || internalQueue.contains { $0.command.opcode == HCIOpcode.reset.rawValue }
    }

    /// ACL on a handle the host never heard connect: its LE Connection Complete was lost (a corrupted stream) and
    /// the controller holds a link nobody here serves, on which the peer would wait out its 30 s ATT timeout. It is
    /// ended now (Remote User Terminated Connection). A handle made up by corruption is refused by the controller
    /// with Unknown Connection Identifier, and nothing else happens.
    private func endUnknownLink(_ handle: UInt16) {
        guard state == .poweredOn, handle <= 0x0EFF, endingUnknown.insert(handle).inserted else { return }
        outputs.append(.log("ACL on link 0x\(String(handle, radix: 16)), whose connection the host never heard of; disconnecting it"))
        send(HCICommands.disconnect(handle: handle), owner: .host)
    }

    // MARK: Controller

    public func controllerBytes(_ bytes: [UInt8], at time: Duration) {
        now = max(now, time)
        // The first sign the stream is out of step; nothing after it is trusted.
        var outOfStep: String?
        let items = framer.feed(bytes)
        for item in items {
            switch item {
            case .invalidIndicator(let byte):
                outOfStep = outOfStep ?? "byte 0x\(String(byte, radix: 16)) where a packet type belongs"
            case .implausibleLength(let type, let length):
                outOfStep = outOfStep ?? "\(type) packet of \(length) bytes, more than the controller sends"
            case .packet(.event(let event)):
                guard outOfStep == nil else { continue }
                lastPacketAt = now
                handle(event)
            case .packet(.acl(let packet)):
                guard outOfStep == nil else { continue }
                lastPacketAt = now
                if acl.isOpen(packet.handle) {
                    attAnswers.received(packet)
                    outputs.append(.aclReceived(packet))
                } else {
                    endUnknownLink(packet.handle)
                }
            case .packet:
                continue
            }
        }
        if let outOfStep { return resynchronise(because: outOfStep) }
        notePartialPacket(progressed: !items.isEmpty)
    }

    /// A corrupted stream cannot be trusted byte by byte (a flipped length swallows packets, a flipped count invents
    /// credits), so the controller is reset and brought up again.
    private func resynchronise(because why: String) {
        outputs.append(.log("H4 stream out of step (\(why)); resetting the controller"))
        start(at: now)
    }

    /// A controller writes each packet whole, so one left half-read for `partialPacketLimit` had a length
    /// corrupted upwards (within what the controller could send) and is holding back every packet behind it.
    public let partialPacketLimit: Duration = .seconds(1)
    private var partialPacketSince: Duration?

    private func notePartialPacket(progressed: Bool) {
        if framer.bufferedByteCount == 0 {
            partialPacketSince = nil
        } else if progressed || partialPacketSince == nil {
            partialPacketSince = now
        }
    }

    private func handle(_ event: HCIEventPacket) {
        switch HCIEventCode(rawValue: event.code) {
        case .commandComplete?, .commandStatus?:
            var reader = ByteReader(event.parameters)
            let isComplete = event.code == HCIEventCode.commandComplete.rawValue
            if !isComplete { _ = try? reader.u8() }
            guard let credits = try? reader.u8(), let opcode = try? reader.u16() else {
                outputs.append(.log("malformed command event dropped"))
                return
            }
            commandCredits = Int(credits)
            creditsExhaustedAt = credits == 0 ? now : nil
            guard opcode != 0 else { pumpCommands(); return }  // a credit-only event (Core Vol 4 Part E §7.7.14)
            guard let pending = outstanding.removeValue(forKey: opcode) else {
                outputs.append(.log("answer for command 0x\(String(opcode, radix: 16)) that is not outstanding; ignored"))
                pumpCommands()
                return
            }
            // Disconnect answered Unknown Connection Identifier (0x02) for a link we still hold: its Disconnection
            // Complete never reached us (lost in a corrupted HCI stream), so the link ends here, for every client.
            if !isComplete, opcode == HCIOpcode.disconnect.rawValue, event.parameters.first == 0x02, pending.command.parameters.count >= 2 {
                let link = (UInt16(pending.command.parameters[0]) | UInt16(pending.command.parameters[1]) << 8) & 0x0FFF
                if connections[link] != nil {
                    outputs.append(.log("link 0x\(String(link, radix: 16)) is unknown to the controller; its disconnection was lost, ending it"))
                    handle(Self.linkLost(link))
                }
            }
            if isComplete, opcode == HCIOpcode.leCreateConnectionCancel.rawValue, (try? reader.u8()) == HCIStatus.success.rawValue {
                cancelConfirmedAt = now
            }
            switch pending.owner {
            case .host: bringUpAnswer(opcode: opcode, event: event, isComplete: isComplete)
            case .client(let client, let token): outputs.append(.commandAnswered(client: client, token: token, event))
            }
            pumpCommands()
        case .numberOfCompletedPackets?:
            var reader = ByteReader(event.parameters)
            guard let count = try? reader.u8() else { return }
            for _ in 0..<count {
                guard let handle = try? reader.u16(), let completed = try? reader.u16() else { break }
                if let complaint = acl.completed(handle: handle & 0x0FFF, count: Int(completed)) { outputs.append(.log(complaint)) }
            }
            pumpACL()
            releaseParkedDisconnects()
        case .disconnectionComplete?, .leMeta?:
            // Sent before the controller took the Reset: it speaks of links the Reset ends with no event of their
            // own (Core Vol 4 Part E §7.3.2). A connection made there (a central reaching the last hcid's
            // advertising as this one starts) would be served by nobody here and stand forever.
            guard !resetPending else {
                if case .connected(let handle, _, _)? = LinkEvent(event) {
                    outputs.append(.log("link 0x\(String(handle, radix: 16)) connected before the controller took the reset; the reset ends it"))
                }
                return
            }
            let linkEvent = LinkEvent(event)
            switch linkEvent {
            case .connected?, .connectionFailed?: cancelConfirmedAt = nil
            default: break
            }
            switch linkEvent {
            case .connected(let handle, let central, let peer)?:
                endingUnknown.remove(handle)
                acl.open(handle)
                connections[handle] = (central, peer)
                for client in creditClients { grantFresh(handle, to: client) }
                // The 2M PHY both ways halves a PDU's air time; the link layers move only if the peer has it too, and
                // report a change to both hosts with LE PHY Update Complete (Core Vol 4 Part E §7.8.49, Vol 6 Part B
                // §5.1.10). The central alone asks, as two requests at once collide (Vol 6 Part B §5.3).
                if central, state == .poweredOn, !quirks.no2MPHY, facts.hasLEFeature(bit: 8), facts.supports(.leSetPHY), !unansweredTuning.contains(.leSetPHY) {
                    send(HCICommands.leSetPHY(handle: handle, phy: 2), owner: .host)
                }
                // Each side asks for its own transmit length too, as Zephyr's automatic data length update does: a
                // controller need not start the procedure itself from the suggested default (Root Canal does not).
                if state == .poweredOn, let length = facts.suggestedDataLength, facts.supports(.leSetDataLength), !unansweredTuning.contains(.leSetDataLength) {
                    send(HCICommands.leSetDataLength(handle: handle, octets: UInt16(length.octets), time: UInt16(length.time)), owner: .host)
                }
            case .disconnected(let handle, _)?:
                endingUnknown.remove(handle)
                acl.close(handle)
                for client in grants.keys { grants[client]?[handle] = nil }
                attAnswers.closed(handle)
                connections[handle] = nil
                pumpACL()
                releaseParkedDisconnects()
            default: break
            }
            outputs.append(.event(event))
        case .hardwareError?:
            outputs.append(.log("controller reported hardware error 0x\(String(event.parameters.first ?? 0, radix: 16)); resetting it"))
            outputs.append(.event(event))
            start(at: now)
        default:
            outputs.append(.event(event))
        }
    }

    // MARK: Flow control

    private func send(_ command: HCICommandPacket, owner: Owner) {
        internalQueue.append(Pending(owner: owner, command: command))
        pumpCommands()
    }

    /// Sends while the controller grants credits: hcid's own commands first, then one per client in turn.
    private func pumpCommands() {
        while commandCredits > 0 {
            var next: Pending?
            if !internalQueue.isEmpty {
                next = internalQueue.removeFirst()
            } else if state == .poweredOn {
                for _ in 0..<rotation.count {
                    let client = rotation.removeFirst()
                    rotation.append(client)
                    if var queue = queues[client], !queue.isEmpty {
                        next = queue.removeFirst()
                        queues[client] = queue
                        break
                    }
                }
            }
            guard var pending = next else { return }
            // One outstanding command per opcode, or answers could not be told apart.
            guard outstanding[pending.command.opcode] == nil else {
                requeueFront(pending)
                return
            }
            pending.sentAt = now
            outstanding[pending.command.opcode] = pending
            commandCredits -= 1
            outputs.append(.toController(HCIPacket.command(pending.command).h4Bytes))
        }
    }

    private func requeueFront(_ pending: Pending) {
        switch pending.owner {
        case .host: internalQueue.insert(pending, at: 0)
        case .client(let client, _): queues[client, default: []].insert(pending, at: 0)
        }
    }

    private func pumpACL() {
        while let packet = acl.nextPacket() {
            outputs.append(.toController(HCIPacket.acl(packet).h4Bytes))
        }
    }

    private func failEverything(reason: HCICommandFailure) {
        for pending in outstanding.values + internalQueue + queues.values.flatMap({ $0 }) {
            if case .client(let client, let token) = pending.owner {
                outputs.append(.commandFailed(client: client, token: token, reason: reason))
            }
        }
        outstanding.removeAll()
        internalQueue.removeAll()
        for key in queues.keys { queues[key] = [] }
    }

    func setState(_ new: ControllerState) {
        if new == .poweredOn { silent = false }
        guard new != state else { return }
        state = new
        outputs.append(.stateChanged(new))
    }

    // MARK: Bring-up

    func issue(_ opcode: HCIOpcode, _ parameters: [UInt8] = []) {
        send(HCICommandPacket(opcode, parameters: parameters), owner: .host)
    }

    func issue(raw step: VendorStep) {
        outputs.append(.log("profile step: \(step.description)"))
        send(HCICommandPacket(opcode: step.opcode, parameters: step.parameters), owner: .host)
    }

    func switchBaud(_ baud: Int) { outputs.append(.switchTransportBaud(baud)) }

    func note(_ line: String) { outputs.append(.log(line)) }

    private func bringUpAnswer(opcode: UInt16, event: HCIEventPacket, isComplete: Bool) {
        guard var bringUp else { return }
        let result = bringUp.handle(opcode: opcode, event: event, isComplete: isComplete, host: self)
        self.bringUp = bringUp
        settle(result)
    }

    private func settle(_ result: BringUp.Result) {
        switch result {
        case .continuing:
            break
        case .waiting(let delay):
            bringUpResumeAt = now + delay
        case .done:
            self.bringUp = nil
            acl.configure(mtu: facts.aclMTU, buffers: quirks.maxACLBuffers.map { min($0, facts.aclBuffers) } ?? facts.aclBuffers)
            // A controller hands up ACL no longer than its own buffers, or one LE Data PDU's payload, 251 octets
            // (Core Vol 6 Part B §2.4), whichever is more.
            framer.maximumACLPayload = max(facts.aclMTU, 251)
            failedBringUps = 0
            setState(.poweredOn)
            pumpCommands()
        case .failed(let state):
            self.bringUp = nil
            // A refusal may be real (no LE) or an answer garbled on the way (H4 has no checksum): bring-up is tried
            // again a few times, still resetting as far as clients know, before the state stands.
            guard failedBringUps < Self.bringUpAttempts - 1 else {
                failedBringUps = 0
                setState(state)
                return
            }
            failedBringUps += 1
            recoveryAt = now + commandTimeout
            outputs.append(.log("bring-up failed (\(state)); trying again in \(commandTimeout) (\(failedBringUps + 1) of \(Self.bringUpAttempts))"))
        }
    }

    func learn(_ update: (inout ControllerFacts) -> Void) { update(&facts) }
}
