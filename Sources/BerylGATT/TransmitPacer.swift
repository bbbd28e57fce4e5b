import BerylCore

/// PDUs no one answers (notifications, writes without response) are paced per link, sans-IO, under the credits hcid
/// grants: each link sends while its credits cover the next PDU's fragments and keeps the rest, in order, in a short
/// outbox; more than the outbox holds is refused. Who was refused hears when there is room again (Core Bluetooth's
/// updateValue returning false and peripheralManagerIsReady(toUpdateSubscribers:); canSendWriteWithoutResponse and
/// peripheralIsReady(toSendWriteWithoutResponse:)). Nothing is sent past the credits, so hcid never refuses one, and
/// nothing is reordered or retried.
public struct TransmitPacer: Sendable {
    /// PDUs a link keeps here while it waits for credits.
    public static let capacity = 32

    /// One PDU handed to the shell for hcid's credited lane.
    public struct Transmission: Equatable, Sendable {
        public var link: UInt16
        public var pdu: [UInt8]

        public init(link: UInt16, pdu: [UInt8]) {
            self.link = link
            self.pdu = pdu
        }
    }

    public enum Output: Equatable, Sendable {
        case transmit(Transmission)
        /// The link has room again for the senders whose writes without response it refused.
        case writeReady(link: UInt16, [ReadyNotice])
        /// Every link has room again: the publishers whose notifications were refused may update.
        case readyToUpdate([ReadyNotice])
    }

    /// A sender's ReadyToUpdate, counted: an ordered sender echoes the count it last saw.
    public struct ReadyNotice: Equatable, Sendable {
        public var sender: UpdateSender
        public var count: UInt32

        public init(sender: UpdateSender, count: UInt32) {
            self.sender = sender
            self.count = count
        }
    }

    public typealias Grant = ACLCreditGrant

    private struct Outbox: Sendable {
        var queued: [[UInt8]] = []
        var head = 0
        var credits = 0
        /// Writes without response refused here, and the GattWriteReady counts.
        var writes = ReadyLedger()

        var waiting: Int { queued.count - head }
        var hasRoom: Bool { waiting < TransmitPacer.capacity }

        mutating func popFirst() -> [UInt8] {
            let pdu = queued[head]
            head += 1
            if head == queued.count {
                queued.removeAll(keepingCapacity: true)
                head = 0
            }
            return pdu
        }
    }

    private var outboxes: [UInt16: Outbox] = [:]
    /// Senders refused because a link's indication backlog was full, and those links: such a sender's ReadyToUpdate
    /// waits for a confirmation to make room there too (one peer slow to confirm holds back only who indicates to it).
    private var indicationWaits: [UpdateSender: Set<UInt16>] = [:]
    /// Notifications (and backlogged indications) refused, and the ReadyToUpdate counts.
    private var notifications = ReadyLedger()
    /// The controller's ACL buffer size, which prices a PDU in buffers.
    private var bufferSize = 27

    public init() {}

    public func hasRoom(on link: UInt16) -> Bool { outboxes[link]?.hasRoom ?? true }

    /// Controller buffers the link may still fill.
    public func credits(on link: UInt16) -> Int { outboxes[link]?.credits ?? 0 }

    /// A write without response that did not fit: the sender hears when the link has room.
    public mutating func refuseWrite(from sender: UpdateSender, on link: UInt16) {
        outboxes[link, default: Outbox()].writes.refuse(sender)
    }

    /// Whether a sender's writes on the link wait for its GattWriteReady (one was refused since the last).
    public func holdsBackWrites(from sender: UpdateSender, on link: UInt16) -> Bool {
        outboxes[link]?.writes.holdsBack(sender) ?? false
    }

    /// As `sentBeforeReady`, for a write without response on one link.
    public func writeSentBeforeReady(_ sender: UpdateSender, on link: UInt16, readySeen: UInt32) -> UInt32? {
        outboxes[link]?.writes.sentBeforeReady(sender, readySeen: readySeen)
    }

    /// A notification that did not fit: the sender hears when every link has room.
    public mutating func refuseNotification(from sender: UpdateSender) { notifications.refuse(sender) }

    /// Whether a sender is owed a ReadyToUpdate: everything it sends after a refusal waits for it.
    public func holdsBack(_ sender: UpdateSender) -> Bool { notifications.holdsBack(sender) }

    /// For an ordered sender that sent a notification before it saw the last ReadyToUpdate it was sent: that one's
    /// count (it sends the value again; no other ReadyToUpdate follows). Nil when the notification is current.
    public func sentBeforeReady(_ sender: UpdateSender, readySeen: UInt32) -> UInt32? {
        notifications.sentBeforeReady(sender, readySeen: readySeen)
    }

    /// The publisher is gone, and everyone it sent for but `kept` (apps whose data channels outlive it): none is owed a
    /// ReadyToUpdate.
    public mutating func publisherGone(_ publisher: PublisherID, keeping kept: Set<UpdateSender> = []) {
        let gone: (UpdateSender) -> Bool = { $0.publisher == publisher && !kept.contains($0) }
        notifications.forget(where: gone)
        indicationWaits = indicationWaits.filter { !gone($0.key) }
        for link in outboxes.keys { outboxes[link]?.writes.forget(where: gone) }
    }

    /// A sender known by a new name (its app's channel adopted by a restarted publisher): what it is owed and how many
    /// ready events it was sent carry over, so that its next ready count follows the last it saw.
    public mutating func rebind(_ old: UpdateSender, to new: UpdateSender) {
        notifications.rebind(old, to: new)
        if let waits = indicationWaits.removeValue(forKey: old) { indicationWaits[new] = waits }
        for link in outboxes.keys { outboxes[link]?.writes.rebind(old, to: new) }
    }

    /// One sender let go of one link (the link stays for others): its writes there count afresh.
    public mutating func writeSenderGone(_ sender: UpdateSender, on link: UInt16) {
        outboxes[link]?.writes.forget { $0 == sender }
    }

    /// One sender a publisher sent for is gone (an app whose session with managerd ended).
    public mutating func senderGone(_ sender: UpdateSender) {
        notifications.forget { $0 == sender }
        indicationWaits[sender] = nil
        for link in outboxes.keys { outboxes[link]?.writes.forget { $0 == sender } }
    }

    public mutating func enqueue(_ pdu: [UInt8], on link: UInt16) -> [Output] {
        outboxes[link, default: Outbox()].queued.append(pdu)
        return pump(link)
    }

    /// Credits from hcid: what they let out goes, in order, and who waited for room hears of it.
    public mutating func credited(_ grants: [Grant], bufferSize: Int) -> [Output] {
        self.bufferSize = max(bufferSize, 1)
        var outputs: [Output] = []
        for grant in grants {
            var box = outboxes[grant.handle, default: Outbox()]
            box.credits = grant.fresh ? grant.credits : box.credits + grant.credits
            outboxes[grant.handle] = box
            outputs += pump(grant.handle) + announceRoom(grant.handle)
        }
        return outputs
    }

    /// hcid went away: no credit is left; its successor grants afresh.
    public mutating func hcidGone() {
        for link in outboxes.keys { outboxes[link]?.credits = 0 }
    }

    /// An indication refused because these links' backlogs were full.
    public mutating func refuseIndication(from sender: UpdateSender, backloggedOn links: [UInt16]) {
        refuseNotification(from: sender)
        indicationWaits[sender, default: []].formUnion(links)
    }

    /// The peer confirmed an indication on the link; `hasRoom`: its backlog has room now.
    public mutating func indicationConfirmed(on link: UInt16, hasRoom: Bool) -> [Output] {
        guard hasRoom, indicationWaits.values.contains(where: { $0.contains(link) }) else { return [] }
        indicationRoom(on: link)
        return readyIfAllHaveRoom()
    }

    public mutating func linkClosed(_ link: UInt16) -> [Output] {
        outboxes[link] = nil
        indicationRoom(on: link)
        return readyIfAllHaveRoom()
    }

    private mutating func indicationRoom(on link: UInt16) {
        for sender in indicationWaits.keys { indicationWaits[sender]?.remove(link) }
        indicationWaits = indicationWaits.filter { !$0.value.isEmpty }
    }

    private func cost(_ pdu: [UInt8]) -> Int { ACLBuffers.needed(forPDUOf: pdu.count, bufferSize: bufferSize) }

    private mutating func pump(_ link: UInt16) -> [Output] {
        guard var box = outboxes[link] else { return [] }
        var outputs: [Output] = []
        while box.waiting > 0, cost(box.queued[box.head]) <= box.credits {
            let pdu = box.popFirst()
            box.credits -= cost(pdu)
            outputs.append(.transmit(Transmission(link: link, pdu: pdu)))
        }
        outboxes[link] = box
        return outputs
    }

    private mutating func announceRoom(_ link: UInt16) -> [Output] {
        guard outboxes[link]?.hasRoom == true else { return [] }
        let notices = outboxes[link]?.writes.ready { _ in true } ?? []
        return (notices.isEmpty ? [] : [.writeReady(link: link, notices)]) + readyIfAllHaveRoom()
    }

    private mutating func readyIfAllHaveRoom() -> [Output] {
        guard outboxes.values.allSatisfy(\.hasRoom) else { return [] }
        let notices = notifications.ready { indicationWaits[$0] == nil }
        return notices.isEmpty ? [] : [.readyToUpdate(notices)]
    }
}

/// One kind of refusal's book: who was refused and is owed a ready event, and how many ready events each was sent.
/// A refused sender is held back until its ready; an ordered sender's item sent before its latest ready is told to
/// send it again (the counts let it tell).
struct ReadyLedger: Sendable {
    private var refused: Set<UpdateSender> = []
    private var sent: [UpdateSender: UInt32] = [:]

    mutating func refuse(_ sender: UpdateSender) { refused.insert(sender) }

    func holdsBack(_ sender: UpdateSender) -> Bool { refused.contains(sender) }

    /// The latest ready count when `readySeen` is behind it; nil when the sender's item is current.
    func sentBeforeReady(_ sender: UpdateSender, readySeen: UInt32) -> UInt32? {
        let latest = sent[sender] ?? 0
        return readySeen < latest ? latest : nil
    }

    /// The ready events now owed to the refused senders `may` lets go, in sender order, each counted.
    mutating func ready(_ may: (UpdateSender) -> Bool) -> [TransmitPacer.ReadyNotice] {
        let going = refused.filter(may).sorted()
        refused.subtract(going)
        return going.map { sender in
            let count = (sent[sender] ?? 0) + 1
            sent[sender] = count
            return TransmitPacer.ReadyNotice(sender: sender, count: count)
        }
    }

    mutating func forget(where gone: (UpdateSender) -> Bool) {
        refused = refused.filter { !gone($0) }
        sent = sent.filter { !gone($0.key) }
    }

    mutating func rebind(_ old: UpdateSender, to new: UpdateSender) {
        if refused.remove(old) != nil { refused.insert(new) }
        if let count = sent.removeValue(forKey: old) { sent[new] = count }
    }
}

/// Who a notification is from, for refusals and ReadyToUpdate: a publisher's session, and whom it sends for (managerd
/// sends for each of its apps, so one app's full queue never holds back another's; 0: the publisher itself).
public struct UpdateSender: Hashable, Comparable, Sendable, ExpressibleByIntegerLiteral {
    public var publisher: PublisherID
    public var onBehalfOf: UInt64

    public init(publisher: PublisherID, onBehalfOf: UInt64 = 0) {
        self.publisher = publisher
        self.onBehalfOf = onBehalfOf
    }

    public init(integerLiteral publisher: UInt64) { self.init(publisher: publisher) }

    public static func < (lhs: UpdateSender, rhs: UpdateSender) -> Bool {
        (lhs.publisher, lhs.onBehalfOf) < (rhs.publisher, rhs.onBehalfOf)
    }
}
