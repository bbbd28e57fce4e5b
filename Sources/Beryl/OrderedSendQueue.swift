import BerylWire
import Foundation

/// What updateValue and writes without response hand the stack, sans-IO: each leaves for managerd as soon as it is
/// taken, without waiting for one another's answers, and still reaches the air in the order the app gave them. attd
/// keeps the order (att.proto's Notify and GattWrite): after a refusal it holds back all of this app's items until
/// its ready event (ReadyToUpdate, GattWriteReady), and refuses one sent before the app saw the latest ready as "send
/// again". So a refused item goes again first, and nothing goes past an item still on its way that was sent before
/// the latest ready (it will come back "send again").
struct OrderedSendQueue<Item: Equatable & Sendable> {
    /// One item to send, with the ready count it was sent after.
    struct Sending: Equatable, Sendable {
        var id: UInt64
        var item: Item
        var readySeen: UInt32
    }

    enum Answer: Equatable {
        case sent
        /// The stack's queue is full: it goes again after the ready event.
        case queueFull
        /// Sent before the latest ready event: it goes again now.
        case sendAgain
        /// Refused for good (its service or link went meanwhile).
        case failed
    }

    private struct Entry {
        var id: UInt64
        var item: Item
        /// The ready count it was sent after; nil while it is not on its way.
        var sentAfter: UInt32?
    }

    let limit: Int
    private var entries: [Entry] = []
    private var nextID: UInt64 = 1
    private var readySeen: UInt32 = 0
    private var waitingForReady = false
    /// The app was told false: its ready callback is owed once there is room.
    private var owesReady = false

    /// Whether a full queue owes the ready callback even when nothing was refused: canSendWriteWithoutResponse is read
    /// before writing, so its false is the app's "told false"; updateValue's false is a refused offer.
    private let fullOwesReady: Bool

    init(limit: Int, fullOwesReady: Bool = false) {
        self.limit = limit
        self.fullOwesReady = fullOwesReady
    }

    var count: Int { entries.count }

    /// Taken (its id, which its answer names) unless the queue is full (nil), as Core Bluetooth's updateValue and
    /// canSendWriteWithoutResponse say.
    @discardableResult
    mutating func offer(_ item: Item) -> UInt64? {
        guard hasRoom else {
            owesReady = true
            return nil
        }
        defer { nextID += 1 }
        entries.append(Entry(id: nextID, item: item))
        if fullOwesReady, !hasRoom { owesReady = true }
        return nextID
    }

    var hasRoom: Bool { entries.count < limit }

    /// What may leave now, in order.
    mutating func takeSendable() -> [Sending] {
        var sending: [Sending] = []
        for index in entries.indices {
            if let sentAfter = entries[index].sentAfter {
                // It will come back "send again"; what follows it must not land first.
                if sentAfter != readySeen { break }
                continue
            }
            if waitingForReady { break }
            entries[index].sentAfter = readySeen
            sending.append(Sending(id: entries[index].id, item: entries[index].item, readySeen: readySeen))
        }
        return sending
    }

    /// managerd's answer to item `id`; false when no item waits for it (the queue was emptied meanwhile).
    @discardableResult
    mutating func answered(_ id: UInt64, _ answer: Answer) -> Bool {
        guard let index = entries.firstIndex(where: { $0.id == id }), entries[index].sentAfter != nil else { return false }
        switch answer {
        case .sent, .failed:
            entries.remove(at: index)
        case .queueFull:
            // attd refuses with BUSY only an item sent after its latest ready, so a later ready seen already was sent
            // after this refusal and ends it: it overtook this answer (on the data channel while the answer came
            // through managerd), and no other follows. The item goes again now.
            let readyCameFirst = entries[index].sentAfter != readySeen
            entries[index].sentAfter = nil
            if !readyCameFirst { waitingForReady = true }
        case .sendAgain:
            entries[index].sentAfter = nil
        }
        return true
    }

    /// attd's ready event for this app, with its count (0: a new attd, counting afresh).
    mutating func readyToSend(count: UInt32) {
        readySeen = count
        waitingForReady = false
    }

    /// Whether peripheralManagerIsReady is owed now (told once).
    mutating func takeOwedReady() -> Bool {
        guard owesReady, hasRoom else { return false }
        owesReady = false
        return true
    }

    /// The stack dropped what the items were for (the services, the link, or managerd went): queued items go, answers
    /// still owed are not waited for, and a new attd counts from zero. An app told false is still owed its ready callback.
    mutating func reset() {
        entries.removeAll()
        readySeen = 0
        waitingForReady = false
    }
}

extension OrderedSendQueue.Answer {
    /// managerd's answer to one item: sent, refused for a full queue, to send again, or failed for good.
    init(_ result: Result<Response, BerylError>, sent: (Response) -> Bool, sendAgain: (Response) -> Bool) {
        switch result {
        case .success(let response) where sent(response): self = .sent
        case .success(let response) where sendAgain(response): self = .sendAgain
        case .success: self = .queueFull
        case .failure: self = .failed
        }
    }
}

/// One updateValue: the value for the centrals subscribed to it (all when none is named).
struct PendingUpdate: Equatable, Sendable {
    var valueHandle: UInt32
    var value: Data
    var centrals: [String]
    var indicate: Bool
}

/// One write without response to a peripheral's characteristic.
struct PendingWrite: Equatable, Sendable {
    var valueHandle: UInt32
    var value: Data
    var signed: Bool
}

typealias UpdateQueue = OrderedSendQueue<PendingUpdate>
typealias WriteQueue = OrderedSendQueue<PendingWrite>
