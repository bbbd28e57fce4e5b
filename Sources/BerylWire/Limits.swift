/// The bounds every Beryl socket enforces. A peer past them is told (oversized) or dropped (not reading).
public struct IPCLimits: Sendable {
    /// Largest datagram accepted or sent; larger inbound ones get MESSAGE_TOO_LARGE.
    public var maxMessageBytes: Int
    /// A peer whose unread output passes either bound is dropped: it is not reading, and memory must not grow.
    public var maxQueuedMessages: Int
    public var maxQueuedBytes: Int
    /// Datagrams read from one peer per wake-up, so one busy peer cannot starve the others.
    public var readBudget: Int

    public init(maxMessageBytes: Int = 64 * 1024, maxQueuedMessages: Int = 4096,
                maxQueuedBytes: Int = 4 * 1024 * 1024, readBudget: Int = 64) {
        self.maxMessageBytes = maxMessageBytes
        self.maxQueuedMessages = maxQueuedMessages
        self.maxQueuedBytes = maxQueuedBytes
        self.readBudget = readBudget
    }

    public static let standard = IPCLimits()
}
