import CBerylEvent
#if canImport(Glibc)
import Glibc
#endif

public enum EventLoopError: Error, Equatable, Sendable {
    case cannotCreateBase
    case cannotCreateEvent(String)
    case dispatchFailed
}

/// One libevent `event_base`, driven on the thread that calls `run()`. Every callback runs on that
/// thread, so the state it touches needs no locks; nothing here is Sendable on purpose.
public final class EventLoop {
    fileprivate let base: OpaquePointer
    /// Keeps each live registration (and so its handler) alive while libevent holds a pointer to it.
    fileprivate var live: [ObjectIdentifier: EventRegistration] = [:]
    private let started = ContinuousClock.now

    /// How finely timers fire.
    public enum TimerPrecision: Sendable {
        /// Whole milliseconds, late rather than early: no system call of its own per pass of the loop.
        case milliseconds
        /// Microseconds, for the simulator's link layer, at a timerfd system call per pass of the loop.
        case microseconds
    }

    public init(timers: TimerPrecision = .milliseconds) throws(EventLoopError) {
        guard let base = beryl_event_base_new(timers == .microseconds ? 1 : 0) else { throw .cannotCreateBase }
        self.base = base
    }

    deinit {
        for registration in live.values { registration.release() }
        live.removeAll()
        beryl_event_base_free(base)
    }

    /// Runs until `stop()` or until nothing is registered.
    public func run() throws(EventLoopError) {
        guard beryl_event_base_dispatch(base) == 0 else { throw .dispatchFailed }
    }

    /// Runs the callbacks that are ready now, without waiting.
    public func runOnce(wait: Bool = false) {
        _ = beryl_event_base_run_once(base, wait ? 1 : 0)
    }

    /// Ends `run()` after the current callback returns.
    public func stop() {
        _ = beryl_event_base_loopbreak(base)
    }

    /// Monotonic time since the loop was created; sans-IO cores take time as such a value.
    public var uptime: Duration { ContinuousClock.now - started }

    public var registrationCount: Int { live.count }

    /// Calls `handler` each time `fd` is readable until cancelled.
    @discardableResult
    public func onReadable(_ fd: Int32, _ handler: @escaping () -> Void) throws(EventLoopError) -> EventRegistration {
        try register(fd: fd, flags: Int16(BERYL_EV_READ | BERYL_EV_PERSIST), timeout: nil, oneShot: false, handler)
    }

    /// Calls `handler` each time `fd` is writable until cancelled; cancel it once the output is drained.
    @discardableResult
    public func onWritable(_ fd: Int32, _ handler: @escaping () -> Void) throws(EventLoopError) -> EventRegistration {
        try register(fd: fd, flags: Int16(BERYL_EV_WRITE | BERYL_EV_PERSIST), timeout: nil, oneShot: false, handler)
    }

    @discardableResult
    public func after(_ delay: Duration, _ handler: @escaping () -> Void) throws(EventLoopError) -> EventRegistration {
        let registration = try register(fd: -1, flags: 0, timeout: delay, oneShot: true, handler)
        registration.due = uptime + delay
        return registration
    }

    @discardableResult
    public func every(_ interval: Duration, _ handler: @escaping () -> Void) throws(EventLoopError) -> EventRegistration {
        try register(fd: -1, flags: Int16(BERYL_EV_PERSIST), timeout: interval, oneShot: false, handler)
    }

    /// Work that runs once after the callbacks of the wake-up that scheduled it — those ready then and those they queued
    /// before it — in that same wake-up, however often it was scheduled: unlike a zero timer, it costs no timer and no
    /// second poll.
    public func endOfWakeUpTask(_ handler: @escaping () -> Void) throws(EventLoopError) -> EndOfWakeUpTask {
        let registration = EventRegistration(loop: self, oneShot: false, handler: handler)
        let context = Unmanaged.passUnretained(registration).toOpaque()
        guard let event = beryl_event_new(base, -1, 0, eventTrampoline, context) else {
            throw .cannotCreateEvent("event_new failed for an end-of-wake-up task")
        }
        registration.event = event
        live[ObjectIdentifier(registration)] = registration
        return EndOfWakeUpTask(registration)
    }

    /// Delivers `signal` on the loop's thread (libevent turns it into a readable self-pipe).
    @discardableResult
    public func onSignal(_ signal: Int32, _ handler: @escaping () -> Void) throws(EventLoopError) -> EventRegistration {
        try register(fd: signal, flags: Int16(BERYL_EV_SIGNAL | BERYL_EV_PERSIST), timeout: nil, oneShot: false, handler)
    }

    private func register(fd: Int32, flags: Int16, timeout: Duration?, oneShot: Bool,
                          _ handler: @escaping () -> Void) throws(EventLoopError) -> EventRegistration {
        let registration = EventRegistration(loop: self, oneShot: oneShot, handler: handler)
        let context = Unmanaged.passUnretained(registration).toOpaque()
        guard let event = beryl_event_new(base, fd, flags, eventTrampoline, context) else {
            throw .cannotCreateEvent("event_new failed for fd \(fd)")
        }
        registration.event = event
        guard beryl_event_add(event, timeout.map(Self.microseconds) ?? -1) == 0 else {
            beryl_event_free(event)
            throw .cannotCreateEvent("event_add failed for fd \(fd)")
        }
        live[ObjectIdentifier(registration)] = registration
        return registration
    }

    /// Rounded up, so that a timer never fires before its delay.
    fileprivate static func microseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        return max(0, seconds * 1_000_000 + (attoseconds + 999_999_999_999) / 1_000_000_000_000)
    }

    /// A one-shot timer's event fired before its time by the loop's own clock: libevent's millisecond timers run on the
    /// kernel's coarse clock, which can be a tick behind this one. It waits out the rest rather than firing early.
    fileprivate func firesEarly(_ registration: EventRegistration, event: OpaquePointer) -> Bool {
        guard let due = registration.due else { return false }
        let left = due - uptime
        guard left > .zero else { return false }
        return beryl_event_add(event, Self.microseconds(left)) == 0
    }

    fileprivate func forget(_ registration: EventRegistration) {
        live.removeValue(forKey: ObjectIdentifier(registration))
    }
}

private func eventTrampoline(_ fd: Int32, _ what: Int16, _ context: UnsafeMutableRawPointer?) {
    guard let context else { return }
    // Strong for the duration of the callback, even if the handler cancels its own registration.
    let registration = Unmanaged<EventRegistration>.fromOpaque(context).takeUnretainedValue()
    registration.fire()
}

/// See `EventLoop.endOfWakeUpTask`. Scheduling it again before it ran changes nothing; `cancel()` ends it for good.
public struct EndOfWakeUpTask {
    private let registration: EventRegistration

    fileprivate init(_ registration: EventRegistration) { self.registration = registration }

    public func schedule() {
        guard let event = registration.event else { return }
        beryl_event_activate(event)
    }

    public func cancel() { registration.cancel() }
}

/// A watcher, timer or signal handler; `cancel()` stops it. Dropping the reference does not:
/// the loop keeps it until it is cancelled (or, for one-shot timers, has fired).
public final class EventRegistration {
    fileprivate var event: OpaquePointer?
    private weak var loop: EventLoop?
    private let oneShot: Bool
    private let handler: () -> Void
    /// A one-shot timer's time on the loop's clock.
    fileprivate var due: Duration?

    fileprivate init(loop: EventLoop, oneShot: Bool, handler: @escaping () -> Void) {
        self.loop = loop
        self.oneShot = oneShot
        self.handler = handler
    }

    public var isActive: Bool { event != nil }

    public func cancel() {
        guard event != nil else { return }
        release()
        loop?.forget(self)
    }

    fileprivate func fire() {
        guard let event else { return }
        if let loop, loop.firesEarly(self, event: event) { return }
        if oneShot { cancel() }
        handler()
    }

    fileprivate func release() {
        if let event { beryl_event_free(event) }
        event = nil
    }
}
