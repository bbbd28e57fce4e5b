/// How long the supervisor waits before restarting a daemon that died: doubling from `initial` up to
/// `maximum`, and back to `initial` once an instance has stayed up for `stableAfter`. Pure, so it is unit-tested.
public struct RestartBackoff: Sendable, Equatable {
    public var initial: Duration
    public var maximum: Duration
    public var stableAfter: Duration
    public private(set) var next: Duration

    public init(initial: Duration = .milliseconds(100), maximum: Duration = .seconds(5), stableAfter: Duration = .seconds(10)) {
        self.initial = initial
        self.maximum = maximum
        self.stableAfter = stableAfter
        next = initial
    }

    /// The delay before the next start, given how long the instance that just ended ran.
    public mutating func delay(afterRunning uptime: Duration) -> Duration {
        if uptime >= stableAfter { next = initial }
        let delay = next
        next = min(next * 2, maximum)
        return delay
    }
}
