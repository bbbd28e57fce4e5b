import BerylDaemonKit
import BerylIPC
import BerylSupervisor
import BerylTestSupport
import Foundation
import XCTest

/// `beryl hci monitor` against a real hcid on berylsim: what it shows, and what it does when that hcid goes away.
final class HCIMonitorTests: XCTestCase {
    func testMonitorShowsEveryPacketAndWritesABTSnoopFile() throws {
        let scratch = try Scratch()
        defer { scratch.stopAll() }
        let sim = scratch.root + "/sim"
        try scratch.start("berylsim", [Executables.path("berylsim"), "--dir", sim, "--controllers", "1"], socket: sim + "/control.sock")
        try scratch.startDaemon("hcid", extra: ["--transport", "unix:\(sim)/controller-0.sock"])
        XCTAssertTrue(eventually { StackProbe.controllerInfo(at: scratch.paths.socket("hcid"))?.state == .poweredOn })
        let capture = scratch.root + "/capture.btsnoop"
        let monitor = Process()
        monitor.executableURL = URL(fileURLWithPath: Executables.path("beryl"))
        monitor.arguments = ["hci", "monitor", "--runtime-dir", scratch.paths.runtimeDir, "--count", "2", "--seconds", "10", "--btsnoop", capture]
        let output = Pipe()
        monitor.standardOutput = output
        try monitor.run()
        XCTAssertTrue(eventually { (StackProbe.status(at: scratch.paths.socket("hcid"))?.sessions ?? 0) >= 1 }, "monitor subscribed")
        usleep(200_000)
        let client = try IPCClient(path: scratch.paths.socket("hcid"))
        var request = Request()
        request.hci.sendCommand.opcode = 0x1009
        _ = try client.call(request)
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        monitor.waitUntilExit()
        XCTAssertEqual(monitor.terminationStatus, 0)
        let lines = text.split(separator: "\n")
        XCTAssertEqual(lines.count, 2, text)
        XCTAssertTrue(lines[0].hasPrefix("< HCI Command: readBDAddr (0x4|0x9) plen 0"), text)
        XCTAssertTrue(lines[1].hasPrefix("> HCI Event: commandComplete (0xe) plen 10 for readBDAddr status 0x0"), text)

        let file = try XCTUnwrap(FileManager.default.contents(atPath: capture)).map { $0 }
        XCTAssertEqual(Array(file[0..<8]), Array("btsnoop\0".utf8))
        XCTAssertEqual(Array(file[8..<16]), [0, 0, 0, 1, 0, 0, 0x03, 0xEA], "version 1, datalink 1002 (H4)")
        func u32(_ at: Int) -> UInt32 { file[at..<at + 4].reduce(0) { $0 << 8 | UInt32($1) } }
        var offset = 16
        var records: [(flags: UInt32, packet: [UInt8])] = []
        while offset + 24 <= file.count {
            let length = Int(u32(offset + 4))
            records.append((u32(offset + 8), Array(file[(offset + 24)..<(offset + 24 + length)])))
            offset += 24 + length
        }
        XCTAssertEqual(offset, file.count, "records fill the file exactly")
        XCTAssertEqual(records.map(\.flags), [2, 3], "sent command, then received event")
        XCTAssertEqual(records[0].packet, [0x01, 0x09, 0x10, 0x00])
        XCTAssertEqual(Array(records[1].packet.prefix(3)), [0x04, 0x0E, 0x0A])
    }

    /// A monitor whose hcid is gone exits with EX_UNAVAILABLE and says so; it used to spin on the dead socket forever.
    func testMonitorExitsWhenItsHcidGoesAway() throws {
        let scratch = try startHcidOnSim()
        defer { scratch.stopAll() }
        let monitor = try startMonitor(scratch, ["--seconds", "30"])
        try scratch.crash("hcid", socket: scratch.paths.socket("hcid"))
        XCTAssertTrue(eventually(.seconds(5)) { !monitor.process.isRunning }, "the monitor exits once hcid is gone")
        if monitor.process.isRunning { monitor.process.terminate() }
        monitor.process.waitUntilExit()
        XCTAssertEqual(monitor.process.terminationStatus, 69)
        XCTAssertTrue(monitor.stderr().contains("went away"), monitor.stderr())
    }

    /// With --follow the monitor outlives its hcid and shows the packets of the one that replaces it.
    func testMonitorFollowsARestartedHcid() throws {
        let scratch = try startHcidOnSim()
        defer { scratch.stopAll() }
        let monitor = try startMonitor(scratch, ["--follow", "--seconds", "30"])
        defer { if monitor.process.isRunning { monitor.process.terminate() } }
        try scratch.crash("hcid", socket: scratch.paths.socket("hcid"))
        // What the old hcid had queued is shown before the monitor hears it is gone; only lines after that are new.
        XCTAssertTrue(eventually(.seconds(5)) { monitor.stderr().contains("went away") }, monitor.stderr())
        let shownBefore = monitor.stdout().split(separator: "\n").count
        usleep(600_000)
        XCTAssertTrue(monitor.process.isRunning, "--follow keeps the monitor waiting while hcid is away: \(monitor.stderr())")
        try scratch.startDaemon("hcid", extra: ["--transport", "unix:\(scratch.root)/sim/controller-0.sock"])
        XCTAssertTrue(eventually { StackProbe.controllerInfo(at: scratch.paths.socket("hcid"))?.state == .poweredOn })
        let client = try IPCClient(path: scratch.paths.socket("hcid"))
        var request = Request()
        request.hci.sendCommand.opcode = 0x1009
        XCTAssertTrue(eventually(.seconds(10)) {
            _ = try? client.call(request)
            return monitor.stdout().split(separator: "\n").dropFirst(shownBefore).contains { $0.contains("readBDAddr") }
        }, "the monitor resubscribed to the new hcid and shows its traffic: \(monitor.stderr())")
        XCTAssertTrue(monitor.process.isRunning, "status \(monitor.process.isRunning ? 0 : monitor.process.terminationStatus): \(monitor.stderr())")
        XCTAssertTrue(eventually(.seconds(2)) { monitor.stderr().contains("following hcid") }, monitor.stderr())
    }

    private func startHcidOnSim() throws -> Scratch {
        let scratch = try Scratch()
        let sim = scratch.root + "/sim"
        try scratch.start("berylsim", [Executables.path("berylsim"), "--dir", sim, "--controllers", "1"], socket: sim + "/control.sock")
        try scratch.startDaemon("hcid", extra: ["--transport", "unix:\(sim)/controller-0.sock"])
        XCTAssertTrue(eventually { StackProbe.controllerInfo(at: scratch.paths.socket("hcid"))?.state == .poweredOn })
        return scratch
    }

    private struct Monitor {
        let process: Process
        let out: String
        let err: String
        func stdout() -> String { (try? String(contentsOfFile: out, encoding: .utf8)) ?? "" }
        func stderr() -> String { (try? String(contentsOfFile: err, encoding: .utf8)) ?? "" }
    }

    /// The monitor's output goes to files, so nothing blocks on a pipe however long it runs.
    private func startMonitor(_ scratch: Scratch, _ extra: [String]) throws -> Monitor {
        let out = scratch.root + "/monitor.out", err = scratch.root + "/monitor.err"
        FileManager.default.createFile(atPath: out, contents: nil)
        FileManager.default.createFile(atPath: err, contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Executables.path("beryl"))
        process.arguments = ["hci", "monitor", "--runtime-dir", scratch.paths.runtimeDir] + extra
        process.standardOutput = FileHandle(forWritingAtPath: out)
        process.standardError = FileHandle(forWritingAtPath: err)
        try process.run()
        let monitor = Monitor(process: process, out: out, err: err)
        // Subscribed once it shows a command's packets: only then is hcid's going away the monitor's to notice.
        let client = try IPCClient(path: scratch.paths.socket("hcid"))
        var request = Request()
        request.hci.sendCommand.opcode = 0x1009
        XCTAssertTrue(eventually {
            _ = try? client.call(request)
            return monitor.stdout().contains("readBDAddr")
        }, "monitor subscribed")
        return monitor
    }
}
