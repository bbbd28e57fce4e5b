import BerylEventLoop
import CBerylSys
import Glibc

/// Tells the loop when a process ends, through a pidfd: readable once the process exits, whether or not it is this
/// one's child, so managerd hears of its apps' exits (and of those an earlier managerd launched) when they happen
/// rather than by looking every so often. On a kernel without pidfds (before Linux 5.3) it looks every
/// `fallbackInterval`.
public final class ProcessExitWatch {
    public let pid: Int32
    private var descriptor: Int32 = -1
    private var registration: EventRegistration?

    /// `ended` runs once, on the loop, after `pid` is gone (a child is then a zombie, to be reaped there).
    /// `usePidfd` false takes the fallback (for its test).
    public init(pid: Int32, on loop: EventLoop, usePidfd: Bool = true, fallbackInterval: Duration = .milliseconds(250),
                ended: @escaping () -> Void) throws(EventLoopError) {
        self.pid = pid
        let opened = usePidfd ? beryl_pidfd_open(pid) : -ENOSYS
        if opened >= 0 {
            descriptor = opened
            registration = try loop.onReadable(opened) { [weak self] in self?.fire(ended) }
        } else if opened == -ESRCH {
            registration = try loop.after(.zero) { [weak self] in self?.fire(ended) }
        } else {
            registration = try loop.every(fallbackInterval) { [weak self] in
                if !ProcessStats.isAlive(pid: pid) { self?.fire(ended) }
            }
        }
    }

    /// Whether it watches through a pidfd (rather than looking every so often).
    public var usesPidfd: Bool { descriptor >= 0 }

    public func cancel() {
        registration?.cancel()
        registration = nil
        if descriptor >= 0 { close(descriptor) }
        descriptor = -1
    }

    private func fire(_ ended: () -> Void) {
        cancel()
        ended()
    }

    deinit { cancel() }
}
