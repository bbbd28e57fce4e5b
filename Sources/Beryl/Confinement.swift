import Dispatch
import Synchronization

// Core Bluetooth's confinement rule, which Beryl keeps: a manager calls its delegate, its peripherals' delegates and
// its pairing delegate only on the queue it was given (the main queue when it was given nil), one call at a time and
// in order. A delegate's state belongs to that queue: touched only there (for the main queue: from main-actor code,
// such as main.swift's top level), it needs no locks and no Sendable conformance, as in an iOS app. What a callback
// is given (dictionaries, the objects) is handed over to that queue, not shared.
//
// The library enforces the rule on its side with the two types below; they are the only places it vouches for
// thread-safety by hand, and they hold nothing but references it then uses only on the delegate queue.

/// A value moved to the delegate queue to be used there alone.
struct Handover<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}

/// A delegate held weakly (as Core Bluetooth holds it), set from any thread, called only on the delegate queue.
final class DelegateSlot: Sendable {
    private struct Reference { weak var object: AnyObject? }
    private let reference = Mutex(Handover(Reference()))

    init(_ object: AnyObject?) { set(object) }

    var object: AnyObject? { reference.withLock { $0.value.object } }

    func set(_ object: AnyObject?) {
        let handed = Handover(Reference(object: object))
        reference.withLock { $0 = handed }
    }

    /// Calls `body` with the delegate on `queue`, if there is one and it is of the expected kind.
    func call<Delegate>(_ kind: Delegate.Type, on queue: DispatchQueue, _ body: @escaping (Delegate) -> Void) {
        guard let delegate = object as? Delegate else { return }
        let call = Handover((delegate, body))
        queue.async { call.value.1(call.value.0) }
    }
}

/// An attribute object's state (which holds weak references and `Any` values): read and changed under its lock
/// from any thread.
final class Guarded<Value>: Sendable {
    private let state: Mutex<Handover<Value>>

    init(_ value: Value) { state = Mutex(Handover(value)) }

    func with<T>(_ body: (inout Value) -> T) -> T {
        state.withLock { handed in
            var value = handed.value
            defer { handed = Handover(value) }
            return body(&value)
        }
    }
}
