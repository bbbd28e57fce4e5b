/// Which L2CAP PDUs a peer is waiting on, and so go ahead of the notifications and writes without response queued on
/// their link: ATT responses and confirmations (the peer's bearer is blocked until it has them, Core Vol 3 Part F
/// §3.3.2–3.3.3), SMP (a pairing times out in 30 s, Vol 3 Part H §3.4) and LE signalling (Vol 3 Part A §4).
/// ATT requests, commands, notifications and indications keep their place in the link's order.
public enum ACLUrgency {
    static let attChannel: UInt16 = 0x0004
    static let signallingChannel: UInt16 = 0x0005
    static let securityChannel: UInt16 = 0x0006

    /// ATT opcodes a peer's request or indication waits for (Vol 3 Part F §3.4.8).
    static let answers: Set<UInt8> = [
        0x01,  // Error Response
        0x03, 0x05, 0x07, 0x09, 0x0B, 0x0D, 0x0F, 0x11, 0x13, 0x17, 0x19,  // the responses to requests 0x02…0x18
        0x1E,  // Handle Value Confirmation
        0x21,  // Read Multiple Variable Response
    ]

    /// `pdu` is a whole L2CAP basic-frame PDU: length, channel, payload (Vol 3 Part A §3.1).
    public static func isAnswer(_ pdu: [UInt8]) -> Bool {
        guard pdu.count >= 5 else { return false }
        let channel = UInt16(pdu[2]) | UInt16(pdu[3]) << 8
        switch channel {
        case signallingChannel, securityChannel: return true
        case attChannel: return answers.contains(pdu[4])
        default: return false
        }
    }
}
