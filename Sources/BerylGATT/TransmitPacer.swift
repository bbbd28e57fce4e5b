/// PDUs no one answers (notifications, writes without response) are paced per link, sans-IO: hcid's queue is bounded
/// and refuses as busy when full, so each link keeps a short outbox, sends at most a few at once, retries what was
/// refused shortly after, and refuses more than the outbox holds. Who was refused hears when there is room again
/// (Core Bluetooth's updateValue returning false and peripheralManagerIsReady(toUpdateSubscribers:);
/// canSendWriteWithoutResponse and peripheralIsReady(toSendWriteWithoutResponse:)).
public struct TransmitPacer: Sendable {
    public static let capacity = 32
    public static let inFlightLimit = 8
    public static let retryDelay: Duration = .milliseconds(2)

    /// One PDU handed to the shell; it comes back with how hcid took it.
    public struct Transmission: Equatable, Sendable {
        public var link: UInt16
        public var pdu: [UInt8]
        /// Responses, indications and signalling that hcid refused while paced traffic filled its queue: they go
        /// first and are never dropped (a lost response stalls the peer's bearer for 30 s, Core Vol 3 Part F §3.3.3).
        public var urgent: Bool
        /// Its place in the order it was given in: a refused one goes back to that place, not ahead of the ones
        /// given before it.
        public var sequence: UInt64

        public init(link: UInt16, pdu: [UInt8], urgent: Bool, sequence: UInt64) {
            self.link = link
            self.pdu = pdu
            self.urgent = urgent
            self.sequence = sequence
        }
    }

    private struct Queued: Sendable {
        var sequence: UInt64
        var pdu: [UInt8]
    }

    public enum Output: Equatable, Sendable {
        case transmit(Transmission)
        /// The link has room again for the writes without response refused on it.
        case writeReady(link: UInt16)
        /// Every link has room again: the publishers whose notifications were refused may update.
        case readyToUpdate([PublisherID])
    }

    private struct Outbox: Sendable {
        var urgent: [Queued] = []
        var queued: [Queued] = []
        var inFlight = 0
        var retryAt: Duration?
        var refusedWrites = false

        var hasRoom: Bool { queued.count + inFlight < TransmitPacer.capacity }
    }

    private var outboxes: [UInt16: Outbox] = [:]
    private var notifyRefused: Set<PublisherID> = []
    private var nextSequence: UInt64 = 0

    public init() {}

    public func hasRoom(on link: UInt16) -> Bool { outboxes[link]?.hasRoom ?? true }

    public var nextDeadline: Duration? { outboxes.values.compactMap(\.retryAt).min() }

    /// A write without response that did not fit: the link says when it has room.
    public mutating func refuseWrite(on link: UInt16) { outboxes[link, default: Outbox()].refusedWrites = true }

    /// A notification that did not fit: the publisher hears when every link has room.
    public mutating func refuseNotification(from publisher: PublisherID) { notifyRefused.insert(publisher) }

    /// The publisher is gone: it is owed no readyToUpdate.
    public mutating func publisherGone(_ publisher: PublisherID) { notifyRefused.remove(publisher) }

    public mutating func enqueue(_ pdu: [UInt8], on link: UInt16) -> [Output] {
        outboxes[link, default: Outbox()].queued.append(take(pdu))
        return pump(link)
    }

    /// A PDU that is not paced, which hcid refused as busy: it goes again before paced ones.
    public mutating func retryUrgent(_ pdu: [UInt8], on link: UInt16) -> [Output] {
        outboxes[link, default: Outbox()].urgent.append(take(pdu))
        return pump(link)
    }

    private mutating func take(_ pdu: [UInt8]) -> Queued {
        nextSequence += 1
        return Queued(sequence: nextSequence, pdu: pdu)
    }

    /// How hcid took a transmission: refused as busy (it goes back to its place in the order, so several refused in a
    /// row go again as they were given, and is tried again shortly), or taken.
    public mutating func transmitted(_ transmission: Transmission, busy: Bool, at now: Duration) -> [Output] {
        let link = transmission.link
        guard var box = outboxes[link] else { return [] }
        box.inFlight -= 1
        if busy {
            let back = Queued(sequence: transmission.sequence, pdu: transmission.pdu)
            if transmission.urgent { Self.reinsert(back, into: &box.urgent) } else { Self.reinsert(back, into: &box.queued) }
            if box.retryAt == nil { box.retryAt = now + Self.retryDelay }
            outboxes[link] = box
            return []
        }
        outboxes[link] = box
        return (box.retryAt == nil ? pump(link) : []) + announceRoom(link)
    }

    /// Retries whose time has come.
    public mutating func tick(at now: Duration) -> [Output] {
        var outputs: [Output] = []
        for link in outboxes.keys.sorted() where (outboxes[link]?.retryAt).map({ $0 <= now }) == true {
            outboxes[link]?.retryAt = nil
            outputs += pump(link)
        }
        return outputs
    }

    public mutating func linkClosed(_ link: UInt16) -> [Output] {
        outboxes[link] = nil
        return readyIfAllHaveRoom()
    }

    private static func reinsert(_ refused: Queued, into queue: inout [Queued]) {
        queue.insert(refused, at: queue.firstIndex { $0.sequence > refused.sequence } ?? queue.endIndex)
    }

    private mutating func pump(_ link: UInt16) -> [Output] {
        var outputs: [Output] = []
        while var box = outboxes[link], box.inFlight < Self.inFlightLimit, !box.urgent.isEmpty || !box.queued.isEmpty {
            let urgent = !box.urgent.isEmpty
            let next = urgent ? box.urgent.removeFirst() : box.queued.removeFirst()
            box.inFlight += 1
            outboxes[link] = box
            outputs.append(.transmit(Transmission(link: link, pdu: next.pdu, urgent: urgent, sequence: next.sequence)))
        }
        return outputs
    }

    private mutating func announceRoom(_ link: UInt16) -> [Output] {
        guard let box = outboxes[link], box.hasRoom else { return [] }
        var outputs: [Output] = []
        if box.refusedWrites {
            outboxes[link]?.refusedWrites = false
            outputs.append(.writeReady(link: link))
        }
        return outputs + readyIfAllHaveRoom()
    }

    private mutating func readyIfAllHaveRoom() -> [Output] {
        guard !notifyRefused.isEmpty, outboxes.values.allSatisfy(\.hasRoom) else { return [] }
        let waiting = notifyRefused.sorted()
        notifyRefused.removeAll()
        return [.readyToUpdate(waiting)]
    }
}
