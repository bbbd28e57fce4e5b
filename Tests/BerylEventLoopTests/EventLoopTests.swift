import BerylEventLoop
import Glibc
import XCTest

final class EventLoopTests: XCTestCase {
    func testTimersFireInDeadlineOrderAndTheLoopEndsWhenNothingIsLeft() throws {
        let loop = try EventLoop()
        var fired: [Int] = []
        let clock = ContinuousClock()
        let start = clock.now
        try loop.after(.milliseconds(30)) { fired.append(30) }
        try loop.after(.milliseconds(10)) { fired.append(10) }
        try loop.after(.milliseconds(20)) { fired.append(20) }
        try loop.run()
        XCTAssertEqual(fired, [10, 20, 30])
        XCTAssertGreaterThanOrEqual(clock.now - start, .milliseconds(30))
        XCTAssertEqual(loop.registrationCount, 0, "one-shot timers let go of themselves")
    }

    // Millisecond timers run on the kernel's coarse clock, which can be a tick behind the loop's: a timer that libevent
    // fires a little early waits out the rest, since the cores behind a shell's timers do nothing before their deadline.
    func testAOneShotTimerNeverFiresBeforeItsDelayOnTheLoopsClock() throws {
        for timers in [EventLoop.TimerPrecision.milliseconds, .microseconds] {
            let loop = try EventLoop(timers: timers)
            var early: [Duration] = []
            var fired = 0
            for index in 0..<60 {
                let delay = Duration.microseconds(250 + 113 * index)
                let due = loop.uptime + delay
                try loop.after(delay) {
                    fired += 1
                    if loop.uptime < due { early.append(due - loop.uptime) }
                }
            }
            try loop.run()
            XCTAssertEqual(fired, 60, "\(timers)")
            XCTAssertEqual(early, [], "\(timers): fired this much before the delay")
        }
    }

    func testRepeatingTimerRunsUntilCancelledFromItsOwnHandler() throws {
        let loop = try EventLoop()
        var count = 0
        var timer: EventRegistration?
        timer = try loop.every(.milliseconds(2)) {
            count += 1
            if count == 5 { timer?.cancel() }
        }
        try loop.run()
        XCTAssertEqual(count, 5)
        XCTAssertEqual(timer?.isActive, false)
    }

    func testReadableWatcherDeliversWhatTheOtherEndWrote() throws {
        let loop = try EventLoop()
        var fds: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&fds), 0)
        defer { close(fds[0]); close(fds[1]) }
        var received: [UInt8] = []
        var watcher: EventRegistration?
        watcher = try loop.onReadable(fds[0]) {
            var buffer = [UInt8](repeating: 0, count: 16)
            let count = read(fds[0], &buffer, 16)
            received += buffer.prefix(max(count, 0))
            if received.count >= 6 { watcher?.cancel() }
        }
        try loop.after(.milliseconds(5)) { _ = write(fds[1], "abc", 3) }
        try loop.after(.milliseconds(10)) { _ = write(fds[1], "def", 3) }
        try loop.run()
        XCTAssertEqual(String(decoding: received, as: UTF8.self), "abcdef")
    }

    func testWritableWatcherFiresForAnEmptyPipe() throws {
        let loop = try EventLoop()
        var fds: [Int32] = [0, 0]
        XCTAssertEqual(pipe(&fds), 0)
        defer { close(fds[0]); close(fds[1]) }
        var writable = 0
        var watcher: EventRegistration?
        watcher = try loop.onWritable(fds[1]) {
            writable += 1
            watcher?.cancel()
        }
        try loop.run()
        XCTAssertEqual(writable, 1)
    }

    func testSignalIsDeliveredOnTheLoopThread() throws {
        let loop = try EventLoop()
        var caught = 0
        try loop.onSignal(SIGUSR2) {
            caught += 1
            loop.stop()
        }
        try loop.after(.milliseconds(5)) { raise(SIGUSR2) }
        try loop.run()
        XCTAssertEqual(caught, 1)
    }

    func testStopEndsRunWithWatchersStillRegistered() throws {
        let loop = try EventLoop()
        var ticks = 0
        try loop.every(.milliseconds(1)) { ticks += 1 }
        try loop.after(.milliseconds(20)) { loop.stop() }
        try loop.run()
        XCTAssertGreaterThan(ticks, 0)
        XCTAssertEqual(loop.registrationCount, 1, "the repeating timer is still live after stop")
    }

    func testCancelledTimerNeverFires() throws {
        let loop = try EventLoop()
        var fired = false
        let timer = try loop.after(.milliseconds(5)) { fired = true }
        timer.cancel()
        try loop.after(.milliseconds(15)) {}
        try loop.run()
        XCTAssertFalse(fired)
    }

    /// What batches a wake-up's output: it runs after every callback of the wake-up that scheduled it, once however often
    /// it was scheduled, inside that one pass of the loop (a zero timer would wait for the next pass).
    func testEndOfWakeUpTaskRunsOnceAfterTheWakeUpsCallbacksInTheSamePass() throws {
        let loop = try EventLoop()
        var order: [String] = []
        let task = try loop.endOfWakeUpTask { order.append("end") }
        var pipes: [[Int32]] = []
        for name in ["a", "b"] {
            var fds: [Int32] = [0, 0]
            XCTAssertEqual(pipe(&fds), 0)
            pipes.append(fds)
            try loop.onReadable(fds[0]) {
                var byte: UInt8 = 0
                _ = read(fds[0], &byte, 1)
                order.append(name)
                task.schedule()
                task.schedule()
            }
        }
        defer { for fds in pipes { close(fds[0]); close(fds[1]) } }
        for fds in pipes {
            var byte: UInt8 = 1
            XCTAssertEqual(write(fds[1], &byte, 1), 1)
        }
        loop.runOnce(wait: true)
        XCTAssertEqual(order.count, 3, "\(order)")
        XCTAssertEqual(Set(order.prefix(2)), ["a", "b"])
        XCTAssertEqual(order.last, "end")
        loop.runOnce()
        XCTAssertEqual(order.count, 3, "scheduled four times in one wake-up, it ran once")

        // Scheduled again by a later wake-up, it runs again; cancelled, never.
        var byte: UInt8 = 1
        XCTAssertEqual(write(pipes[0][1], &byte, 1), 1)
        loop.runOnce(wait: true)
        XCTAssertEqual(order.suffix(2), ["a", "end"])
        task.cancel()
        task.schedule()
        loop.runOnce()
        XCTAssertEqual(order.last, "end")
        XCTAssertEqual(order.count, 5)
    }
}
