import Dispatch
import Synchronization

// Core Bluetooth's confinement rule, which Beryl keeps: a manager calls its delegate, its peripherals' delegates and
// its pairing delegate only on the queue it was given (the main queue when it was given nil), one call at a time and
// in order. A delegate's state belongs to that queue: touched only there (for the main queue: from main-actor code,
// such as main.swift's top level), it needs no locks and no Sendable conformance, as in an iOS app. What a callback
// is given (dictionaries, the objects) is handed over to that queue, not shared.
//
// The library keeps the rule with the types below, on the standard library's Mutex and `sending`, so that the
// compiler checks what crosses to the delegate queue; the one thing it cannot check is the delegate itself.

/// A value moved to the delegate queue to be used there alone: taken once, on the far side.
final class Handover<Value>: Sendable {
    private let slot: Mutex<Value?>
    init(_ value: sending Value) { slot = Mutex(value) }

    /// The value, the first time; nil after.
    func take() -> sending Value? { slot.withLock { held in let value = held.take(); return value } }
}

/// The queue a manager's delegates are called on, and the one way there: work is run in the order given, and work given
/// while earlier work still waits joins it, so that the callbacks of a datagram's events (a burst of notifications,
/// say) cross to the queue in one hop rather than one each.
final class DelegateQueue: Sendable {
    let dispatchQueue: DispatchQueue
    private let waiting = Mutex<[@Sendable () -> Void]>([])
    /// How many times work crossed to the queue (one per hop, however much work it carried).
    let hops = Atomic<Int>(0)

    init(_ queue: DispatchQueue) { dispatchQueue = queue }

    func async(_ work: @escaping @Sendable () -> Void) {
        let first = waiting.withLock { waiting in
            waiting.append(work)
            return waiting.count == 1
        }
        if first { dispatchQueue.async { self.drain() } }
    }

    /// Everything given so far, in order; what is given meanwhile goes in the next hop.
    private func drain() {
        hops.add(1, ordering: .relaxed)
        let work = waiting.withLock { waiting in
            let taken = waiting
            waiting = []
            return taken
        }
        for item in work { item() }
    }
}

/// The app's delegate, held weakly from any thread and used only on the delegate queue. Core Bluetooth's rule is
/// what makes that safe, and the compiler cannot see it: an app's delegate need not be Sendable (as on iOS, where a
/// delegate's state belongs to its queue). This is the one place the library vouches for thread-safety by hand.
private struct DelegateReference: @unchecked Sendable {
    weak var object: AnyObject?
}

/// A delegate held weakly (as Core Bluetooth holds it), set from any thread, called only on the delegate queue.
final class DelegateSlot: Sendable {
    private let reference = Mutex(DelegateReference())

    init(_ object: AnyObject?) { set(object) }

    var object: AnyObject? { reference.withLock { $0 }.object }

    func set(_ object: AnyObject?) {
        let replacement = DelegateReference(object: object)
        reference.withLock { $0 = replacement }
    }

    /// Calls `body` on `queue` with the delegate the slot holds when the call runs there, if it is of the expected
    /// kind; `first` runs on the queue just before, with or without a delegate. The delegate is looked up on the queue,
    /// not when the event arrives: an app sets a peripheral's delegate in a callback (didConnect, willRestoreState), and
    /// the events that arrived before that callback ran are its peripheral's too (a Service Changed held for a relaunched
    /// app was lost that way, and the app never discovered again).
    func call<Delegate>(_ kind: Delegate.Type, on queue: DelegateQueue, first: (@Sendable () -> Void)? = nil,
                        _ body: sending @escaping (Delegate) -> Void) {
        let handed = Handover(body)
        queue.async { [self] in
            first?()
            guard let body = handed.take(), let delegate = object as? Delegate else { return }
            body(delegate)
        }
    }
}

/// An attribute object's state: read and changed under its lock from any thread.
final class Guarded<Value: Sendable>: Sendable {
    private let state: Mutex<Value>

    init(_ value: Value) { state = Mutex(value) }

    func with<T>(_ body: (inout Value) -> T) -> T { state.withLock { body(&$0) } }
}
