import BerylEventLoop
import Glibc

/// Ends processes as a system ends an app: SIGTERM, a grace in which they may finish, then SIGKILL for those still
/// alive. Driven by the daemon's loop, which it never blocks.
public struct ProcessEnding {
    public let grace: Duration
    public let interval: Duration
    /// Whether a pid still runs (a zombie does not); a seam for tests.
    public var isAlive: (Int32) -> Bool = { ProcessStats.isAlive(pid: $0) }
    /// How a signal is sent; a seam for tests.
    public var signal: (Int32, Int32) -> Void = { _ = kill($0, $1) }

    public init(grace: Duration, checkingEvery interval: Duration = .milliseconds(50)) {
        self.grace = grace
        self.interval = interval
    }

    /// Sends SIGTERM to `pids` and looks every interval: `look` first (where a parent reaps its children, so that they
    /// stop being zombies), then whether any is alive. `done` runs once all are gone, or just after the SIGKILL, with
    /// the pids that had to be killed.
    public func end(_ pids: [Int32], on loop: EventLoop, look: @escaping () -> Void = {}, done: @escaping (_ killed: [Int32]) -> Void = { _ in }) {
        let targets = pids.filter(isAlive)
        for pid in targets { signal(pid, SIGTERM) }
        let deadline = loop.uptime + grace
        func check() {
            look()
            let left = targets.filter(isAlive)
            if left.isEmpty { return done([]) }
            if loop.uptime >= deadline {
                for pid in left { signal(pid, SIGKILL) }
                // Reaped at one more look, on the loop rather than waited for on it.
                _ = try? loop.after(interval) {
                    look()
                    done(left)
                }
                return
            }
            _ = try? loop.after(interval) { check() }
        }
        check()
    }
}
