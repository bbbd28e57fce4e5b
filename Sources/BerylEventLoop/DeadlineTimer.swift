/// One timer kept at a sans-IO core's next deadline (its `nextDeadline`, in the loop's `uptime`): armed again only when
/// the deadline changes, so a core whose deadline moves often costs no timer churn. The handler gets the loop's time;
/// the caller then arms it at the core's next deadline, so a timer that fires a hair early (libevent's cached clock)
/// finds the core not yet due and is simply armed again for the same deadline.
public final class DeadlineTimer {
    private unowned let loop: EventLoop
    private var registration: EventRegistration?
    private var armedFor: Duration?

    public init(loop: EventLoop) { self.loop = loop }

    public var deadline: Duration? { registration == nil ? nil : armedFor }

    /// Keeps one timer at `deadline` (none for nil) that calls `fire` with the time then.
    public func arm(at deadline: Duration?, _ fire: @escaping (Duration) -> Void) {
        guard deadline != armedFor || (deadline != nil && registration == nil) else { return }
        registration?.cancel()
        registration = nil
        armedFor = deadline
        guard let deadline else { return }
        registration = try? loop.after(max(.zero, deadline - loop.uptime)) { [unowned self] in
            registration = nil
            armedFor = nil
            fire(loop.uptime)
        }
    }
}
