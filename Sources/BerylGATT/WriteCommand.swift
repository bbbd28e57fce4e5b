/// How a client's write without response goes out, before anything is sent: as a Write Command, or signed (Core Vol
/// 3 Part F §3.4.5.3, §3.4.5.4), and what refuses it.
public enum WriteCommand: Equatable, Sendable {
    case plain
    /// Signed with the bond's CSRK: asked for on a link that is not encrypted. On an encrypted link a plain command
    /// is sent instead (Core Vol 3 Part G §4.9.2).
    case signed

    public enum Refusal: Error, Equatable, Sendable, CustomStringConvertible {
        /// One PDU carries at most ATT_MTU - 3 bytes of value; a signed one, ATT_MTU - 15 (opcode, handle, signature).
        case tooLong(maximum: Int, signed: Bool)
        /// The link's unsent writes are capped: the app hears when there is room again.
        case queueFull

        public var description: String {
            switch self {
            case .tooLong(let maximum, false): "a write without response carries at most ATT_MTU-3 = \(maximum) bytes"
            case .tooLong(let maximum, true): "a signed write carries at most ATT_MTU-15 = \(maximum) bytes"
            case .queueFull: "the link's transmit queue is full; wait for GattWriteReady"
            }
        }
    }

    public static func plan(length: Int, mtu: UInt16, signedAsked: Bool, encrypted: Bool, hasRoom: Bool) -> Result<WriteCommand, Refusal> {
        guard length <= Int(mtu) - 3 else { return .failure(.tooLong(maximum: Int(mtu) - 3, signed: false)) }
        guard hasRoom else { return .failure(.queueFull) }
        guard signedAsked, !encrypted else { return .success(.plain) }
        guard length <= Int(mtu) - 15 else { return .failure(.tooLong(maximum: Int(mtu) - 15, signed: true)) }
        return .success(.signed)
    }
}
