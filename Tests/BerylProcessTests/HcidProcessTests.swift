import BerylBench
import BerylDaemonKit
import BerylHCI
import BerylIPC
import BerylSupervisor
import BerylTestSupport
import Foundation
import XCTest

/// hcid as a process on berylsim: bring-up, commands and ACL through its socket, and the controller's faults.
final class HcidProcessTests: XCTestCase {
    var scratch: Scratch!
    var simDir: String { scratch.root + "/sim" }

    override func setUpWithError() throws {
        scratch = try Scratch()
        try scratch.start("berylsim", [Executables.path("berylsim"), "--dir", simDir, "--controllers", "2"], socket: simDir + "/control.sock")
    }

    override func tearDown() { scratch.stopAll() }

    private func runtime(_ index: Int) -> String { "\(scratch.root)/run\(index)" }

    @discardableResult
    private func startHcid(_ index: Int, transport: String? = nil, extra: [String] = []) throws -> IPCClient {
        try scratch.start("hcid\(index)", [Executables.path("hcid"), "--runtime-dir", runtime(index), "--state-dir", "\(scratch.root)/state\(index)",
                                           "--transport", transport ?? "unix:\(simDir)/controller-\(index).sock"] + extra,
                          socket: "\(runtime(index))/hcid.sock")
        XCTAssertTrue(eventually { self.info(index)?.state == .poweredOn }, "hcid \(index): \(String(describing: info(index)))")
        return try IPCClient(path: "\(runtime(index))/hcid.sock")
    }

    private func remoteCode(_ error: Error) -> IPCErrorCode? {
        guard case .remote(let code, _, _, _)? = error as? IPCClientError else { return nil }
        return code
    }

    private func info(_ index: Int) -> Beryl_Ipc_V1_ControllerInfo? { StackProbe.controllerInfo(at: "\(runtime(index))/hcid.sock") }

    private func command(_ client: IPCClient, _ opcode: UInt32, _ parameters: [UInt8] = []) throws -> [UInt8] {
        var request = Request()
        request.hci.sendCommand.opcode = opcode
        request.hci.sendCommand.parameters = Data(parameters)
        return Array(try client.call(request).hci.commandResult.parameters)
    }

    private func subscribe(_ client: IPCClient, events: Bool = true, acl: Bool = true) throws {
        var request = Request()
        request.hci.subscribe.events = events
        request.hci.subscribe.acl = acl
        _ = try client.call(request)
    }

    private func simState() throws -> [String: Any] {
        let run = try runTool("beryl", ["sim", "list", "--dir", simDir, "--json"])
        return try XCTUnwrap(JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any])
    }

    /// Waits for an LE Enhanced Connection Complete among the client's events; returns the handle.
    private func connectionHandle(_ client: IPCClient) -> UInt16? {
        var handle: UInt16?
        _ = eventually(.seconds(5)) {
            while let envelope = try? client.receive(timeout: .milliseconds(50)) {
                let event = envelope.event.hci.event
                let p = Array(event.parameters)
                if event.code == 0x3E, p.count > 4, p[0] == 0x0A, p[1] == 0 { handle = UInt16(p[2]) | UInt16(p[3]) << 8 }
            }
            return handle != nil
        }
        return handle
    }

    func testBringUpAndCommandsThroughTheSocket() throws {
        let client = try startHcid(0)
        let controllers = try XCTUnwrap(try simState()["controllers"] as? [[String: Any]])
        let info = try XCTUnwrap(info(0))
        XCTAssertEqual(info.address, controllers[0]["address"] as? String)
        XCTAssertEqual(info.leAclMtu, 251)
        XCTAssertEqual(info.leAclBuffers, 8)
        let answer = try command(client, 0x1009)
        XCTAssertEqual(answer.count, 3 + 1 + 6, "Command Complete for Read BD_ADDR")
        XCTAssertEqual(answer[3], 0)
        XCTAssertThrowsError(try command(client, 0x0C03)) { error in
            guard case .remote(let code, _, _, let detail)? = error as? IPCClientError else { return XCTFail("\(error)") }
            XCTAssertEqual(code, .permissionDenied, "HCI Reset is hcid's alone")
            XCTAssertEqual(detail.controllerReason, .reservedCommand)
        }
        XCTAssertThrowsError(try command(client, 0)) { error in
            XCTAssertEqual(remoteCode(error), .invalidArgument)
        }
        var acl = Request()
        acl.hci.sendAcl.handle = 0x0123
        acl.hci.sendAcl.pdu = Data([1, 2, 3])
        XCTAssertThrowsError(try client.call(acl)) { error in
            XCTAssertEqual(remoteCode(error), .notFound)
        }
    }

    /// The benchmarks' HCI helper stops at a command the controller refused rather than measure a setup it did not get.
    func testABenchmarksRefusedCommandIsThrownWithTheControllersStatus() throws {
        let client = try startHcid(0)
        XCTAssertThrowsError(try HCIBenchmark.command(client, HCICommands.leSetDataLength(handle: 0x0EFE, octets: 251, time: 2120))) { error in
            let refused = error as? HCIBenchmark.CommandRefused
            XCTAssertEqual(refused?.opcode, HCIOpcode.leSetDataLength.rawValue, "\(error)")
            XCTAssertEqual(refused?.status, 0x02, "Unknown Connection Identifier (Core Vol 1 Part F §1.3)")
        }
        XCTAssertEqual(try HCIBenchmark.command(client, HCICommands.leRand).count, 8, "LE Rand's 8 random octets after its status")
    }

    func testACLUnderLoadBetweenTwoStacksNeverOverflowsTheController() throws {
        let central = try startHcid(0)
        let peripheral = try startHcid(1)
        try subscribe(central)
        try subscribe(peripheral)
        XCTAssertEqual(try command(peripheral, 0x2006, [0x20, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7, 0])[3], 0)
        XCTAssertEqual(try command(peripheral, 0x200A, [1])[3], 0)
        let address = try XCTUnwrap(info(1)).address.split(separator: ":").reversed().compactMap { UInt8($0, radix: 16) }
        let create: [UInt8] = [0x10, 0, 0x10, 0, 0, 0] + address + [0, 6, 0, 6, 0, 0, 0, 100, 0, 0, 0, 0, 0]
        XCTAssertEqual(try command(central, 0x200D, create)[0], 0, "Command Status success")
        let centralHandle = try XCTUnwrap(connectionHandle(central))
        let peripheralHandle = try XCTUnwrap(connectionHandle(peripheral))
        _ = try command(central, 0x2022, [UInt8(centralHandle & 0xFF), UInt8(centralHandle >> 8), 251, 0, 0x48, 0x08])

        var expected: [UInt8] = []
        var received: [UInt8] = []
        var busy = 0
        func drain() {
            while let envelope = try? peripheral.receive(timeout: .milliseconds(5)) {
                if case .acl(let acl)? = envelope.event.hci.kind, acl.handle == UInt32(peripheralHandle) { received += acl.data }
            }
        }
        for index in 0..<150 {
            let pdu = (0..<600).map { UInt8(truncatingIfNeeded: $0 ^ index) }
            expected += pdu
            var request = Request()
            request.hci.sendAcl.handle = UInt32(centralHandle)
            request.hci.sendAcl.pdu = Data(pdu)
            // A link's queue in hcid is bounded: busy means wait for the air to take some, then send the same PDU again.
            while true {
                let outcome = Result(catching: { () throws(IPCClientError) -> Response in try central.call(request) })
                guard case .failure(let error) = outcome else { break }
                guard case .remote(.busy, _, _, _) = error else { throw error }
                busy += 1
                drain()
            }
        }
        XCTAssertGreaterThan(busy, 0, "450 fragments at once exceed one link's queue in hcid")
        XCTAssertTrue(eventually(.seconds(20)) {
            while let envelope = try? peripheral.receive(timeout: .milliseconds(20)) {
                if case .acl(let acl)? = envelope.event.hci.kind, acl.handle == UInt32(peripheralHandle) { received += acl.data }
            }
            return received.count >= expected.count
        }, "received \(received.count) of \(expected.count)")
        XCTAssertEqual(received, expected)
        let controllers = try XCTUnwrap(try simState()["controllers"] as? [[String: Any]])
        for controller in controllers {
            XCTAssertNil(controller["aclOverflows"], "no ACL overflow at the strict controller: \(controller)")
            XCTAssertNil(controller["commandFlowViolations"], "no command without a credit: \(controller)")
        }
        XCTAssertEqual(info(0)?.aclInFlight, 0, "every credit came back")
    }

    func testAClientDyingMidCommandDoesNotStallTheController() throws {
        let survivor = try startHcid(0)
        for _ in 0..<20 {
            let doomed = try SeqPacketSocket.connect(path: "\(runtime(0))/hcid.sock")
            var request = Request()
            request.hci.sendCommand.opcode = 0x2018
            let bytes = Envelope.request(request, id: 1).encoded()
            XCTAssertEqual(bytes.withUnsafeBytes { send(doomed, $0.baseAddress, $0.count, 0) }, bytes.count)
            close(doomed)
        }
        XCTAssertEqual(try command(survivor, 0x1009)[3], 0)
        XCTAssertEqual(info(0)?.state, .poweredOn)
    }

    func testAFrozenControllerIsUnresponsiveAndComesBackAfterThaw() throws {
        let client = try startHcid(0, extra: ["--command-timeout", "500"])
        XCTAssertEqual(try runTool("beryl", ["sim", "freeze", "0", "--dir", simDir]).status, 0)
        XCTAssertThrowsError(try command(client, 0x2018)) { error in
            XCTAssertEqual(remoteCode(error), .timeout)
        }
        let stalled = try XCTUnwrap(info(0))
        XCTAssertEqual(stalled.state, .unresponsive)
        XCTAssertTrue(stalled.detail.contains("0x2018"), stalled.detail)
        XCTAssertEqual(try runTool("beryl", ["sim", "thaw", "0", "--dir", simDir]).status, 0)
        XCTAssertTrue(eventually { self.info(0)?.state == .poweredOn })
        XCTAssertEqual(try command(client, 0x1009)[3], 0)
    }

    func testACorruptedStreamIsSurvivedAndTheControllerComesBack() throws {
        let client = try startHcid(0, extra: ["--command-timeout", "500"])
        XCTAssertEqual(try runTool("beryl", ["sim", "corrupt", "0", "0.05", "--dir", simDir]).status, 0)
        for _ in 0..<30 { _ = try? command(client, 0x2018) }
        XCTAssertEqual(try runTool("beryl", ["sim", "corrupt", "0", "0", "--dir", simDir]).status, 0)
        XCTAssertTrue(eventually(.seconds(15)) { self.info(0)?.state == .poweredOn && (try? self.command(client, 0x1009))?.count == 10 })
        XCTAssertTrue(ProcessStats.isAlive(pid: try XCTUnwrap(scratch.pid(of: "hcid0"))))
    }

    func testAProfilesQuirksAndVendorStepsAreApplied() throws {
        let profile = scratch.root + "/test-dongle.json"
        try #"""
        {"id": "test-dongle", "name": "Test dongle", "match": {"usb": ["1234:5678"]}, "transport": {"kind": "userchannel"},
         "quirks": {"noReadBufferSizeV2": true, "maxACLBuffers": 2},
         "vendorSteps": [{"opcode": "0x0C6D", "parameters": "0100", "description": "Write LE Host Support"}]}
        """#.write(toFile: profile, atomically: true, encoding: .utf8)
        try startHcid(0, extra: ["--profile", profile])
        let info = try XCTUnwrap(info(0))
        XCTAssertEqual(info.profile, "test-dongle")
        XCTAssertEqual(info.leAclBuffers, 2)
        XCTAssertEqual(info.aclBufferSource, "LE v1")

        let bad = scratch.root + "/bad.json"
        try #"{"id": "Bad Id"}"#.write(toFile: bad, atomically: true, encoding: .utf8)
        let refused = try runTool("hcid", ["--runtime-dir", runtime(1), "--transport", "unix:\(simDir)/controller-1.sock", "--profile", bad])
        XCTAssertEqual(refused.status, 1)
        XCTAssertTrue(refused.stderr.contains("\(bad): $.id:"), refused.stderr)
    }

    func testTCPTransportConnectsWithoutBlockingAndReportsARefusal() throws {
        // Controller 1 over berylsim's TCP port: the connect completes off the loop.
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) } }
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) } }
        let closedPort = UInt16(bigEndian: address.sin_port)
        close(listener)  // bound once, now closed: nobody listens there

        try scratch.start("hcid1", [Executables.path("hcid"), "--runtime-dir", runtime(1), "--transport", "tcp:127.0.0.1:\(closedPort)"],
                          socket: "\(runtime(1))/hcid.sock")
        XCTAssertTrue(eventually { self.info(1)?.state == .poweredOff })
        XCTAssertTrue(info(1)?.detail.contains("cannot reach the controller at tcp:127.0.0.1:\(closedPort)") ?? false, info(1)?.detail ?? "")
        XCTAssertTrue(StackControl.ping("\(runtime(1))/hcid.sock"), "the loop keeps serving while the controller is away")
    }

    func testUARTTransportThroughAPseudoTerminal() throws {
        let bridge = Process()
        bridge.executableURL = URL(fileURLWithPath: Executables.path("beryl"))
        bridge.arguments = ["sim", "pty", "0", "--dir", simDir]
        let output = Pipe()
        bridge.standardOutput = output
        try bridge.run()
        defer { bridge.terminate(); bridge.waitUntilExit() }
        var line = Data()
        while !line.contains(UInt8(ascii: "\n")) {
            let chunk = output.fileHandleForReading.availableData
            guard !chunk.isEmpty else { break }
            line += chunk
        }
        let pty = String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertTrue(pty.hasPrefix("/dev/pts/"), pty)
        let client = try startHcid(0, transport: "uart:\(pty),baud=921600,noflow")
        XCTAssertEqual(try command(client, 0x1009)[3], 0)
    }
}
