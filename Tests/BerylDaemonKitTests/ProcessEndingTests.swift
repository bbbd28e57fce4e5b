import BerylDaemonKit
import BerylEventLoop
import Foundation
import XCTest

/// How managerd ends the apps it launched (at its own stop, or an app that overran its background budget): SIGTERM,
/// then SIGKILL after the grace for what ignored it, the loop never blocked meanwhile.
final class ProcessEndingTests: XCTestCase {
    private func runUntil(_ loop: EventLoop, timeout: Duration = .seconds(10), _ finished: () -> Bool) {
        let deadline = ContinuousClock.now + timeout
        while !finished(), ContinuousClock.now < deadline { loop.runOnce(wait: true) }
    }

    func testWhatIgnoresSIGTERMIsKilledAfterTheGraceAndTheRestEndAtOnce() throws {
        let loop = try EventLoop()
        let polite = try Spawn.start(["/bin/sleep", "30"], logPath: nil)
        // Ignored signals stay ignored across exec: this sleep ignores SIGTERM.
        let stubborn = try Spawn.start(["/bin/sh", "-c", "trap '' TERM; exec sleep 30"], logPath: nil)
        var reaped: [Int32: ExitReason] = [:]
        let look = {
            for pid in [polite, stubborn] where reaped[pid] == nil { if let ended = Spawn.reap(pid) { reaped[pid] = ended.exit } }
        }
        // The shell must have run its trap before the SIGTERM, or it dies of it as the polite one does.
        Thread.sleep(forTimeInterval: 0.3)
        var killed: [Int32]?
        let started = ContinuousClock.now
        var ticks = 0
        let ticker = try loop.every(.milliseconds(20)) { ticks += 1 }
        ProcessEnding(grace: .milliseconds(600)).end([polite, stubborn], on: loop, look: look) { killed = $0 }
        runUntil(loop) { killed != nil }
        ticker.cancel()

        XCTAssertEqual(killed, [stubborn], "only the one that ignored SIGTERM needed SIGKILL")
        XCTAssertEqual(reaped[polite], .signal(SIGTERM))
        XCTAssertEqual(reaped[stubborn], .signal(SIGKILL), "reaped at the look just after the kill")
        XCTAssertGreaterThanOrEqual(ContinuousClock.now - started, .milliseconds(600), "the grace was given")
        XCTAssertGreaterThan(ticks, 10, "the loop ran its other work meanwhile")
    }

    func testNothingLeftToEndIsDoneAtOnceWithoutASignal() throws {
        let loop = try EventLoop()
        var ending = ProcessEnding(grace: .seconds(5))
        var signalled: [(Int32, Int32)] = []
        ending.signal = { signalled.append(($0, $1)) }
        ending.isAlive = { _ in false }
        var killed: [Int32]?
        ending.end([4242], on: loop, done: { killed = $0 })
        XCTAssertEqual(killed, [], "done before the loop ever ran")
        XCTAssertTrue(signalled.isEmpty)
    }
}
