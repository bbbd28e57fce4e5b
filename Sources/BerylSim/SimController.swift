import BerylCore
import BerylHCI

/// Legacy advertising parameters as LE Set Advertising Parameters gives them (Core Vol 4 Part E §7.8.5).
struct AdvertisingParameters {
    var intervalMin: UInt16 = 0x0800
    var intervalMax: UInt16 = 0x0800
    /// 0 ADV_IND, 1 ADV_DIRECT_IND (high duty), 2 ADV_SCAN_IND, 3 ADV_NONCONN_IND, 4 ADV_DIRECT_IND (low duty).
    var type: UInt8 = 0
    var ownAddressType: UInt8 = 0
    var peer = DeviceAddress(.zero, type: .public)
    var channelMap: UInt8 = 0x07
    var filterPolicy: UInt8 = 0

    var isConnectable: Bool { type == 0 || type == 1 || type == 4 }
    var isScannable: Bool { type == 0 || type == 2 }
    var isDirected: Bool { type == 1 || type == 4 }
    /// LE Advertising Report event type for this PDU (ADV_IND 0x00 … ADV_NONCONN_IND 0x03).
    var reportEventType: UInt8 { type == 4 ? 1 : type }
}

struct ScanParameters {
    var active = false
    var interval: UInt16 = 0x0010
    var window: UInt16 = 0x0010
    var ownAddressType: UInt8 = 0
    var filterPolicy: UInt8 = 0
}

struct InitiatingParameters {
    var scanInterval: UInt16
    var scanWindow: UInt16
    var useFilterAcceptList: Bool
    var peer: DeviceAddress
    var ownAddressType: UInt8
    var intervalMin: UInt16
    var intervalMax: UInt16
    var latency: UInt16
    var supervisionTimeout: UInt16
}

/// One simulated LE controller: the HCI state a host sees, plus its place on the air.
public final class SimController {
    public let index: Int
    public let publicAddress: BDAddress
    public internal(set) var position: (x: Double, y: Double)
    public internal(set) var forcedOutOfRange = false
    public internal(set) var frozen = false
    public internal(set) var corruptRate = 0.0
    /// The wedged-cancel fault (Bumble 0.0.236's controller): a confirmed cancel is never completed.
    public internal(set) var wedgesConnectionCancel = false
    /// A cancel was wedged: every LE Create Connection is refused until HCI Reset.
    public internal(set) var initiationWedged = false
    /// Commands the host sent with no Num_HCI_Command_Packets credit, and ACL packets past the buffers.
    public internal(set) var commandFlowViolations = 0
    public internal(set) var aclOverflows = 0
    public internal(set) var invalidPackets = 0

    unowned let air: SimAir
    var framer = H4Framer()
    var output: [UInt8] = []
    var heldInput: [[UInt8]] = []
    var pendingCommands: [HCICommandPacket] = []

    var eventMask: UInt64 = 0x0000_1FFF_FFFF_FFFF
    var leEventMask: UInt64 = 0x1F
    var randomAddress: BDAddress?
    var advertisingParameters = AdvertisingParameters()
    var advertisingData: [UInt8] = []
    var scanResponseData: [UInt8] = []
    var advertisingEnabled = false
    var advertisingGeneration = 0
    var scanParameters = ScanParameters()
    var scanEnabled = false
    var filterDuplicates = false
    var scanStartedAt: Duration = .zero
    var reportedDuplicates: Set<[UInt8]> = []
    var initiating: InitiatingParameters?
    var initiatingStartedAt: Duration = .zero
    var filterAcceptList: [DeviceAddress] = []
    public internal(set) var suggestedDataLength: (octets: UInt16, time: UInt16) = (27, 328)
    var links: [UInt16: SimLink] = [:]
    var nextHandle: UInt16 = 0x0040
    var aclBuffersInUse = 0
    var completedSinceLastReport: [UInt16: UInt16] = [:]

    init(index: Int, publicAddress: BDAddress, air: SimAir) {
        self.index = index
        self.publicAddress = publicAddress
        self.air = air
        position = (Double(index), 0)
    }

    public var isAdvertising: Bool { advertisingEnabled }
    public var isScanning: Bool { scanEnabled }
    /// The host's scan parameters (units of 625 µs), which the background rules change.
    public var scanTiming: (interval: UInt16, window: UInt16, filterDuplicates: Bool) {
        (scanParameters.interval, scanParameters.window, filterDuplicates)
    }
    /// The host's minimum advertising interval (units of 625 µs).
    public var advertisingIntervalMin: UInt16 { advertisingParameters.intervalMin }
    public var isInitiating: Bool { initiating != nil }
    public var connectionHandles: [UInt16] { links.keys.sorted() }

    func address(forOwnType type: UInt8) -> DeviceAddress {
        if type & 0x01 == 1, let randomAddress { return DeviceAddress(randomAddress, type: .random) }
        return DeviceAddress(publicAddress, type: .public)
    }

    var advertisingAddress: DeviceAddress { address(forOwnType: advertisingParameters.ownAddressType) }

    // MARK: Host input and output

    func receiveFromHost(_ bytes: [UInt8]) {
        guard !frozen else {
            heldInput.append(bytes)
            return
        }
        var sawInvalid = false
        for item in framer.feed(bytes) {
            switch item {
            case .packet(.command(let command)):
                enqueue(command)
            case .packet(.acl(let acl)):
                receiveACL(acl)
            case .packet:
                invalidPackets += 1
            case .invalidIndicator, .implausibleLength:
                invalidPackets += 1
                sawInvalid = true
            }
        }
        // A real UART controller loses sync on garbage; it says so with a Hardware Error (code 0x01 here: framing).
        if sawInvalid { emit(EventWriter.hardwareError(code: 0x01)) }
    }

    /// Commands take `commandLatency` to run; Num_HCI_Command_Packets is 1, so a host that sends
    /// another before the previous one's Command Complete/Status is breaking flow control.
    private func enqueue(_ command: HCICommandPacket) {
        if !pendingCommands.isEmpty {
            commandFlowViolations += 1
            air.log("controller \(index): command 0x\(String(command.opcode, radix: 16)) sent without a credit")
        }
        pendingCommands.append(command)
        if pendingCommands.count == 1 { scheduleNextCommand() }
    }

    private func scheduleNextCommand() {
        air.schedule(after: air.config.commandLatency) { [weak self] in
            guard let self, !self.pendingCommands.isEmpty else { return }
            guard !self.frozen else { return }
            let command = self.pendingCommands.removeFirst()
            self.execute(command)
            if !self.pendingCommands.isEmpty { self.scheduleNextCommand() }
        }
    }

    func emit(_ event: HCIEventPacket) {
        if let code = HCIEventCode(rawValue: event.code), let bit = code.maskBit, eventMask & (1 << UInt64(bit)) == 0 { return }
        if event.code == HCIEventCode.leMeta.rawValue, let subevent = event.parameters.first,
           leEventMask & (1 << UInt64(subevent - 1)) == 0 { return }
        output += HCIPacket.event(event).h4Bytes
    }

    func emitLE(_ subevent: LESubevent, _ body: [UInt8]) { emit(EventWriter.leMeta(subevent, body)) }

    func isLEEventEnabled(_ subevent: LESubevent) -> Bool {
        eventMask & (1 << 61) != 0 && leEventMask & (1 << UInt64(subevent.rawValue - 1)) != 0
    }

    func sendACLToHost(_ packet: ACLPacket) { output += HCIPacket.acl(packet).h4Bytes }

    /// Output bytes for the host; a frozen controller holds them, a corrupting one flips some.
    func takeOutput(random: inout SimRandom) -> [UInt8] {
        guard !frozen, !output.isEmpty else { return [] }
        var bytes = output
        output.removeAll(keepingCapacity: true)
        if corruptRate > 0 {
            for index in bytes.indices where random.chance(corruptRate) {
                bytes[index] ^= UInt8(1 + random.below(255))
            }
        }
        return bytes
    }

    func thaw() {
        frozen = false
        let held = heldInput
        heldInput.removeAll()
        for bytes in held { receiveFromHost(bytes) }
        if !pendingCommands.isEmpty { scheduleNextCommand() }
    }

    // MARK: Reset

    func resetState() {
        for link in Array(links.values) { air.abandon(link, by: self) }
        links.removeAll()
        eventMask = 0x0000_1FFF_FFFF_FFFF
        leEventMask = 0x1F
        randomAddress = nil
        advertisingParameters = AdvertisingParameters()
        advertisingData = []
        scanResponseData = []
        advertisingEnabled = false
        advertisingGeneration += 1
        scanParameters = ScanParameters()
        scanEnabled = false
        reportedDuplicates.removeAll()
        initiating = nil
        initiationWedged = false
        filterAcceptList.removeAll()
        suggestedDataLength = (27, 328)
        aclBuffersInUse = 0
        completedSinceLastReport.removeAll()
    }

    func allocateHandle() -> UInt16 {
        while links[nextHandle] != nil { nextHandle = nextHandle >= 0x0EFF ? 0x0040 : nextHandle + 1 }
        let handle = nextHandle
        nextHandle = nextHandle >= 0x0EFF ? 0x0040 : nextHandle + 1
        return handle
    }

    // MARK: ACL from the host

    private func receiveACL(_ packet: ACLPacket) {
        guard let link = links[packet.handle], link.isOpen else {
            invalidPackets += 1
            air.log("controller \(index): ACL for unknown handle 0x\(String(packet.handle, radix: 16)) dropped")
            return
        }
        // LE_ACL_Data_Packet_Length and Total_Num_LE_ACL_Data_Packets bound what the host may send (Core Vol 4 Part E §4.1.1).
        guard packet.data.count <= air.config.aclBufferSize, aclBuffersInUse < air.config.aclBufferCount else {
            aclOverflows += 1
            air.log("controller \(index): ACL overflow (\(packet.data.count) bytes, \(aclBuffersInUse) buffers in use)")
            emit(EventWriter.dataBufferOverflow())
            return
        }
        aclBuffersInUse += 1
        let direction = link.direction(from: self)
        link.outstandingHostPackets[direction] += 1
        let startsMessage = packet.boundary != .continuing
        let size = max(1, link.maxOctets[direction])
        var chunks = stride(from: 0, to: packet.data.count, by: size).map { Array(packet.data[$0..<min($0 + size, packet.data.count)]) }
        if chunks.isEmpty { chunks = [[]] }
        for (position, chunk) in chunks.enumerated() {
            link.queues[direction].append(LinkPDU(startsMessage: startsMessage && position == 0, payload: chunk,
                                                  completesHostPacket: position == chunks.count - 1))
        }
        if air.config.link == .instant { air.deliverAtOnce(link) }
    }

    /// The link layer delivered the last PDU of one of this controller's host packets.
    func hostPacketDelivered(on link: SimLink) {
        aclBuffersInUse = max(0, aclBuffersInUse - 1)
        link.outstandingHostPackets[link.direction(from: self)] -= 1
        completedSinceLastReport[link.handle(at: self), default: 0] += 1
    }

    func reportCompletedPackets() {
        guard !completedSinceLastReport.isEmpty else { return }
        let counts = completedSinceLastReport.sorted { $0.key < $1.key }.map { (handle: $0.key, count: $0.value) }
        completedSinceLastReport.removeAll()
        emit(EventWriter.numberOfCompletedPackets(counts))
    }
}
