/// Host-to-controller ACL is cut to the controller's buffer size (Core Vol 4 Part E §4.1.1): how many buffers an L2CAP
/// PDU takes is what hcid schedules and what its credits count, on both sides of the socket.
public enum ACLBuffers {
    /// Buffers of `bufferSize` bytes a PDU of `length` bytes takes; an empty one still takes one.
    public static func needed(forPDUOf length: Int, bufferSize: Int) -> Int { max(1, (length + bufferSize - 1) / max(bufferSize, 1)) }
}

/// Controller buffers a client may fill with credited PDUs on one link: what hcid grants and attd spends.
public struct ACLCreditGrant: Equatable, Sendable {
    public var handle: UInt16
    public var credits: Int
    /// true: replaces what the client held on the link (the link or the client is new); false: adds to it.
    public var fresh: Bool

    public init(handle: UInt16, credits: Int, fresh: Bool) {
        self.handle = handle
        self.credits = credits
        self.fresh = fresh
    }
}
