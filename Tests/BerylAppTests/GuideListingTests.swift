import BerylDaemonKit
import BerylStack
import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif

/// The Core Bluetooth Programming Guide's listings (Guide/iOS, Swift written for iOS, renamed at build time and
/// built in Swift 6 mode with warnings as errors) run as two apps against each other on berylsim: what each printed
/// is what an iOS app written the same way would print.
final class GuideListingTests: TwoStacksTestCase {
    private var apps: [Int32] = []

    override func tearDown() {
        for pid in apps where ProcessStats.isAlive(pid: pid) {
            kill(pid, SIGKILL)
            _ = Spawn.reap(pid)
        }
        super.tearDown()
    }

    /// stdout line-buffered (the listings print, as guide code does, and the log is a file).
    private func launch(_ role: String, stack: Int) throws -> String {
        let log = "\(scratch.root)/guide-\(role).log"
        let pid = try Spawn.start(["/usr/bin/stdbuf", "-oL", Executables.path("guide-listings"), role, "--runtime-dir", "\(scratch.root)/run\(stack)"],
                                  logPath: log)
        apps.append(pid)
        return log
    }

    private func lines(_ path: String) -> [String] {
        ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    func testTheCentralAndPeripheralListingsTalk() throws {
        let peripheralLog = try launch("peripheral", stack: 1)
        XCTAssertTrue(eventually(.seconds(10)) { self.lines(peripheralLog).contains("Advertising") }, "\(lines(peripheralLog))")
        let centralLog = try launch("central", stack: 0)
        XCTAssertTrue(eventually(.seconds(30)) { self.lines(centralLog).contains("Central done") },
                      "central:\n\(lines(centralLog).joined(separator: "\n"))\nperipheral:\n\(lines(peripheralLog).joined(separator: "\n"))")

        // In the order the guide's steps run them.
        let central = lines(centralLog)
        let expected = ["Central powered on; scanning", "Discovered Thermometer", "Scanning stopped", "Peripheral connected",
                        "Discovered service 71DA3FD1-7E10-41C1-B16F-4430B506CDE7", "Discovered characteristic 71DA3FD2-7E10-41C1-B16F-4430B506CDE7",
                        "Read temperature 20.0", "Notifying true", "Notified temperature 20.5", "Wrote set point",
                        "Write refused with ATT error 0x80", "Central done"]
        var cursor = central.startIndex
        for step in expected {
            guard let found = central[cursor...].firstIndex(where: { $0.hasPrefix(step) }) else {
                return XCTFail("'\(step)' missing after line \(cursor) of:\n\(central.joined(separator: "\n"))")
            }
            cursor = found + 1
        }
        XCTAssertFalse(central.contains { $0.hasPrefix("Error") }, central.joined(separator: "\n"))

        let peripheral = lines(peripheralLog)
        for line in ["Published service 71DA3FD1-7E10-41C1-B16F-4430B506CDE7", "Advertising", "Answered a read",
                     "Central subscribed to characteristic 71DA3FD2-7E10-41C1-B16F-4430B506CDE7", "Sent update: true",
                     "Set point 21.5", "Refused set point"] {
            XCTAssertTrue(peripheral.contains(line), "'\(line)' in:\n\(peripheral.joined(separator: "\n"))")
        }
    }
}
