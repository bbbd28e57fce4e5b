import Foundation

/// updateValue's queue, sans-IO: values leave for managerd as soon as they are taken, without waiting for one another's
/// answers, and still reach the air in the order the app gave them. attd keeps the order (att.proto's Notify): after a
/// refusal it holds back all of this app's values until its ReadyToUpdate, and refuses one sent before the app saw the
/// latest ReadyToUpdate as "send again". So a refused value goes again first, and nothing goes past a value still on its
/// way that was sent before the latest ReadyToUpdate (it will come back "send again").
struct UpdateQueue {
    struct Update: Equatable {
        var valueHandle: UInt32
        var value: Data
        var centrals: [String]
        var indicate: Bool
    }

    /// One value to send, with the ReadyToUpdate count it was sent after.
    struct Sending: Equatable {
        var id: UInt64
        var update: Update
        var readySeen: UInt32
    }

    enum Answer: Equatable {
        case sent
        /// The stack's queue is full: it goes again after ReadyToUpdate.
        case queueFull
        /// Sent before the latest ReadyToUpdate: it goes again now.
        case sendAgain
        /// Refused for good (its service went meanwhile).
        case failed
    }

    private struct Entry {
        var id: UInt64
        var update: Update
        /// The ReadyToUpdate count it was sent after; nil while it is not on its way.
        var sentAfter: UInt32?
    }

    let limit: Int
    private var entries: [Entry] = []
    private var nextID: UInt64 = 1
    private var readySeen: UInt32 = 0
    private var waitingForReady = false
    /// updateValue said false: peripheralManagerIsReady is owed once there is room.
    private var owesReady = false

    init(limit: Int) { self.limit = limit }

    var count: Int { entries.count }

    /// Core Bluetooth's updateValue: taken (true) unless the queue is full.
    mutating func offer(_ update: Update) -> Bool {
        guard entries.count < limit else {
            owesReady = true
            return false
        }
        entries.append(Entry(id: nextID, update: update))
        nextID += 1
        return true
    }

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
            sending.append(Sending(id: entries[index].id, update: entries[index].update, readySeen: readySeen))
        }
        return sending
    }

    /// managerd's answer to value `id`; false when no value waits for it (the queue was emptied meanwhile).
    @discardableResult
    mutating func answered(_ id: UInt64, _ answer: Answer) -> Bool {
        guard let index = entries.firstIndex(where: { $0.id == id }), entries[index].sentAfter != nil else { return false }
        switch answer {
        case .sent, .failed:
            entries.remove(at: index)
        case .queueFull:
            entries[index].sentAfter = nil
            waitingForReady = true
        case .sendAgain:
            entries[index].sentAfter = nil
        }
        return true
    }

    /// attd's ReadyToUpdate for this app, with its count.
    mutating func readyToUpdate(count: UInt32) {
        readySeen = count
        waitingForReady = false
    }

    /// Whether peripheralManagerIsReady is owed now (told once).
    mutating func takeOwedReady() -> Bool {
        guard owesReady, entries.count < limit else { return false }
        owesReady = false
        return true
    }

    /// The stack dropped the services (or managerd went): queued values go, answers still owed are not waited for,
    /// and a new attd counts ReadyToUpdate from zero. A false updateValue is still owed its peripheralManagerIsReady.
    mutating func reset() {
        entries.removeAll()
        readySeen = 0
        waitingForReady = false
    }
}
