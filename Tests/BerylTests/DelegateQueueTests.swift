@testable import Beryl
import Dispatch
import Foundation
import Synchronization
import XCTest

/// A manager's delegate calls keep their order and cross to the delegate queue in as few hops as they can.
final class DelegateQueueTests: XCTestCase {
    func testCallsRunInOrderAndThoseThatWaitTogetherCrossInOneHop() {
        let queue = DispatchQueue(label: "delegate")
        let delegates = DelegateQueue(queue)
        let ran = Mutex<[Int]>([])
        queue.suspend()
        for index in 0..<100 { delegates.async { ran.withLock { $0.append(index) } } }
        XCTAssertTrue(ran.withLock { $0.isEmpty }, "nothing runs before the queue does")
        queue.resume()
        queue.sync {}
        XCTAssertEqual(ran.withLock { $0 }, Array(0..<100))
        XCTAssertEqual(delegates.hops.load(ordering: .relaxed), 1, "a hundred calls that waited together crossed once")

        // A call made by a call goes after it, in the next hop, and nothing is left behind.
        delegates.async {
            ran.withLock { $0.append(100) }
            delegates.async { ran.withLock { $0.append(102) } }
            ran.withLock { $0.append(101) }
        }
        let done = expectation(description: "drained")
        delegates.async { done.fulfill() }
        wait(for: [done], timeout: 5)
        queue.sync {}
        XCTAssertEqual(ran.withLock { Array($0.suffix(3)) }, [100, 101, 102])
    }

    /// An app sets a peripheral's delegate in a callback (didConnect, willRestoreState); an event that reached the
    /// library before that callback ran is the peripheral's too, and goes to the delegate it set, as on iOS.
    func testACallGoesToTheDelegateAnEarlierCallbackSetOnTheQueue() {
        final class Listener: Sendable {
            let heard = Mutex<[String]>([])
        }
        let queue = DispatchQueue(label: "delegate")
        let delegates = DelegateQueue(queue)
        let slot = DelegateSlot(nil)
        let listener = Listener()
        queue.suspend()
        delegates.async { slot.set(listener) }  // the app's didConnect, still waiting on the queue
        slot.call(Listener.self, on: delegates) { $0.heard.withLock { $0.append("didModifyServices") } }
        queue.resume()
        queue.sync {}
        XCTAssertEqual(listener.heard.withLock { $0 }, ["didModifyServices"])

        // And one whose delegate is gone by the time it runs reaches nobody, its `first` still running.
        let firstRan = Mutex(false)
        queue.suspend()
        slot.call(Listener.self, on: delegates, first: { firstRan.withLock { $0 = true } }) { $0.heard.withLock { $0.append("late") } }
        delegates.async { }
        slot.set(nil)
        queue.resume()
        queue.sync {}
        XCTAssertTrue(firstRan.withLock { $0 })
        XCTAssertEqual(listener.heard.withLock { $0 }, ["didModifyServices"])
    }

    func testCallsFromManyThreadsEachKeepTheirOrder() {
        let queue = DispatchQueue(label: "delegate")
        let delegates = DelegateQueue(queue)
        let ran = Mutex<[Int: [Int]]>([:])
        DispatchQueue.concurrentPerform(iterations: 4) { producer in
            for index in 0..<2_000 { delegates.async { ran.withLock { $0[producer, default: []].append(index) } } }
        }
        let done = expectation(description: "drained")
        delegates.async { done.fulfill() }
        wait(for: [done], timeout: 10)
        for producer in 0..<4 { XCTAssertEqual(ran.withLock { $0[producer] }, Array(0..<2_000)) }
    }
}
