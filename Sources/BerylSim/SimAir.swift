import BerylCore
import BerylHCI

public struct SimConfig: Sendable {
    /// LE_ACL_Data_Packet_Length and Total_Num_LE_ACL_Data_Packets the controllers report and enforce.
    public var aclBufferSize = 251
    public var aclBufferCount = 8
    /// Report no LE buffers (LE Read Buffer Size answers 0) so hosts must use the shared BR/EDR ones.
    public var sharedBuffers = false
    public var filterAcceptListSize = 16
    /// Time a controller takes to run one command; with one command credit, what a host must wait for.
    public var commandLatency: Duration = .microseconds(200)
    /// With the air-time model a connection event carries only as many PDUs as fit in the interval on its PHY.
    public var airTime = false
    /// How data crosses a link.
    public var link: LinkModel = .events
    /// Beyond this distance (metres) two controllers cannot hear each other.
    public var rangeMeters = 30.0

    public init() {}
}

/// How a link carries data.
public enum LinkModel: String, Sendable, CaseIterable {
    /// As a radio: queued PDUs cross at the link's connection events, and their buffers come back after each.
    case events
    /// At once: a host's packet is delivered and its buffer returned as soon as the controller takes it, so what a
    /// benchmark measures is the hosts, not the link. Link control (encryption, termination) still waits for events.
    case instant
}

/// N controllers sharing one simulated air. Sans-IO: host bytes and the current time go in, host bytes come out;
/// `nextDeadline` says when it next needs the time.
public final class SimAir {
    public let config: SimConfig
    public private(set) var controllers: [SimController] = []
    public private(set) var now: Duration = .zero
    private(set) var links: [SimLink] = []
    /// Fraction of link-layer PDUs lost on the air (then retransmitted), and extra delivery latency.
    public var dropRate = 0.0
    public var delay: Duration = .zero
    public var logger: (String) -> Void = { _ in }
    var random: SimRandom
    private var scheduler = Scheduler()
    private var nextLinkID = 1
    private var eventHooks: [Int: [() -> Void]] = [:]

    public init(controllerCount: Int, seed: UInt64, config: SimConfig = SimConfig()) {
        self.config = config
        random = SimRandom(seed: seed)
        var addressRandom = SimRandom(seed: seed &* 0x5851_F42D_4C95_7F2D)
        for index in 0..<controllerCount {
            // Deterministic public addresses from the seed; the low octet is the index, so logs read easily.
            let address = BDAddress(wire: [UInt8(truncatingIfNeeded: index)] + addressRandom.bytes(4) + [0x5A])
            controllers.append(SimController(index: index, publicAddress: address, air: self))
        }
    }

    func log(_ message: String) { logger(message) }

    // MARK: Time

    public var nextDeadline: Duration? { scheduler.nextTime }

    /// Runs everything due up to `time`.
    public func advance(to time: Duration) {
        while let (due, action) = scheduler.popDue(at: time) {
            now = max(now, due)
            action()
        }
        now = max(now, time)
    }

    func schedule(after delay: Duration, _ action: @escaping () -> Void) {
        scheduler.schedule(at: now + delay, action)
    }

    func schedule(at time: Duration, _ action: @escaping () -> Void) {
        scheduler.schedule(at: max(time, now), action)
    }

    // MARK: Host side

    public func receive(fromHost bytes: [UInt8], controller index: Int, at time: Duration) {
        advance(to: time)
        controllers[index].receiveFromHost(bytes)
    }

    public func takeOutput(controller index: Int) -> [UInt8] {
        controllers[index].takeOutput(random: &random)
    }

    // MARK: Faults and placement

    public func move(_ index: Int, x: Double, y: Double) { controllers[index].position = (x, y) }
    public func setInRange(_ index: Int, _ inRange: Bool) { controllers[index].forcedOutOfRange = !inRange }
    public func setCorruptRate(_ index: Int, _ rate: Double) { controllers[index].corruptRate = min(max(rate, 0), 1) }
    public func freeze(_ index: Int) { controllers[index].frozen = true }
    public func thaw(_ index: Int) { controllers[index].thaw() }
    public func setWedgesConnectionCancel(_ index: Int, _ wedges: Bool) { controllers[index].wedgesConnectionCancel = wedges }

    /// Puts the whole air back to its initial state: every controller as after HCI Reset, at its start position.
    public func resetAll() {
        for controller in controllers {
            controller.resetState()
            controller.position = (Double(controller.index), 0)
            controller.forcedOutOfRange = false
            controller.corruptRate = 0
            controller.wedgesConnectionCancel = false
            if controller.frozen { controller.thaw() }
        }
        for link in links where link.isOpen { close(link, centralReason: nil, peripheralReason: nil) }
        dropRate = 0
        delay = .zero
    }

    public func distance(_ a: SimController, _ b: SimController) -> Double {
        let dx = a.position.x - b.position.x
        let dy = a.position.y - b.position.y
        return (dx * dx + dy * dy).squareRoot()
    }

    public func canHear(_ a: SimController, _ b: SimController) -> Bool {
        !a.forcedOutOfRange && !b.forcedOutOfRange && !a.frozen && !b.frozen && distance(a, b) <= config.rangeMeters
    }

    /// Free-space path loss at 2.4 GHz from a 0 dBm transmitter: about -40 dBm at 1 m, 20 dB less per decade.
    func rssi(between a: SimController, and b: SimController) -> Int8 {
        let metres = max(distance(a, b), 0.1)
        var log10: Double = 0
        var value = metres
        while value >= 10 { value /= 10; log10 += 1 }
        while value < 1 { value *= 10; log10 -= 1 }
        // log10(value) for value in [1, 10) by a short series on the natural log.
        let y = (value - 1) / (value + 1)
        let ln = 2 * (y + y * y * y / 3 + y * y * y * y * y / 5 + y * y * y * y * y * y * y / 7)
        log10 += ln / 2.302585092994046
        let jitter = Double(random.below(5)) - 2
        return Int8(clamping: Int((-40 - 20 * log10 + jitter).rounded()))
    }

    // MARK: Advertising and scanning

    func startAdvertising(_ advertiser: SimController) {
        advertiser.advertisingEnabled = true
        advertiser.advertisingGeneration += 1
        let generation = advertiser.advertisingGeneration
        let started = now
        schedule(after: .microseconds(Int64(random.below(1000)))) { [weak self, weak advertiser] in
            guard let self, let advertiser else { return }
            self.advertisingEvent(advertiser, generation: generation, started: started)
        }
    }

    private func advertisingEvent(_ advertiser: SimController, generation: Int, started: Duration) {
        guard advertiser.advertisingEnabled, advertiser.advertisingGeneration == generation else { return }
        let parameters = advertiser.advertisingParameters
        // High duty cycle directed advertising lasts 1.28 s and then fails (Core Vol 6 Part B §4.4.2.4.3).
        if parameters.type == 1, now - started >= .milliseconds(1280) {
            advertiser.advertisingEnabled = false
            advertiser.advertisingGeneration += 1
            advertiser.emitConnectionComplete(status: .advertisingTimeout, handle: 0, role: 1, peer: parameters.peer,
                                              interval: 0, latency: 0, timeout: 0)
            return
        }
        if !advertiser.frozen {
            for listener in controllers where listener !== advertiser && canHear(advertiser, listener) {
                deliverAdvertisement(from: advertiser, to: listener)
                guard advertiser.advertisingEnabled else { return }  // it just got connected
            }
        }
        // advInterval plus a 0–10 ms advDelay (Core Vol 6 Part B §4.4.2.2.1); 3.75 ms apart for high duty directed.
        let next: Duration = parameters.type == 1 ? .microseconds(3750)
            : .units625us(parameters.intervalMin) + .microseconds(Int64(random.below(10_000)))
        schedule(after: next) { [weak self, weak advertiser] in
            guard let self, let advertiser else { return }
            self.advertisingEvent(advertiser, generation: generation, started: started)
        }
    }

    private func deliverAdvertisement(from advertiser: SimController, to listener: SimController) {
        let parameters = advertiser.advertisingParameters
        let source = advertiser.advertisingAddress
        if let initiating = listener.initiating {
            guard parameters.isConnectable,
                  listener.isListening(at: now, interval: initiating.scanInterval, window: initiating.scanWindow, since: listener.initiatingStartedAt)
            else { return }
            let own = listener.address(forOwnType: initiating.ownAddressType)
            if parameters.isDirected, parameters.peer.address != own.address { return }
            let wanted = initiating.useFilterAcceptList ? listener.filterAcceptList.contains(source)
                : initiating.peer.address == source.address && initiating.peer.type.isRandom == source.type.isRandom
            if wanted, advertiser.advertisingParameters.filterPolicy & 0b10 == 0 || advertiser.filterAcceptList.contains(own) {
                connect(central: listener, peripheral: advertiser, initiating: initiating, centralAddress: own)
            }
            return
        }
        guard listener.scanEnabled,
              listener.isListening(at: now, interval: listener.scanParameters.interval, window: listener.scanParameters.window,
                                   since: listener.scanStartedAt) else { return }
        if listener.scanParameters.filterPolicy & 1 == 1, !listener.filterAcceptList.contains(source) { return }
        let own = listener.address(forOwnType: listener.scanParameters.ownAddressType)
        if parameters.isDirected, parameters.peer.address != own.address { return }
        let rssi = rssi(between: advertiser, and: listener)
        listener.reportAdvertisement(eventType: parameters.reportEventType, from: source,
                                     data: parameters.isDirected ? [] : advertiser.advertisingData, rssi: rssi)
        // Only an active scanner sends SCAN_REQ, and only scannable PDUs answer with SCAN_RSP (Core Vol 6 Part B §4.4.3.2).
        if listener.scanParameters.active, parameters.isScannable,
           advertiser.advertisingParameters.filterPolicy & 0b01 == 0 || advertiser.filterAcceptList.contains(own) {
            listener.reportAdvertisement(eventType: 0x04, from: source, data: advertiser.scanResponseData, rssi: rssi)
        }
    }

    // MARK: Connections

    private func connect(central: SimController, peripheral: SimController, initiating: InitiatingParameters, centralAddress: DeviceAddress) {
        central.initiating = nil
        peripheral.advertisingEnabled = false
        peripheral.advertisingGeneration += 1
        let link = SimLink(id: nextLinkID, central: central, peripheral: peripheral,
                           centralHandle: central.allocateHandle(), peripheralHandle: peripheral.allocateHandle(),
                           interval: .units1250us(initiating.intervalMin), latency: initiating.latency,
                           supervisionTimeout: .units10ms(initiating.supervisionTimeout), now: now)
        nextLinkID += 1
        links.append(link)
        central.links[link.centralHandle] = link
        peripheral.links[link.peripheralHandle] = link
        central.emitConnectionComplete(status: .success, handle: link.centralHandle, role: 0, peer: peripheral.advertisingAddress,
                                       interval: initiating.intervalMin, latency: initiating.latency, timeout: initiating.supervisionTimeout)
        peripheral.emitConnectionComplete(status: .success, handle: link.peripheralHandle, role: 1, peer: centralAddress,
                                          interval: initiating.intervalMin, latency: initiating.latency, timeout: initiating.supervisionTimeout)
        log("link \(link.id): controller \(central.index) (central) ↔ controller \(peripheral.index) (peripheral)")
        // The link layers run the Data Length Update procedure at the first event: each sends up to its host's
        // suggested default, which the other takes up to its own maximum, 251 here (Core Vol 6 Part B §5.1.9).
        changeDataLength(link, to: [central, peripheral].map { Int($0.suggestedDataLength.octets) })
        schedule(after: link.interval) { [weak self, weak link] in
            guard let self, let link else { return }
            self.connectionEvent(link)
        }
    }

    /// Runs `action` at the link's next connection event, when the two link layers next talk.
    func atNextEvent(of link: SimLink, _ action: @escaping () -> Void) {
        eventHooks[link.id, default: []].append(action)
    }

    private func connectionEvent(_ link: SimLink) {
        guard link.isOpen else { return }
        let central = link.central
        let peripheral = link.peripheral
        guard link.deadEnd == nil, canHear(central, peripheral) else {
            if now - link.lastHeard >= link.supervisionTimeout {
                supervisionTimeout(link)
                return
            }
            scheduleNextEvent(link)
            return
        }
        link.lastHeard = now
        if let hooks = eventHooks.removeValue(forKey: link.id) {
            for hook in hooks { hook() }
            guard link.isOpen else { return }
        }
        if let (initiator, reason) = link.pendingTerminate {
            // LL_TERMINATE_IND acknowledged: the initiator's host hears 0x16, the other side the reason given.
            let local = HCIStatus.connectionTerminatedByLocalHost.rawValue
            close(link, centralReason: initiator === central ? local : reason, peripheralReason: initiator === central ? reason : local)
            return
        }
        // Data is paused while encryption starts (Core Vol 6 Part B §5.1.3.1).
        if link.pendingEncryption == nil { exchangeData(link) }
        central.reportCompletedPackets()
        peripheral.reportCompletedPackets()
        scheduleNextEvent(link)
    }

    /// The instant link: what the hosts queued crosses now, unless the link is paused (encryption starting, Core Vol 6
    /// Part B §5.1.3.1), ending or out of hearing; then it waits for the next connection event as on the radio.
    func deliverAtOnce(_ link: SimLink) {
        guard link.isOpen, link.deadEnd == nil, link.pendingEncryption == nil, link.pendingTerminate == nil,
              canHear(link.central, link.peripheral) else { return }
        exchangeData(link)
        link.central.reportCompletedPackets()
        link.peripheral.reportCompletedPackets()
    }

    private func scheduleNextEvent(_ link: SimLink) {
        schedule(after: link.interval) { [weak self, weak link] in
            guard let self, let link else { return }
            self.connectionEvent(link)
        }
    }

    /// Alternating central/peripheral PDUs within the event. A lost PDU is retransmitted; two losses in a row close the event.
    private func exchangeData(_ link: SimLink) {
        var budget = config.airTime ? link.interval.microseconds : Int64.max
        var consecutiveLosses = 0
        var sentThisEvent = 0
        while !link.queues[0].isEmpty || !link.queues[1].isEmpty {
            guard link.isOpen, sentThisEvent < 10_000 else { return }
            let lengths = [link.queues[0].first?.payload.count ?? 0, link.queues[1].first?.payload.count ?? 0]
            let cost = AirTime.pduDuration(payload: lengths[0], phy: link.phy[0], encrypted: link.encrypted).microseconds
                + AirTime.pduDuration(payload: lengths[1], phy: link.phy[1], encrypted: link.encrypted).microseconds
                + 2 * AirTime.interFrameSpace.microseconds
            guard budget >= cost else { return }
            budget -= cost
            var lost = false
            for direction in 0...1 where !link.queues[direction].isEmpty {
                if random.chance(dropRate) {
                    lost = true
                    continue
                }
                let pdu = link.queues[direction].removeFirst()
                deliver(pdu, on: link, direction: direction)
                sentThisEvent += 1
            }
            consecutiveLosses = lost ? consecutiveLosses + 1 : 0
            if consecutiveLosses >= 2 { return }
        }
    }

    private func deliver(_ pdu: LinkPDU, on link: SimLink, direction: Int) {
        let sender = direction == 0 ? link.central : link.peripheral
        let receiver = direction == 0 ? link.peripheral : link.central
        if pdu.completesHostPacket { sender.hostPacketDelivered(on: link) }
        let packet = ACLPacket(handle: link.handle(at: receiver), boundary: pdu.startsMessage ? .firstFlushable : .continuing,
                               data: pdu.payload)
        if delay == .zero {
            receiver.sendACLToHost(packet)
        } else {
            schedule(after: delay) { [weak link, weak receiver] in
                guard let link, link.isOpen, let receiver else { return }
                receiver.sendACLToHost(packet)
            }
        }
    }

    private func supervisionTimeout(_ link: SimLink) {
        let timeout = HCIStatus.connectionTimeout.rawValue
        // A host that had asked to disconnect still hears that it was its own doing.
        let local = HCIStatus.connectionTerminatedByLocalHost.rawValue
        let initiator = link.pendingTerminate?.by
        close(link, centralReason: initiator === link.central ? local : timeout,
              peripheralReason: initiator === link.peripheral ? local : timeout)
    }

    /// Ends a link; a nil reason means that side's host is not told (its controller was reset).
    func close(_ link: SimLink, centralReason: UInt8?, peripheralReason: UInt8?) {
        guard link.isOpen else { return }
        link.isOpen = false
        eventHooks.removeValue(forKey: link.id)
        links.removeAll { $0 === link }
        for (end, reason) in [(link.central, centralReason), (link.peripheral, peripheralReason)] {
            let handle = link.handle(at: end)
            guard end.links[handle] === link else { continue }
            end.links.removeValue(forKey: handle)
            // Packets the host sent on a link that is gone are flushed: their buffers come back with the disconnection.
            end.aclBuffersInUse = max(0, end.aclBuffersInUse - link.outstandingHostPackets[link.direction(from: end)])
            end.completedSinceLastReport.removeValue(forKey: handle)
            if let reason, end !== link.deadEnd { end.emit(EventWriter.disconnectionComplete(handle: handle, reason: reason)) }
        }
        log("link \(link.id) closed")
    }

    /// A controller reset with the link up: its side forgets the link at once; the peer finds out by supervision timeout.
    func abandon(_ link: SimLink, by controller: SimController) {
        let handle = link.handle(at: controller)
        controller.links.removeValue(forKey: handle)
        link.deadEnd = controller
        link.queues[link.direction(from: controller)].removeAll()
        link.outstandingHostPackets[link.direction(from: controller)] = 0
    }

    func expireEncryptionRequest(_ link: SimLink) {
        // The LL response timeout (40 s, Core Vol 6 Part B §5.2) ends a link whose peer never answers.
        let requested = link.encryptionRequestedAt
        schedule(after: .seconds(40)) { [weak self, weak link] in
            guard let self, let link, link.isOpen, link.pendingEncryption != nil, link.encryptionRequestedAt == requested else { return }
            let reason = HCIStatus.llResponseTimeout.rawValue
            self.close(link, centralReason: reason, peripheralReason: reason)
        }
    }

    func requestParameterUpdate(_ link: SimLink, from controller: SimController, intervalMin: UInt16, intervalMax: UInt16,
                                latency: UInt16, timeout: UInt16) {
        if controller === link.central {
            scheduleParameterUpdate(link, interval: intervalMin, latency: latency, timeout: timeout)
            return
        }
        // A peripheral asks through the Connection Parameters Request procedure (Core Vol 6 Part B §5.1.7).
        atNextEvent(of: link) { [weak link] in
            guard let link, link.isOpen else { return }
            let central = link.central
            guard central.isLEEventEnabled(.remoteConnectionParameterRequest) else {
                link.peripheral.emitConnectionUpdateComplete(link, status: .unsupportedRemoteFeature)
                return
            }
            link.awaitingParameterReply = true
            var body = ByteWriter()
            body.u16(link.centralHandle)
            body.u16(intervalMin)
            body.u16(intervalMax)
            body.u16(latency)
            body.u16(timeout)
            central.emitLE(.remoteConnectionParameterRequest, body.bytes)
        }
    }

    /// The new parameters take effect at an instant six connection events ahead, then both hosts hear of it.
    func scheduleParameterUpdate(_ link: SimLink, interval: UInt16, latency: UInt16, timeout: UInt16) {
        schedule(after: link.interval * 6) { [weak link] in
            guard let link, link.isOpen else { return }
            link.interval = .units1250us(interval)
            link.latency = latency
            link.supervisionTimeout = .units10ms(timeout)
            for end in [link.central, link.peripheral] where end !== link.deadEnd {
                end.emitConnectionUpdateComplete(link, status: .success)
            }
        }
    }

    /// One side's transmit octets: only its own direction changes, so both sides asking at once both take effect.
    func changeDataLength(_ link: SimLink, from controller: SimController, octets: Int) {
        let direction = link.direction(from: controller)
        changeDataLength(link) { $0[direction] = octets }
    }

    /// Octets per direction (central → peripheral first), each up to 251, agreed at the link's next event from what
    /// the link has then; both hosts hear of a change (Core Vol 4 Part E §7.7.65.7).
    private func changeDataLength(_ link: SimLink, to octets: [Int]) {
        changeDataLength(link) { $0 = octets }
    }

    private func changeDataLength(_ link: SimLink, _ change: @escaping (inout [Int]) -> Void) {
        atNextEvent(of: link) { [weak link] in
            guard let link, link.isOpen else { return }
            var wanted = link.maxOctets
            change(&wanted)
            let effective = wanted.map { min($0, 251) }
            guard link.maxOctets != effective else { return }
            link.maxOctets = effective
            for end in [link.central, link.peripheral] where end !== link.deadEnd { end.emitDataLengthChange(link) }
        }
    }
}

/// What the control socket reports about one link.
public struct SimLinkSnapshot: Sendable, Equatable {
    public var central: Int
    public var peripheral: Int
    public var interval: Duration
    public var encrypted: Bool
    public var phy: Int
    public var maxOctets: Int
}

extension SimAir {
    public var linkSnapshots: [SimLinkSnapshot] {
        links.filter(\.isOpen).map {
            SimLinkSnapshot(central: $0.central.index, peripheral: $0.peripheral.index, interval: $0.interval,
                            encrypted: $0.encrypted, phy: $0.phy[0], maxOctets: $0.maxOctets[0])
        }
    }
}
