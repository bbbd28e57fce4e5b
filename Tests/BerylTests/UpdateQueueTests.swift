@testable import Beryl
import Foundation
import XCTest

/// updateValue's queue against attd's rules for an ordered sender (att.proto's Notify): values leave without waiting
/// for one another, and every value reaches the air once, in the order the app gave it, however refusals interleave.
final class UpdateQueueTests: XCTestCase {
    private func update(_ sequence: Int) -> PendingUpdate {
        PendingUpdate(valueHandle: 3, value: Data([UInt8(truncatingIfNeeded: sequence)]), centrals: [], indicate: false)
    }

    private func sequences(_ sending: [UpdateQueue.Sending]) -> [UInt8] { sending.map { $0.item.value.first! } }

    func testTakenValuesLeaveAtOnceAndAFullQueueOwesOneReady() {
        var queue = UpdateQueue(limit: 3)
        for sequence in 0..<3 { XCTAssertNotNil(queue.offer(update(sequence))) }
        XCTAssertNil(queue.offer(update(3)), "full: updateValue says false")
        let sending = queue.takeSendable()
        XCTAssertEqual(sequences(sending), [0, 1, 2])
        XCTAssertEqual(sending.map(\.readySeen), [0, 0, 0])
        XCTAssertEqual(queue.takeSendable(), [], "nothing goes twice")
        XCTAssertFalse(queue.takeOwedReady(), "no room yet")
        XCTAssertTrue(queue.answered(sending[0].id, .sent))
        XCTAssertFalse(queue.answered(sending[0].id, .sent), "answered once")
        XCTAssertTrue(queue.takeOwedReady())
        XCTAssertFalse(queue.takeOwedReady(), "told once")
    }

    /// The scripted case: two refused, then a ReadyToUpdate while three sent before it are still on their way.
    func testRefusedValuesGoAgainFirstAndNothingPassesOneSentBeforeTheReady() {
        var queue = UpdateQueue(limit: 16)
        for sequence in 0..<5 { queue.offer(update(sequence)) }
        let first = queue.takeSendable()
        queue.answered(first[0].id, .queueFull)
        queue.answered(first[1].id, .queueFull)
        XCTAssertNotNil(queue.offer(update(5)))
        XCTAssertEqual(queue.takeSendable(), [], "after a refusal nothing leaves until ReadyToUpdate")
        queue.readyToSend(count: 1)
        let again = queue.takeSendable()
        XCTAssertEqual(sequences(again), [0, 1], "the refused first; 2 is still on its way, sent before the ready")
        XCTAssertEqual(again.map(\.readySeen), [1, 1])
        queue.answered(first[2].id, .sendAgain)
        XCTAssertEqual(sequences(queue.takeSendable()), [2], "3 and 4 are still on their way from before the ready")
        queue.answered(first[3].id, .sendAgain)
        queue.answered(first[4].id, .sendAgain)
        XCTAssertEqual(sequences(queue.takeSendable()), [3, 4, 5])
    }

    /// The ready event can overtake the refusal it ends: it comes on the data channel while the refusal's answer
    /// comes through managerd (a write refused outside the app's grant went that way). No other ready follows, so the
    /// refused value goes again at once rather than waiting for ever (PipelinedWriteInstantLinkTests under load).
    func testAReadyThatOvertookItsRefusalLetsTheRefusedValueGoAtOnce() {
        var queue = UpdateQueue(limit: 16)
        for sequence in 0..<2 { queue.offer(update(sequence)) }
        let first = queue.takeSendable()
        queue.answered(first[0].id, .queueFull)
        XCTAssertEqual(queue.takeSendable(), [], "refused before any ready: it waits for one")
        queue.readyToSend(count: 1)
        queue.answered(first[1].id, .queueFull)
        XCTAssertEqual(sequences(queue.takeSendable()), [0, 1], "both go again: the ready that ended 1's refusal came first")
    }

    func testAResetDropsWhatWaitsAndIgnoresLateAnswers() {
        var queue = UpdateQueue(limit: 1)
        queue.offer(update(0))
        XCTAssertNil(queue.offer(update(1)))
        let sending = queue.takeSendable()
        queue.answered(sending[0].id, .queueFull)
        queue.readyToSend(count: 4)
        queue.reset()
        XCTAssertFalse(queue.answered(sending[0].id, .sent), "the answer of a value from before the reset")
        XCTAssertEqual(queue.count, 0)
        XCTAssertTrue(queue.takeOwedReady(), "a false updateValue is still owed its ready")
        queue.offer(update(2))
        XCTAssertEqual(queue.takeSendable().map(\.readySeen), [0], "a new attd counts from zero")
    }

    /// Randomised interleavings against a model of attd's pacer: a FIFO session each way, an outbox that drains at
    /// random, BUSY and held back after a refusal, CANCELLED for a value sent before the latest ReadyToUpdate.
    func testEveryValueReachesTheAirOnceAndInOrderUnderRandomRefusals() {
        for seed in UInt64(1)...200 {
            var random = SplitMix(seed: seed)
            var queue = UpdateQueue(limit: 16)
            var toStack: [UpdateQueue.Sending] = []
            enum FromStack { case answer(UInt64, UpdateQueue.Answer), ready(UInt32) }
            var toApp: [FromStack] = []
            var outbox = 0, heldBack = false, readySent: UInt32 = 0
            let capacity = 1 + Int(random.next() % 6)
            var aired: [Int] = []
            var next = 0
            var appWaitsForReady = false
            let total = 250
            var steps = 0
            while aired.count < total {
                steps += 1
                XCTAssertLessThan(steps, 200_000, "seed \(seed): stuck at \(aired.count) of \(total)")
                if steps >= 200_000 { return }
                switch random.next() % 4 {
                case 0 where next < total && !appWaitsForReady:
                    if queue.offer(update(next)) != nil { next += 1 } else { appWaitsForReady = true }
                    toStack += queue.takeSendable()
                case 1 where !toStack.isEmpty:
                    let sending = toStack.removeFirst()
                    if sending.readySeen < readySent {
                        toApp.append(.answer(sending.id, .sendAgain))
                    } else if heldBack || outbox >= capacity {
                        heldBack = true
                        toApp.append(.answer(sending.id, .queueFull))
                    } else {
                        outbox += 1
                        aired.append(Int(sending.item.value.first!))
                        toApp.append(.answer(sending.id, .sent))
                    }
                case 2 where outbox > 0:
                    outbox -= 1
                    if heldBack, outbox < capacity {
                        heldBack = false
                        readySent += 1
                        toApp.append(.ready(readySent))
                    }
                case 3 where !toApp.isEmpty:
                    switch toApp.removeFirst() {
                    case .answer(let id, let answer): XCTAssertTrue(queue.answered(id, answer), "seed \(seed)")
                    case .ready(let count): queue.readyToSend(count: count)
                    }
                    toStack += queue.takeSendable()
                    if queue.takeOwedReady() { appWaitsForReady = false }
                default:
                    break
                }
            }
            XCTAssertEqual(aired, aired.indices.map { UInt8(truncatingIfNeeded: $0) }.map(Int.init), "seed \(seed): aired out of order or twice")
        }
    }

    /// canSendWriteWithoutResponse is read before writing, so a write queue that fills owes peripheralIsReady even
    /// though no write was refused; an update queue owes it only after updateValue said false.
    func testAFullWriteQueueOwesItsReadyWithoutARefusedOffer() {
        let write = PendingWrite(valueHandle: 3, value: Data([1]), signed: false)
        var writes = WriteQueue(limit: 2, fullOwesReady: true)
        XCTAssertNotNil(writes.offer(write))
        XCTAssertNotNil(writes.offer(write))
        XCTAssertFalse(writes.hasRoom)
        XCTAssertFalse(writes.takeOwedReady(), "owed once there is room, not before")
        let sent = writes.takeSendable()
        XCTAssertEqual(sent.count, 2)
        writes.answered(sent[0].id, .sent)
        XCTAssertTrue(writes.takeOwedReady())
        XCTAssertFalse(writes.takeOwedReady(), "told once")

        var updates = UpdateQueue(limit: 1)
        XCTAssertNotNil(updates.offer(update(0)))
        updates.answered(updates.takeSendable()[0].id, .sent)
        XCTAssertFalse(updates.takeOwedReady(), "updateValue never said false")
    }
}

private struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

}
