import BerylDaemonKit
import BerylSupervisor
import Foundation
import Glibc
import XCTest

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

/// The guide's restoration listing, launched by managerd from a manifest: killed, its link kept; the link lost and
/// back, it is relaunched with its restore identifier in the launch options, gets its peripheral in willRestoreState
/// and reads again without discovering.
final class GuideRestorationTests: TwoStacksTestCase {
    static let appID = "com.example.guide-restoration"
    var appsDir: String { scratch.root + "/apps" }
    private var peripheralPid: Int32?

    override var managerdArguments: [[String]] { [["--apps-dir", appsDir], []] }

    override func prepare() throws {
        try FileManager.default.createDirectory(atPath: appsDir, withIntermediateDirectories: true)
        // Line-buffered, so that what the listing prints reaches its log before a kill -9.
        let manifest: [String: Any] = [
            "id": Self.appID, "user": Spawn.unprivilegedUser, "backgroundModes": ["bluetooth-central"],
            "launch": ["command": ["/usr/bin/stdbuf", "-oL", Executables.path("guide-listings"), "restoring-central"]],
        ]
        try JSONSerialization.data(withJSONObject: manifest).write(to: URL(fileURLWithPath: appsDir + "/guide.json"))
        chmod(appsDir + "/guide.json", 0o644)
    }

    override func setUpWithError() throws {
        try super.setUpWithError()
        for directory in [scratch.root, scratch.root + "/run0", scratch.root + "/run0/logs"] { chmod(directory, 0o755) }
    }

    override func tearDown() {
        _ = try? beryl(["app", "quit", Self.appID])
        if let peripheralPid, ProcessStats.isAlive(pid: peripheralPid) {
            kill(peripheralPid, SIGKILL)
            _ = Spawn.reap(peripheralPid)
        }
        super.tearDown()
    }

    private func app() throws -> [String: Any] { try managedApp(Self.appID) }

    private var log: [String] {
        ((try? String(contentsOfFile: "\(scratch.root)/run0/logs/app-\(Self.appID).log", encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    func testTheRestorationListingIsRelaunchedAndRestored() throws {
        let peripheralLog = "\(scratch.root)/guide-peripheral.log"
        peripheralPid = try Spawn.start(["/usr/bin/stdbuf", "-oL", Executables.path("guide-listings"), "peripheral", "--runtime-dir", "\(scratch.root)/run1"],
                                        logPath: peripheralLog)
        XCTAssertTrue(eventually(.seconds(10)) { ((try? String(contentsOfFile: peripheralLog, encoding: .utf8)) ?? "").contains("Advertising") })

        // Launched by the user (through managerd): no restore identifiers; it scans, connects, discovers, reads.
        XCTAssertEqual(try beryl(["app", "launch", Self.appID]).status, 0)
        XCTAssertTrue(eventually(.seconds(20)) { self.log.contains { $0.hasPrefix("Temperature") } }, log.joined(separator: "\n"))
        XCTAssertEqual(log.first, "Launched to restore []")

        // kill -9: managerd keeps the manager and its link.
        let pids = try XCTUnwrap(try app()["pids"] as? [Int])
        for pid in pids { kill(Int32(pid), SIGKILL) }
        XCTAssertTrue(eventually { ((try? self.app()["pids"] as? [Int]) ?? [1]).isEmpty })
        XCTAssertEqual(try app()["preservedCentrals"] as? [String], ["myCentralManagerIdentifier"])

        // The thermometer goes out of range and comes back: the pending connection completes and relaunches the app.
        let before = log.count
        XCTAssertEqual(try sim(["range", "1", "out"]), 0)
        XCTAssertTrue(eventually(.seconds(10)) { (try? self.beryl(["peripherals", "--connected", "--json"]).out.isEmpty) == true }, "the link dropped")
        XCTAssertEqual(try sim(["range", "1", "in"]), 0)
        XCTAssertTrue(eventually(.seconds(30)) { self.log.dropFirst(before).contains { $0.hasPrefix("Temperature") } }, log.joined(separator: "\n"))
        let relaunch = Array(log.dropFirst(before))
        XCTAssertEqual(relaunch.first, "Launched to restore [myCentralManagerIdentifier]", relaunch.joined(separator: "\n"))
        XCTAssertTrue(relaunch.contains("Restoring 1 peripherals"), relaunch.joined(separator: "\n"))
        XCTAssertTrue(relaunch.contains("Resumed without discovery"), "what the app discovered is restored: \(relaunch)")
    }
}
