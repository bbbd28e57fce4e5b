import BerylDaemonKit
import BerylSupervisor
import Foundation
import XCTest

final class ScratchTests: XCTestCase {
    /// A process that dies before its socket answers is reported at once with how it ended and its log, not after the
    /// ten seconds a slow start is given.
    func testAProcessThatExitsBeforeServingIsATypedErrorWithItsLog() throws {
        let scratch = try Scratch()
        defer { scratch.stopAll() }
        let started = ContinuousClock.now
        XCTAssertThrowsError(try scratch.start("dies", ["/bin/sh", "-c", "echo 'no controller here' >&2; exit 3"])) { error in
            guard case .supervisorExited(let reason, let log)? = error as? StackError else { return XCTFail("\(error)") }
            XCTAssertEqual(reason, .exit(3))
            XCTAssertTrue(log.contains("no controller here"), log)
        }
        XCTAssertLessThan(ContinuousClock.now - started, .seconds(5))
    }

    func testStopAllEndsWhatItStartedAndRemovesItsDirectory() throws {
        let scratch = try Scratch()
        // berylsim stands in for a daemon: its control socket answers a ping, as every daemon's does.
        try scratch.start("server", [Executables.path("berylsim"), "--dir", scratch.root], socket: scratch.root + "/control.sock")
        let pid = try XCTUnwrap(scratch.pid(of: "server"))
        XCTAssertTrue(ProcessStats.isAlive(pid: pid))
        scratch.stopAll()
        XCTAssertFalse(ProcessStats.isAlive(pid: pid), "stopped by its pid")
        XCTAssertFalse(FileManager.default.fileExists(atPath: scratch.root))
        XCTAssertNil(scratch.pid(of: "server"))
    }

    func testEventuallyWaitsForAConditionAndGivesUpAtItsTimeout() {
        var polls = 0
        XCTAssertTrue(eventually(.seconds(2)) { polls += 1; return polls >= 3 })
        XCTAssertFalse(eventually(.milliseconds(100)) { false })
    }
}
