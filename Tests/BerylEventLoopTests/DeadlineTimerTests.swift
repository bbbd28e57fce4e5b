import BerylEventLoop
import XCTest

/// The one timer a shell keeps at its core's next deadline.
final class DeadlineTimerTests: XCTestCase {
    func testTheSameDeadlineKeepsItsTimerAndANewOneReplacesIt() throws {
        let loop = try EventLoop()
        let timer = DeadlineTimer(loop: loop)
        var fired: [Duration] = []
        let first = loop.uptime + .milliseconds(40)
        timer.arm(at: first) { fired.append($0) }
        timer.arm(at: first) { _ in XCTFail("the same deadline is not armed twice") }
        XCTAssertEqual(loop.registrationCount, 1)
        let sooner = loop.uptime + .milliseconds(10)
        timer.arm(at: sooner) { fired.append($0) }
        XCTAssertEqual(loop.registrationCount, 1, "the later timer was cancelled")
        XCTAssertEqual(timer.deadline, sooner)
        try loop.run()
        XCTAssertEqual(fired.count, 1)
        XCTAssertGreaterThanOrEqual(fired[0], sooner - .milliseconds(2), "fired with the loop's time, at about the deadline")
        XCTAssertNil(timer.deadline)
    }

    func testNoDeadlineCancelsAndAFiredDeadlineCanBeArmedAgain() throws {
        let loop = try EventLoop()
        let timer = DeadlineTimer(loop: loop)
        var fired = 0
        let deadline = loop.uptime + .milliseconds(5)
        timer.arm(at: deadline) { _ in fired += 1 }
        timer.arm(at: nil) { _ in }
        XCTAssertEqual(loop.registrationCount, 0)
        try loop.run()
        XCTAssertEqual(fired, 0)
        // A core that was not due when its timer fired keeps the same deadline: the timer is armed for it again.
        timer.arm(at: deadline) { _ in fired += 1 }
        try loop.run()
        timer.arm(at: deadline) { _ in fired += 1 }
        try loop.run()
        XCTAssertEqual(fired, 2)
    }
}
