/// Which links have a peer waiting on this host's ATT layer: a request that expects a response, or an indication that
/// expects a confirmation (Core Vol 3 Part F §3.3). hcid outlives attd; when attd dies, what it was about to answer is
/// lost with it, and the peer would stall for the 30 s transaction timeout (§3.3.3) before giving up on the link
/// anyway. Knowing which links those are lets hcid end them at once instead.
///
/// Only a PDU's first fragment is looked at: the basic L2CAP header (Core Vol 3 Part A §3.1) and the ATT opcode after it.
struct ATTAnswerWatch {
    static let attChannel: UInt16 = 0x0004

    // A peer may have one request and one indication outstanding at once, each answered on its own (§3.3.2).
    private var awaitingResponse: Set<UInt16> = []
    private var awaitingConfirmation: Set<UInt16> = []

    var awaitingAnswer: Set<UInt16> { awaitingResponse.union(awaitingConfirmation) }

    /// A fragment from the controller.
    mutating func received(_ packet: ACLPacket) {
        guard packet.boundary != .continuing, let opcode = Self.attOpcode(packet.data) else { return }
        if Self.requests.contains(opcode) { awaitingResponse.insert(packet.handle) }
        if Self.indications.contains(opcode) { awaitingConfirmation.insert(packet.handle) }
    }

    /// A whole L2CAP PDU on its way to the controller (queued behind others, but no longer attd's to lose).
    mutating func sending(handle: UInt16, pdu: [UInt8]) {
        guard let opcode = Self.attOpcode(pdu) else { return }
        if Self.responses.contains(opcode) { awaitingResponse.remove(handle) }
        if opcode == Self.confirmation { awaitingConfirmation.remove(handle) }
    }

    mutating func closed(_ handle: UInt16) {
        awaitingResponse.remove(handle)
        awaitingConfirmation.remove(handle)
    }

    mutating func reset() {
        awaitingResponse.removeAll()
        awaitingConfirmation.removeAll()
    }

    private static func attOpcode(_ bytes: [UInt8]) -> UInt8? {
        guard bytes.count >= 5, UInt16(bytes[2]) | UInt16(bytes[3]) << 8 == attChannel else { return nil }
        return bytes[4]
    }

    // Core Vol 3 Part F §3.4.8: every request has a response (or Error Response); an indication, a confirmation.
    // Commands (bit 6 set, e.g. Write Command, Signed Write) and notifications are answered by nothing.
    private static let requests: Set<UInt8> = [0x02, 0x04, 0x06, 0x08, 0x0A, 0x0C, 0x0E, 0x10, 0x12, 0x16, 0x18, 0x20]
    private static let indications: Set<UInt8> = [0x1D, 0x23]  // Handle Value Indication, Multiple Handle Value Indication
    private static let responses: Set<UInt8> = [0x01, 0x03, 0x05, 0x07, 0x09, 0x0B, 0x0D, 0x0F, 0x11, 0x13, 0x17, 0x19, 0x21]
    private static let confirmation: UInt8 = 0x1E
}
