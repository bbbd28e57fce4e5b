import BerylDaemonKit
import BerylEventLoop
import Foundation
import XCTest

/// managerd hears of a launched app's exit when it happens, from the loop, without looking every so often; on a
/// kernel without pidfds it looks, and still hears once.
final class ProcessExitWatchTests: XCTestCase {
    private func runUntil(_ loop: EventLoop, timeout: Duration = .seconds(10), _ finished: () -> Bool) {
        let deadline = ContinuousClock.now + timeout
        while !finished(), ContinuousClock.now < deadline { loop.runOnce(wait: true) }
    }

    private func reaped(_ pid: Int32) -> Bool {
        let deadline = ContinuousClock.now + .seconds(5)
        while ContinuousClock.now < deadline {
            if Spawn.reap(pid) != nil { return true }
            usleep(10_000)
        }
        return false
    }

    func testAChildsExitIsHeardOnceAndItIsThenReapable() throws {
        let loop = try EventLoop()
        let pid = try Spawn.start(["/bin/sh", "-c", "sleep 0.3; exit 7"], logPath: nil)
        var heard = 0
        var reaped: ExitReason?
        let watch = try ProcessExitWatch(pid: pid, on: loop) {
            heard += 1
            reaped = Spawn.reap(pid)?.exit
        }
        XCTAssertTrue(watch.usesPidfd, "Linux 5.3 and later: these machines and the boards")
        let started = ContinuousClock.now
        runUntil(loop) { heard > 0 }
        XCTAssertEqual(heard, 1)
        XCTAssertEqual(reaped, .exit(7), "a zombie when heard: waitpid(WNOHANG) has it")
        XCTAssertGreaterThanOrEqual(ContinuousClock.now - started, .milliseconds(250), "not before it ended")
        XCTAssertFalse(watch.usesPidfd, "the descriptor is closed once heard")
        let after = try loop.after(.milliseconds(200)) {}
        runUntil(loop) { !after.isActive }
        XCTAssertEqual(heard, 1, "once")
    }

    /// An app an earlier managerd launched is not this process's child: its exit is heard all the same.
    func testAProcessThatIsNotAChildIsHeardToo() throws {
        let loop = try EventLoop()
        // The shell's child outlives the shell (which exits at once) and is adopted by init, not by this process.
        let pidFile = NSTemporaryDirectory() + "exit-watch-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: pidFile) }
        let shell = try Spawn.start(["/bin/sh", "-c", "sleep 0.5 & echo $! > \(pidFile)"], logPath: nil)
        XCTAssertTrue(reaped(shell))
        let orphan = try XCTUnwrap(Int32(((try? String(contentsOfFile: pidFile, encoding: .utf8)) ?? "").trimmingCharacters(in: .whitespacesAndNewlines)))
        var heard = false
        let watch = try ProcessExitWatch(pid: orphan, on: loop) { heard = true }
        XCTAssertTrue(ProcessStats.isAlive(pid: orphan))
        runUntil(loop) { heard }
        XCTAssertTrue(heard)
        XCTAssertFalse(ProcessStats.isAlive(pid: orphan))
        withExtendedLifetime(watch) {}
    }

    func testWithoutPidfdsItLooksAndHearsOnce() throws {
        let loop = try EventLoop()
        let pid = try Spawn.start(["/bin/sleep", "0.2"], logPath: nil)
        var heard = 0
        let watch = try ProcessExitWatch(pid: pid, on: loop, usePidfd: false, fallbackInterval: .milliseconds(20)) { heard += 1 }
        XCTAssertFalse(watch.usesPidfd)
        runUntil(loop) { heard > 0 }
        let after = try loop.after(.milliseconds(100)) {}
        runUntil(loop) { !after.isActive }
        XCTAssertEqual(heard, 1)
        XCTAssertTrue(reaped(pid))
    }

    func testAProcessAlreadyGoneIsHeardAtOnce() throws {
        let loop = try EventLoop()
        let pid = try Spawn.start(["/bin/true"], logPath: nil)
        XCTAssertTrue(reaped(pid), "reaped: the pid names no process now")
        var heard = false
        let watch = try ProcessExitWatch(pid: pid, on: loop) { heard = true }
        runUntil(loop, timeout: .seconds(2)) { heard }
        XCTAssertTrue(heard)
        withExtendedLifetime(watch) {}
    }
}
