import BerylCore

/// LE Remote Connection Parameter Request (Core Vol 4 Part E §7.7.65.6): the peripheral asks, through the Link
/// Layer's Connection Parameters Request procedure, for new parameters, and the central's host must answer (an
/// unanswered request ends the link at the LL response timeout, Core Vol 6 Part B §5.2).
public struct RemoteConnectionParameterRequest: Equatable, Sendable {
    public var handle: UInt16
    public var parameters: ConnectionParameters

    /// Nil for any other event, and for one too short to be this.
    public init?(_ event: HCIEventPacket) {
        let p = event.parameters
        guard HCIEventCode(rawValue: event.code) == .leMeta, p.count >= 11, p[0] == LESubevent.remoteConnectionParameterRequest.rawValue else {
            return nil
        }
        func u16(_ at: Int) -> UInt16 { UInt16(p[at]) | UInt16(p[at + 1]) << 8 }
        handle = u16(1) & 0x0FFF
        parameters = ConnectionParameters(intervalMin: u16(3), intervalMax: u16(5), latency: u16(7), timeout: u16(9))
    }

    public init(handle: UInt16, parameters: ConnectionParameters) {
        self.handle = handle
        self.parameters = parameters
    }

    /// The central's answer: what was asked when it is valid (as for the signalling channel's request), otherwise
    /// Unacceptable Connection Parameters (0x3B).
    public var answer: HCICommandPacket {
        var w = ByteWriter()
        w.u16(handle)
        guard parameters.isValid else {
            w.u8(0x3B)
            return HCICommandPacket(.leRemoteConnectionParameterRequestNegativeReply, parameters: w.bytes)  // §7.8.32
        }
        for value in [parameters.intervalMin, parameters.intervalMax, parameters.latency, parameters.timeout, 0, 0] { w.u16(value) }
        return HCICommandPacket(.leRemoteConnectionParameterRequestReply, parameters: w.bytes)  // §7.8.31
    }
}
