import BerylDaemonKit
import BerylIPC
import BerylSupervisor
import BerylTestSupport
import Foundation
import XCTest

final class RoundTripTests: XCTestCase {
    func testPingAndStatusRoundTripBetweenProcesses() throws {
        let scratch = try Scratch()
        defer { scratch.stopAll() }
        try scratch.startDaemon("managerd")
        let client = try IPCClient(path: scratch.paths.socket("managerd"))

        let payload: [UInt8] = Array(0..<200)
        XCTAssertEqual(Array(try client.call(pingRequest(payload)).pong.payload), payload)

        var request = Request()
        request.getStatus = Beryl_Ipc_V1_GetStatus()
        let status = try client.call(request).status
        XCTAssertEqual(status.daemon, "managerd")
        XCTAssertEqual(status.pid, scratch.pid(of: "managerd"))
        XCTAssertEqual(status.state, .running)
        XCTAssertEqual(status.runtimeDir, scratch.paths.runtimeDir)
        XCTAssertEqual(status.stateDir, scratch.paths.stateDir)
        XCTAssertEqual(status.sessions, 1)
        XCTAssertGreaterThan(status.rssBytes, 0)
    }

    /// A daemon's status names the daemons it is attached to: one that goes is dropped, and its successor is named again.
    func testStatusNamesTheDaemonsEachIsAttachedTo() throws {
        let scratch = try Scratch()
        defer { scratch.stopAll() }
        try startStacks(scratch, count: 1)
        let run = "\(scratch.root)/run0"
        func attached(_ daemon: String) -> [String]? { StackProbe.status(at: "\(run)/\(daemon).sock")?.attachedTo }
        XCTAssertTrue(eventually { attached("attd") == ["hcid"] && attached("managerd") == ["attd", "hcid"] },
                      "attd: \(String(describing: attached("attd"))), managerd: \(String(describing: attached("managerd")))")
        XCTAssertEqual(attached("hcid"), [], "hcid attaches to no daemon")

        try scratch.crash("attd0", socket: run + "/attd.sock")
        XCTAssertTrue(eventually { attached("managerd") == ["hcid"] }, "managerd still names the attd it lost: \(String(describing: attached("managerd")))")
        try scratch.start("attd0-1", [Executables.path("attd"), "--runtime-dir", run, "--state-dir", "\(scratch.root)/state0"], socket: run + "/attd.sock")
        XCTAssertTrue(eventually { attached("attd") == ["hcid"] && attached("managerd") == ["attd", "hcid"] },
                      "attd: \(String(describing: attached("attd"))), managerd: \(String(describing: attached("managerd")))")
    }

    func testManagerdIdentifiesTheAppByKernelCredentials() throws {
        let scratch = try Scratch()
        defer { scratch.stopAll() }
        try scratch.startDaemon("managerd")
        let first = try IPCClient(path: scratch.paths.socket("managerd"))
        let second = try IPCClient(path: scratch.paths.socket("managerd"))
        var hello = Request()
        hello.manager.hello.appID = "com.example.test"
        let welcomeA = try first.call(hello).manager.welcome
        let welcomeB = try second.call(hello).manager.welcome
        XCTAssertEqual(welcomeA.peerPid, getpid())
        XCTAssertEqual(welcomeA.peerUid, getuid())
        XCTAssertNotEqual(welcomeA.sessionID, welcomeB.sessionID)
    }

    // Who an app is is checked at its Hello: a session that skipped it is refused a manager's work, typed, and keeps
    // what needs no Hello (`beryl peripherals`); after its Hello the same request is taken.
    func testAManagersWorkIsRefusedToASessionWithoutHello() throws {
        let scratch = try Scratch()
        defer { scratch.stopAll() }
        try scratch.startDaemon("managerd")
        let client = try IPCClient(path: scratch.paths.socket("managerd"))
        var scan = Request()
        scan.manager.stopAdvertising.manager = 1
        XCTAssertThrowsError(try client.call(scan)) { error in
            guard case .remote(let code, _, let field, _)? = error as? IPCClientError else { return XCTFail("\(error)") }
            XCTAssertEqual(code, .permissionDenied)
            XCTAssertEqual(field, "hello")
        }
        var listing = Request()
        listing.manager.retrievePeripherals = .init()
        XCTAssertNoThrow(try client.call(listing), "questions of the stack need no Hello")
        var hello = Request()
        hello.manager.hello.appID = "com.example.test"
        _ = try client.call(hello)
        XCTAssertNoThrow(try client.call(scan), "stopAdvertising needs no radio: taken once the session said Hello")
    }

    func testEachDaemonAnswersItsOwnInterfaceAndRefusesOthers() throws {
        let scratch = try Scratch()
        defer { scratch.stopAll() }
        for name in ["hcid", "attd", "managerd"] { try scratch.startDaemon(name) }
        try scratch.start("berylsim", [Executables.path("berylsim"), "--dir", scratch.root, "--controllers", "2"],
                          socket: scratch.root + "/control.sock")

        var hci = Request()
        hci.hci.getControllerInfo = Beryl_Ipc_V1_GetControllerInfo()
        let info = try IPCClient(path: scratch.paths.socket("hcid")).call(hci).hci.controllerInfo
        XCTAssertEqual(info.transport, "unix:\(scratch.root)/controller-0.sock")

        var att = Request()
        att.att.getBearers = Beryl_Ipc_V1_GetBearers()
        XCTAssertEqual(try IPCClient(path: scratch.paths.socket("attd")).call(att).att.bearers.bearers, [])

        let manager = try IPCClient(path: scratch.paths.socket("managerd"))
        XCTAssertThrowsError(try manager.call(hci)) { error in
            guard case .remote(let code, _, _, _)? = error as? IPCClientError else { return XCTFail("\(error)") }
            XCTAssertEqual(code, .unsupported)
        }
        XCTAssertNoThrow(try manager.call(pingRequest()), "the session survives a refused request")

        let sim = try IPCClient(path: scratch.root + "/control.sock")
        var status = Request()
        status.getStatus = Beryl_Ipc_V1_GetStatus()
        XCTAssertEqual(try sim.call(status).status.daemon, "berylsim")
    }

    func testPipelinedRequestsAreEachAnsweredOnceInOrder() throws {
        let scratch = try Scratch()
        defer { scratch.stopAll() }
        try scratch.startDaemon("attd")
        let client = try IPCClient(path: scratch.paths.socket("attd"))
        var ids: [UInt64] = []
        for index in 0..<500 { ids.append(try client.send(pingRequest([UInt8(index & 0xFF)]))) }
        var answered: [UInt64] = []
        for _ in ids { answered.append(try client.receive().requestID) }
        XCTAssertEqual(answered, ids)
        XCTAssertThrowsError(try client.receive(timeout: .milliseconds(200)), "no extra answers")
    }
}
