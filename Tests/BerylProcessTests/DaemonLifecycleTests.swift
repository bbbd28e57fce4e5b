import BerylDaemonKit
import BerylIPC
import BerylSupervisor
import BerylTestSupport
import Foundation
import XCTest

final class DaemonLifecycleTests: XCTestCase {
    func testEveryExecutableHasHelpAndVersion() throws {
        for name in ["hcid", "attd", "managerd", "berylsim", "beryl"] {
            let version = try runTool(name, ["--version"])
            XCTAssertEqual(version.status, 0, name)
            XCTAssertEqual(version.stdout.trimmingCharacters(in: .whitespacesAndNewlines), "0.1.0", name)
            let help = try runTool(name, ["--help"])
            XCTAssertEqual(help.status, 0, name)
            XCTAssertTrue(help.stdout.contains("USAGE: \(name)"), "\(name): \(help.stdout)")
        }
    }

    func testSIGTERMStopsCleanlyAndRemovesSocketAndPidFile() throws {
        let scratch = try Scratch()
        defer { scratch.stopAll() }
        try scratch.startDaemon("attd")
        let pid = try XCTUnwrap(scratch.pid(of: "attd"))
        let pidFile = try String(contentsOfFile: scratch.paths.pidFile("attd"), encoding: .utf8)
        XCTAssertEqual(pidFile, "\(pid)\n")
        kill(pid, SIGTERM)
        var exit: ExitReason?
        XCTAssertTrue(eventually { exit = Spawn.reap(pid)?.exit; return exit != nil })
        XCTAssertEqual(exit, .exit(0))
        XCTAssertFalse(FileManager.default.fileExists(atPath: scratch.paths.socket("attd")))
        XCTAssertFalse(FileManager.default.fileExists(atPath: scratch.paths.pidFile("attd")))
    }

    func testSecondDaemonOnALiveSocketRefuses() throws {
        let scratch = try Scratch()
        defer { scratch.stopAll() }
        try scratch.startDaemon("managerd")
        let second = try runTool("managerd", ["--runtime-dir", scratch.paths.runtimeDir, "--state-dir", scratch.paths.stateDir])
        XCTAssertEqual(second.status, 1)
        XCTAssertTrue(second.stderr.contains("another process is already serving \(scratch.paths.socket("managerd"))"), second.stderr)
        XCTAssertTrue(StackControl.ping(scratch.paths.socket("managerd")), "the first daemon still serves")
    }

    func testStaleSocketFromACrashedDaemonIsReplaced() throws {
        let scratch = try Scratch()
        defer { scratch.stopAll() }
        let path = scratch.paths.socket("managerd")
        // A bound socket whose owner is gone: what kill -9 leaves behind.
        let stale = try SeqPacketSocket.listen(path: path)
        close(stale)
        XCTAssertTrue(FileManager.default.fileExists(atPath: path))
        try scratch.startDaemon("managerd")
        XCTAssertTrue(StackControl.ping(path))
    }

    func testAFileThatIsNotASocketIsLeftAlone() throws {
        let scratch = try Scratch()
        defer { scratch.stopAll() }
        let path = scratch.paths.socket("attd")
        try "precious".write(toFile: path, atomically: true, encoding: .utf8)
        let run = try runTool("attd", ["--runtime-dir", scratch.paths.runtimeDir, "--state-dir", scratch.paths.stateDir])
        XCTAssertEqual(run.status, 1)
        XCTAssertTrue(run.stderr.contains("is not a socket"), run.stderr)
        XCTAssertEqual(try String(contentsOfFile: path, encoding: .utf8), "precious")
    }

    func testBadArgumentsAreRefusedWithAReason() throws {
        let noTransport = try runTool("hcid", ["--runtime-dir", "/tmp/unused"])
        XCTAssertEqual(noTransport.status, 64)
        XCTAssertTrue(noTransport.stderr.contains("--transport"), noTransport.stderr)
        let badTransport = try runTool("beryl", ["up", "--runtime-dir", "/tmp/unused", "--transport", "usb:1"])
        XCTAssertEqual(badTransport.status, 64)
        XCTAssertTrue(badTransport.stderr.contains("unknown transport scheme 'usb'"), badTransport.stderr)
        let badLevel = try runTool("attd", ["--log-level", "loud"])
        XCTAssertEqual(badLevel.status, 64)
        let tooLong = try runTool("attd", ["--runtime-dir", "/tmp/" + String(repeating: "x", count: 120)])
        XCTAssertEqual(tooLong.status, 1)
        XCTAssertTrue(tooLong.stderr.contains("longer than a UNIX socket allows"), tooLong.stderr)
    }
}

final class SupervisorTests: XCTestCase {
    /// A berylsim in the scratch directory; stack i uses controller i.
    private func startSim(_ scratch: Scratch, controllers: Int = 1) throws -> String {
        let dir = scratch.root + "/sim"
        try scratch.start("berylsim", [Executables.path("berylsim"), "--dir", dir, "--controllers", "\(controllers)"], socket: dir + "/control.sock")
        return dir
    }

    private func statusJSON(_ paths: DaemonPaths) throws -> StackReport {
        let run = try runTool("beryl", ["status", "--runtime-dir", paths.runtimeDir, "--json"])
        return try JSONDecoder().decode(StackReport.self, from: Data(run.stdout.utf8))
    }

    /// A supervisor killed outright (no SIGTERM to pass on) takes its daemons with it: each was started with
    /// PR_SET_PDEATHSIG, so none is left holding the controller where no one restarts it and `beryl up` would fail.
    func testDaemonsDieWithASupervisorKilledOutright() throws {
        let scratch = try Scratch()
        defer { _ = try? runTool("beryl", ["down", "--runtime-dir", scratch.paths.runtimeDir]); scratch.stopAll() }
        let paths = scratch.paths
        let sim = try startSim(scratch)
        let report = try up(paths, sim: sim)
        let supervisor = try XCTUnwrap(report.supervisorPid)
        let daemons = report.daemons.compactMap(\.pid)
        XCTAssertEqual(daemons.count, 3, "\(report)")
        XCTAssertEqual(kill(supervisor, SIGKILL), 0)
        XCTAssertTrue(eventually(.seconds(10)) { daemons.allSatisfy { !ProcessStats.isAlive(pid: $0) } },
                      "daemons outlived their supervisor: \(daemons.filter { ProcessStats.isAlive(pid: $0) })")
        // Nothing is left holding the runtime directory: the stack comes up again.
        XCTAssertEqual(try up(paths, sim: sim).controller?.state, "poweredOn")
    }

    /// `beryl up` on berylsim's controller 0; the stack's status once it answered.
    private func up(_ paths: DaemonPaths, sim: String) throws -> StackReport {
        let up = try runTool("beryl", ["up", "--runtime-dir", paths.runtimeDir, "--state-dir", paths.stateDir,
                                       "--transport", "unix:\(sim)/controller-0.sock", "--json"])
        XCTAssertEqual(up.status, 0, up.stderr)
        return try statusJSON(paths)
    }

    func testUpRestartsAKilledDaemonAndDownStopsEverything() throws {
        let scratch = try Scratch()
        defer { _ = try? runTool("beryl", ["down", "--runtime-dir", scratch.paths.runtimeDir]); scratch.stopAll() }
        let paths = scratch.paths
        let sim = try startSim(scratch)
        let report = try up(paths, sim: sim)
        XCTAssertEqual(report.controller?.state, "poweredOn")
        XCTAssertEqual(report.controller?.leAclMtu, 251)
        XCTAssertEqual(report.controller?.leAclBuffers, 8)
        XCTAssertEqual(report.controller?.profile, "none")
        XCTAssertEqual(report.daemons.map(\.name), ["hcid", "attd", "managerd"])
        XCTAssertTrue(report.daemons.allSatisfy { $0.state == "running" && $0.pid != nil }, "\(report)")
        XCTAssertEqual(report.controller?.timesUnresponsive, 0)
        XCTAssertEqual(report.controller?.unansweredCommands, [])
        let attachedWhenUp: [[String]] = [[], ["hcid"], ["attd", "hcid"]]
        XCTAssertTrue(eventually { (try? self.statusJSON(paths))?.daemons.map { $0.attachedTo ?? [] } == attachedWhenUp }, "attd and managerd attach")
        let supervisor = try XCTUnwrap(report.supervisorPid)
        let attd = try XCTUnwrap(report.daemons[1].pid)

        XCTAssertEqual(kill(attd, SIGKILL), 0)
        var restarted: DaemonReport?
        XCTAssertTrue(eventually {
            restarted = (try? self.statusJSON(paths))?.daemons[1]
            return restarted?.state == "running" && restarted?.pid != attd
        }, "attd was not restarted: \(String(describing: restarted))")
        XCTAssertEqual(restarted?.restarts, 1)
        XCTAssertEqual(restarted?.lastExit, "signal 9")
        // managerd lost attd with it, and attaches to its successor, which attaches to hcid.
        XCTAssertTrue(eventually { (try? self.statusJSON(paths))?.daemons.map { $0.attachedTo ?? [] } == attachedWhenUp }, "attached again")

        let again = try runTool("beryl", ["up", "--runtime-dir", paths.runtimeDir, "--transport", "unix:/x.sock"])
        XCTAssertEqual(again.status, 1)
        XCTAssertTrue(again.stderr.contains("already running"), again.stderr)

        let pids = [supervisor] + (try statusJSON(paths)).daemons.compactMap(\.pid)
        let down = try runTool("beryl", ["down", "--runtime-dir", paths.runtimeDir])
        XCTAssertEqual(down.status, 0, down.stderr)
        for pid in pids { XCTAssertFalse(ProcessStats.isAlive(pid: pid), "pid \(pid) outlived beryl down") }
        for name in ["supervisor", "hcid", "attd", "managerd"] {
            XCTAssertFalse(FileManager.default.fileExists(atPath: paths.socket(name)), name)
        }
        XCTAssertEqual(try runTool("beryl", ["status", "--runtime-dir", paths.runtimeDir]).status, 3)
    }

    func testTwoStacksRunSideBySide() throws {
        let first = try Scratch()
        let second = try Scratch()
        let sim = try startSim(first, controllers: 2)
        defer {
            for scratch in [first, second] {
                _ = try? runTool("beryl", ["down", "--runtime-dir", scratch.paths.runtimeDir])
                scratch.stopAll()
            }
        }
        for (index, scratch) in [first, second].enumerated() {
            let up = try runTool("beryl", ["up", "--runtime-dir", scratch.paths.runtimeDir, "--state-dir", scratch.paths.stateDir,
                                           "--transport", "unix:\(sim)/controller-\(index).sock"])
            XCTAssertEqual(up.status, 0, up.stderr)
        }
        XCTAssertNotEqual(try statusJSON(first.paths).controller?.address, try statusJSON(second.paths).controller?.address)
        let pidsA = Set(try statusJSON(first.paths).daemons.compactMap(\.pid))
        let pidsB = Set(try statusJSON(second.paths).daemons.compactMap(\.pid))
        XCTAssertEqual(pidsA.count, 3)
        XCTAssertEqual(pidsB.count, 3)
        XCTAssertTrue(pidsA.isDisjoint(with: pidsB))
        XCTAssertEqual(try runTool("beryl", ["down", "--runtime-dir", first.paths.runtimeDir]).status, 0)
        XCTAssertTrue(StackControl.ping(second.paths.socket("managerd")), "stopping one stack left the other alone")
    }

    func testUpFailsClearlyWhenTheKernelHasNoBluetooth() throws {
        let scratch = try Scratch()
        defer { _ = try? runTool("beryl", ["down", "--runtime-dir", scratch.paths.runtimeDir]); scratch.stopAll() }
        let up = try runTool("beryl", ["up", "--runtime-dir", scratch.paths.runtimeDir, "--state-dir", scratch.paths.stateDir,
                                       "--transport", "userchannel:hci0"])
        // These machines have no AF_BLUETOOTH; on a board this path takes the dongle.
        XCTAssertEqual(up.status, 1)
        XCTAssertTrue(up.stderr.contains("the controller is unsupported: this kernel has no Bluetooth support"), up.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: scratch.paths.socket("supervisor")), "the stack was stopped")
    }
}
