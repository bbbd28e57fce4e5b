import BerylDaemonKit
import Glibc
import XCTest

final class ProcessStatsTests: XCTestCase {
    /// The benchmarks divide a few hundred reads' CPU among them: the figure must resolve milliseconds, not /proc's
    /// 10-ms ticks (which read a 2-ms burn as 0 or 10 ms).
    func testCPUTimeResolvesAFewMillisecondsOfWork() throws {
        let before = try XCTUnwrap(ProcessStats.cpuTime(pid: getpid()))
        var thread = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &thread)
        let start = Duration.seconds(thread.tv_sec) + .nanoseconds(thread.tv_nsec)
        var spin: UInt64 = 0
        repeat {
            for _ in 0..<1000 { spin = spin &* 6364136223846793005 &+ 1 }
            clock_gettime(CLOCK_THREAD_CPUTIME_ID, &thread)
        } while Duration.seconds(thread.tv_sec) + .nanoseconds(thread.tv_nsec) - start < .milliseconds(2)
        let used = try XCTUnwrap(ProcessStats.cpuTime(pid: getpid())) - before
        XCTAssertGreaterThanOrEqual(used, .milliseconds(2), "spin \(spin)")
        XCTAssertLessThan(used, .milliseconds(8))
        XCTAssertNil(ProcessStats.cpuTime(pid: 0x3FFF_FFFF), "beyond any pid")
        XCTAssertNil(ProcessStats.cpuTime(pid: try Self.pidNoProcessHas()), "no such process")
    }

    /// What a process alone holds is at most its proportional share, which is at most what it has resident.
    func testPrivateProportionalAndResidentSizesNest() throws {
        let pid = getpid()
        let resident = try XCTUnwrap(ProcessStats.residentBytes(pid: pid))
        let proportional = try XCTUnwrap(ProcessStats.proportionalBytes(pid: pid))
        let own = try XCTUnwrap(ProcessStats.privateBytes(pid: pid))
        XCTAssertGreaterThan(own, 0)
        // Read a moment apart, by a process that allocates meanwhile (XCTest's threads): a little slack.
        XCTAssertLessThanOrEqual(own, proportional + 1024 * 1024)
        XCTAssertLessThanOrEqual(proportional, resident + 1024 * 1024)
        XCTAssertNil(ProcessStats.privateBytes(pid: try Self.pidNoProcessHas()))
    }

    /// pid_max itself: pids are below it.
    private static func pidNoProcessHas() throws -> Int32 {
        let text = try String(contentsOfFile: "/proc/sys/kernel/pid_max", encoding: .utf8)
        return try XCTUnwrap(Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)))
    }
}
