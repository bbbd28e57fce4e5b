import BerylCore
import BerylHCI

/// One link-layer PDU waiting to cross a link.
struct LinkPDU {
    /// LLID 0b10: start of an L2CAP message; 0b01: continuation (Core Vol 6 Part B §2.4).
    var startsMessage: Bool
    var payload: [UInt8]
    /// Set on the last PDU of a host's ACL packet: delivering it frees that controller buffer.
    var completesHostPacket: Bool
}

/// A connection between two simulated controllers. Direction 0 is central → peripheral.
final class SimLink {
    let id: Int
    unowned let central: SimController
    unowned let peripheral: SimController
    var centralHandle: UInt16
    var peripheralHandle: UInt16
    var interval: Duration
    var latency: UInt16
    var supervisionTimeout: Duration
    var isOpen = true
    var lastHeard: Duration
    /// A controller that was reset or lost its end: the link lives on only until the other end times out.
    weak var deadEnd: SimController?

    var queues: [[LinkPDU]] = [[], []]
    var outstandingHostPackets = [0, 0]
    var maxOctets = [27, 27]
    var phy = [1, 1]
    var encrypted = false
    var ltk: [UInt8]?
    var pendingEncryption: (ltk: [UInt8], random: [UInt8], ediv: [UInt8])?
    var encryptionRequestedAt: Duration?
    var pendingTerminate: (by: SimController, reason: UInt8)?
    var awaitingParameterReply = false

    init(id: Int, central: SimController, peripheral: SimController, centralHandle: UInt16, peripheralHandle: UInt16,
         interval: Duration, latency: UInt16, supervisionTimeout: Duration, now: Duration) {
        self.id = id
        self.central = central
        self.peripheral = peripheral
        self.centralHandle = centralHandle
        self.peripheralHandle = peripheralHandle
        self.interval = interval
        self.latency = latency
        self.supervisionTimeout = supervisionTimeout
        lastHeard = now
    }

    func direction(from controller: SimController) -> Int { controller === central ? 0 : 1 }
    func other(than controller: SimController) -> SimController { controller === central ? peripheral : central }
    func handle(at controller: SimController) -> UInt16 { controller === central ? centralHandle : peripheralHandle }
}
