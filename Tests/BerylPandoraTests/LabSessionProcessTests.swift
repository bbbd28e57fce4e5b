import BerylDaemonKit
import BerylIPC
import BerylPandora
import BerylStore
import BerylSupervisor
import BerylTestSupport
import Foundation
import Glibc
import GRPCCore
import GRPCInProcessTransport
import GRPCNIOTransportHTTP2Posix
import PandoraInterfaces
import SwiftProtobuf
import XCTest

/// managerd's lab session with real daemons on berylsim: driven over IPC, and through beryl-pandora's services served
/// in process. The evidence is what the stack answers and what another controller hears on the air.
final class LabSessionProcessTests: XCTestCase {
    var scratch: Scratch!
    private var harnesses: [PandoraHarness] = []
    /// Processes a test started outside the scratch's list (killed and reaped in tearDown).
    private var children: [Int32] = []

    /// The lab's AD structure: manufacturer-specific data of company 0x71BE.
    static let labMarker: [UInt8] = [0x03, 0xFF, 0xBE, 0x71]
    static let labAdvertisingData = Data([0x02, 0x01, 0x06] + labMarker)
    /// The app's: the complete list of 16-bit service UUIDs, 0xFFF0 (Core Supplement Part A §1.1).
    static let appMarker: [UInt8] = [0x03, 0x03, 0xF0, 0xFF]

    override func setUpWithError() throws {
        scratch = try Scratch()
    }

    override func tearDown() {
        for harness in harnesses { harness.abandon() }
        harnesses.removeAll()
        for pid in children {
            if ProcessStats.isAlive(pid: pid) { kill(pid, SIGKILL) }
            try? StackControl.waitForExit(pid, timeout: .seconds(2))
        }
        children.removeAll()
        if (testRun?.totalFailureCount ?? 0) > 0 {
            scratch.keep = true
            print("\(name): kept \(scratch.root) for its logs")
        }
        scratch.stopAll()
    }

    private func run(_ index: Int) -> String { "\(scratch.root)/run\(index)" }
    private func managerd(_ index: Int) -> String { run(index) + "/managerd.sock" }
    private func controllerAddress(_ index: Int) -> String? { StackProbe.controllerInfo(at: run(index) + "/hcid.sock")?.address }

    /// `count` stacks on berylsim, each with its controller powered on as managerd sees it.
    private func bringUp(_ count: Int) throws {
        try startStacks(scratch, count: count)
        for index in 0..<count { try waitForPoweredOn(managerd(index)) }
    }

    /// A lab session over plain IPC.
    private func openLab(_ index: Int) throws -> (IPCClient, Beryl_Ipc_V1_LabWelcome) {
        let lab = try IPCClient(path: managerd(index))
        let welcome = try lab.call(managerRequest { $0.labOpen = .init() }).manager.labWelcome
        return (lab, welcome)
    }

    private func pandora(_ index: Int) async throws -> PandoraHarness {
        let harness = try await PandoraHarness.start(managerSocket: managerd(index))
        harnesses.append(harness)
        return harness
    }

    // MARK: 0

    /// The executable as a supervisor runs it: it serves gRPC on the port it was given, and SIGTERM ends it with
    /// status 0 and gives managerd's one lab session back (a new LabOpen is welcomed, not refused as busy).
    func testSigtermStopsBerylPandoraAndFreesTheLabSession() throws {
        try bringUp(1)
        let port = try freeLoopbackPort()
        let log = scratch.root + "/pandora.log"
        let pid = try Spawn.start([Executables.path("beryl-pandora"), "--runtime-dir", run(0), "--port", String(port)],
                                  environment: ProcessInfo.processInfo.environment, logPath: log)
        children.append(pid)
        XCTAssertTrue(eventually(.seconds(20)) { self.listening(on: port) }, (try? String(contentsOfFile: log, encoding: .utf8)) ?? "no log")
        XCTAssertThrowsError(try IPCClient(path: managerd(0)).call(managerRequest { $0.labOpen = .init() }), "a second lab session while one is open")
        XCTAssertEqual(kill(pid, SIGTERM), 0)
        var ended: ExitReason?
        XCTAssertTrue(eventually(.seconds(10)) {
            ended = Spawn.reap(pid)?.exit
            return ended != nil
        }, "beryl-pandora still running 10 s after SIGTERM")
        children.removeAll { $0 == pid }
        XCTAssertEqual(ended, .exit(0))
        var welcomed = false
        _ = eventually(.seconds(5)) {
            welcomed = ((try? IPCClient(path: managerd(0)).call(managerRequest { $0.labOpen = .init() }).manager.labWelcome.sessionID) ?? 0) != 0
            return welcomed
        }
        XCTAssertTrue(welcomed, "the lab session was not given back after beryl-pandora stopped")
    }

    /// A client that goes away mid-stream (its call cancelled: RST_STREAM over HTTP/2, to the real executable) ends the
    /// Scan on the controller too: hcid's monitor sees managerd send LE Set Scan Enable (Core Vol 4 Part E §7.8.11)
    /// with Enable 0. (The in-process transport signals no cancel to a server, so this runs over TCP.)
    func testACancelledScanStopsTheControllersScan() async throws {
        try bringUp(2)
        let (peer, _) = try openLab(1)
        _ = try peer.call(managerRequest { $0.labAdvertise = .with { $0.data = Self.labAdvertisingData } })
        let monitor = try IPCClient(path: run(0) + "/hcid.sock")
        var subscribe = Request()
        subscribe.hci.subscribe.monitor = true
        _ = try monitor.call(subscribe)
        let port = try freeLoopbackPort()
        let log = scratch.root + "/pandora.log"
        let pid = try Spawn.start([Executables.path("beryl-pandora"), "--runtime-dir", run(0), "--port", String(port)],
                                  environment: ProcessInfo.processInfo.environment, logPath: log)
        children.append(pid)
        XCTAssertTrue(eventually(.seconds(20)) { self.listening(on: port) }, (try? String(contentsOfFile: log, encoding: .utf8)) ?? "no log")

        let client = GRPCClient(transport: try .http2NIOPosix(target: .ipv4(address: "127.0.0.1", port: port), transportSecurity: .plaintext))
        let connections = Task { try? await client.runConnections() }
        defer {
            client.beginGracefulShutdown()
            connections.cancel()
        }
        let host = Pandora_Host.Client(wrapping: client)
        let watch = StreamWatch()
        let scanning = Task {
            do {
                try await host.scan(.with { $0.passive = true }, options: .within(.seconds(120))) { response in
                    for try await _ in response.messages { watch.heard() }
                }
                watch.end("normally")
            } catch {
                watch.end("\(error)")
            }
        }
        let reporting = await watch.wait(.seconds(15)) { $0.messages > 0 }
        XCTAssertTrue(reporting, "the Scan stream delivered nothing while stack 1 advertised")
        // The scan's own set-up disabled the scan once before enabling it: only what hcid sent from the cancel on counts.
        let cancelledAt = UInt64(Date().timeIntervalSince1970 * 1_000_000)
        scanning.cancel()
        var scanDisabled = false
        let deadline = ContinuousClock.now + .seconds(5)
        while !scanDisabled, ContinuousClock.now < deadline {
            guard let envelope = try? monitor.receive(timeout: .milliseconds(200)), case .event(let event)? = envelope.body,
                  case .monitor(let packet)? = event.hci.kind, !packet.received, packet.timestampUs >= cancelledAt else { continue }
            let h4 = Array(packet.h4)
            scanDisabled = h4.count >= 5 && h4[0] == 0x01 && h4[1] == 0x0C && h4[2] == 0x20 && h4[4] == 0x00
        }
        XCTAssertTrue(scanDisabled, "the controller still scans 5 s after the client cancelled its Scan")
    }

    /// A pairing the lab refuses fails on both sides: the peripheral's lab answers its Just Works prompt no, so its attd
    /// sends Pairing Failed, Numeric Comparison Failed (Core Vol 3 Part H §3.5.5); the central's LabSecure is answered
    /// with the peer's reason, and the refusing lab hears its own, which Pandora reports as pairing_failure.
    func testAPairingRefusedByTheLabFailsOnBothSides() throws {
        try bringUp(2)
        let (peripheral, welcome) = try openLab(0)
        let (central, _) = try openLab(1)
        _ = try peripheral.call(managerRequest { $0.labAdvertise = .with { $0.data = Self.labAdvertisingData; $0.connectable = true } })
        let link = try central.call(managerRequest { $0.labConnect.address = welcome.publicAddress }).manager.labLink
        XCTAssertTrue(link.central)
        let up = peripheral.nextManagerEvent(within: .seconds(5)) { if case .linkUp(let up)? = $0.lab.kind { !up.central } else { false } }
        let peripheralHandle = try XCTUnwrap(up?.lab.linkUp.handle, "the peripheral's lab heard no link")

        let secure = try central.send(managerRequest { $0.labSecure.handle = link.handle })
        let prompt = peripheral.nextManagerEvent(within: .seconds(10)) { if case .pairingPrompt? = $0.lab.kind { true } else { false } }
        XCTAssertEqual(prompt?.lab.pairingPrompt.kind, .confirmPairing, "Just Works asks the lab for consent")
        XCTAssertEqual(prompt?.lab.pairingPrompt.handle, peripheralHandle)
        _ = try peripheral.call(managerRequest { $0.labPairingAnswer = .with { $0.handle = peripheralHandle; $0.accept = false } })

        var outcome: Beryl_Ipc_V1_LabSecurityOutcome?
        let deadline = ContinuousClock.now + .seconds(10)
        while outcome == nil, ContinuousClock.now < deadline {
            guard let envelope = try? central.receive(timeout: .milliseconds(200), requestID: secure), envelope.requestID == secure,
                  case .response(let response)? = envelope.body else { continue }
            outcome = response.manager.labSecurity
        }
        guard case .pairingFailed(let failure)? = outcome?.outcome else { return XCTFail("the central's LabSecure: \(String(describing: outcome))") }
        XCTAssertEqual(failure.reason, 0x0C)
        XCTAssertTrue(failure.remote, "the peripheral refused")
        let heard = peripheral.nextManagerEvent(within: .seconds(5)) { if case .security(let security)? = $0.lab.kind { security.handle == peripheralHandle } else { false } }
        guard case .pairingFailed(let own)? = heard?.lab.security.outcome else { return XCTFail("the peripheral's lab: \(String(describing: heard))") }
        XCTAssertEqual(own.reason, 0x0C)
        XCTAssertFalse(own.remote)
    }

    /// beryl-pandora opens its gRPC port only once its lab session is open: a connection taken is its readiness, as
    /// ci/lab waits for it.
    private func listening(on port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }

    private func freeLoopbackPort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound else { throw POSIXError(.EADDRNOTAVAIL) }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    // MARK: 1

    /// SO_PEERCRED decides: beryl-pandora run as nobody (not root, not in beryl-lab) is refused PERMISSION_DENIED by
    /// managerd itself and exits EX_NOPERM; root's LabOpen on the same stack is welcomed with the controller's address.
    func testALabSessionIsRefusedToOtherUsers() throws {
        // An outsider: nobody, unless this machine put nobody in beryl-lab, then a uid with no account and a gid that is
        // not the lab's, which managerd cannot find in the group either.
        var outsider: UInt32 = 65534
        if let group = getgrnam("beryl-lab") {
            var cursor = group.pointee.gr_mem
            var members: [String] = []
            while let member = cursor?.pointee {
                members.append(String(cString: member))
                cursor = cursor?.advanced(by: 1)
            }
            let labGID = group.pointee.gr_gid
            outsider = [65534, 64999, 64998].first { id in id != labGID && getpwuid(id).map { !members.contains(String(cString: $0.pointee.pw_name)) && $0.pointee.pw_gid != labGID } ?? true } ?? 64997
        }
        try bringUp(1)
        // nobody reaches managerd's socket (0666) only through directories it may search.
        for directory in [scratch.root, run(0)] { XCTAssertEqual(chmod(directory, 0o755), 0, directory) }

        let log = scratch.root + "/pandora-nobody.log"
        let pid = try Spawn.start([Executables.path("beryl-pandora"), "--runtime-dir", run(0), "--wait-for-stack", "0"],
                                  environment: ProcessInfo.processInfo.environment, logPath: log, uid: outsider, gid: outsider)
        children.append(pid)
        var ended: ExitReason?
        let exited = eventually(.seconds(30)) {
            ended = Spawn.reap(pid)?.exit
            return ended != nil
        }
        if exited { children.removeAll { $0 == pid } }
        let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        XCTAssertTrue(exited, "beryl-pandora as nobody still running after 30 s: \(output)")
        // EX_NOPERM is managerd's typed PERMISSION_DENIED alone: a socket it could not reach exits EX_UNAVAILABLE (69).
        XCTAssertEqual(ended, .exit(77), "EX_NOPERM: \(output)")

        let (lab, welcome) = try openLab(0)
        XCTAssertEqual(welcome.state, .poweredOn)
        XCTAssertNotEqual(welcome.sessionID, 0)
        XCTAssertFalse(welcome.publicAddress.isEmpty)
        XCTAssertEqual(welcome.publicAddress, controllerAddress(0))
        XCTAssertNoThrow(try lab.call(managerRequest { $0.labGetLinks = .init() }), "root's lab session takes lab requests")
    }

    // MARK: 2

    /// A factory reset takes back what the lab session set up, nothing else: from the other controller, the app's
    /// advertising is still heard and the lab's is not; the app's service still answers a GATT read.
    func testFactoryResetLeavesAnAppsStateAlone() throws {
        try bringUp(2)
        func heardApp(_ report: Beryl_Ipc_V1_LabScanReport) -> Bool { adStructures(report.data).contains(Self.appMarker) }
        func heardLab(_ report: Beryl_Ipc_V1_LabScanReport) -> Bool { adStructures(report.data).contains(Self.labMarker) }

        // An ordinary app on stack 0: a published service with a cached value, and advertising.
        let app = try IPCClient(path: managerd(0))
        XCTAssertEqual(try app.call(managerRequest { $0.hello.role = .peripheral }).manager.welcome.state, .poweredOn)
        let published = try app.call(managerRequest {
            $0.addService = .with {
                $0.manager = 1
                $0.service = .with {
                    $0.uuid = "FFF0"
                    $0.primary = true
                    $0.characteristics = [.with {
                        $0.uuid = "FFF1"
                        $0.properties = 0x02  // read
                        $0.permissions = 0x01  // readable
                        $0.cached = true
                        $0.value = Data("beryl".utf8)
                    }]
                }
            }
        }).manager.serviceAdded
        XCTAssertGreaterThan(published.startHandle, 0)
        _ = try app.call(managerRequest {
            $0.startAdvertising = .with {
                $0.manager = 1
                $0.localName = "Lab Neighbour"
                $0.serviceUuids = ["FFF0"]
            }
        })
        let started = app.nextManagerEvent(within: .seconds(10)) { event in
            if case .advertisingStarted? = event.kind { return true }
            return false
        }
        XCTAssertEqual(started?.advertisingStarted.error, "", "the app's advertising did not start: \(String(describing: started))")

        // The app knows a peripheral of its own (retrieved by address, as a restored app does).
        let appsPeripheral = "C0:FF:EE:00:00:02"
        let retrieved = try app.call(managerRequest { $0.retrievePeripherals.addresses = [appsPeripheral] })
        let appsIdentifier = try XCTUnwrap(retrieved.manager.peripherals.peripherals.first?.identifier)

        // The lab session on the same stack advertises beside it (managerd rotates them, a second each), and holds a
        // link it made to stack 1, whose peer the lab alone made known.
        let (lab, _) = try openLab(0)
        _ = try lab.call(managerRequest { $0.labAdvertise = .with { $0.data = Self.labAdvertisingData } })
        let (scanner, scannerWelcome) = try openLab(1)
        _ = try scanner.call(managerRequest { $0.labAdvertise = .with { $0.data = Self.labAdvertisingData; $0.connectable = true } })
        let labLink = try lab.call(managerRequest { $0.labConnect.address = scannerWelcome.publicAddress }).manager.labLink
        XCTAssertTrue(labLink.central)
        _ = try scanner.call(managerRequest { $0.labStopAdvertising = .init() })
        let record = try XCTUnwrap(LabRecordFile(path: "\(scratch.root)/state0/lab.json").record)
        XCTAssertEqual(record.peripherals.count, 1, "the lab's connect made stack 1 known to stack 0, on the lab's account: \(record)")

        _ = try scanner.call(managerRequest { $0.labScan.passive = true })
        let before = scanner.labReports(for: .seconds(10)) { reports in reports.contains(where: heardApp) && reports.contains(where: heardLab) }
        XCTAssertTrue(before.contains(where: heardApp), "the app's advertising was not heard before the reset (\(before.count) reports)")
        XCTAssertTrue(before.contains(where: heardLab), "the lab's advertising was not heard before the reset (\(before.count) reports)")

        let monitor = try IPCClient(path: run(0) + "/hcid.sock")
        var subscribe = Request()
        subscribe.hci.subscribe.monitor = true
        _ = try monitor.call(subscribe)
        _ = try lab.call(managerRequest { $0.labFactoryReset = .init() })
        // HCI Reset (Core Vol 4 Part E §7.3.2) went to stack 0's controller.
        var sentReset = false
        while !sentReset, let envelope = try? monitor.receive(timeout: .milliseconds(200)) {
            guard case .event(let event)? = envelope.body, case .monitor(let packet)? = event.hci.kind, !packet.received else { continue }
            sentReset = Array(packet.h4) == [0x01, 0x03, 0x0C, 0x00]
        }
        XCTAssertTrue(sentReset, "no HCI Reset reached the controller")
        let down = lab.nextManagerEvent(within: .seconds(5)) { if case .linkDown(let down)? = $0.lab.kind { down.handle == labLink.handle } else { false } }
        XCTAssertNotNil(down, "the lab's link outlived its factory reset")
        XCTAssertEqual(try XCTUnwrap(LabRecordFile(path: "\(scratch.root)/state0/lab.json").record), LabRecord(), "the lab's record is empty")
        // The app was not told the controller reset: its managers stayed powered on, as their database did.
        XCTAssertNil(app.nextManagerEvent(within: .milliseconds(300)) { if case .stateChanged? = $0.kind { true } else { false } })
        _ = scanner.labReports(for: .milliseconds(500))  // what was on the air as the reset ran
        let after = scanner.labReports(for: .seconds(4))  // four turns of managerd's advertising rotation
        XCTAssertTrue(after.contains(where: heardApp), "the app's advertising stopped with the lab's factory reset (\(after.count) reports)")
        XCTAssertFalse(after.contains(where: heardLab), "the lab's advertising outlived its factory reset")

        // The app's published service still answers, from the other stack's managerd.
        _ = try scanner.call(managerRequest { $0.labStopScan = .init() })
        let address = try XCTUnwrap(controllerAddress(0))
        let read = try runTool("beryl", ["gatt", "--runtime-dir", run(1), "--peer", address, "read", "FFF1", "--timeout", "20", "--json"])
        XCTAssertEqual(read.status, 0, read.stderr)
        XCTAssertEqual(JSONLines.events("read", in: read.stdout).map { $0["value"] as? String }, ["626572796c"], "the cached value \"beryl\": \(read.stdout)")
        XCTAssertEqual(Array(try app.call(pingRequest([7])).pong.payload), [7], "the app's session is still served")

        // The app's peripheral is known under its identifier still; the one only the lab's link made known is forgotten.
        let known = try app.call(managerRequest { $0.retrievePeripherals = .init() }).manager.peripherals.peripherals
        XCTAssertTrue(known.contains { $0.identifier == appsIdentifier && $0.address == appsPeripheral }, "\(known)")
        XCTAssertFalse(known.contains { $0.identifier == record.peripherals.first }, "the lab's peripheral outlived its factory reset: \(known)")
    }

    // MARK: 3

    /// ConnectLE to an address nobody advertises, abandoned at its 1 s deadline, leaves nothing pending: a ConnectLE to
    /// a real advertiser right after succeeds. Without LE Create Connection Cancel (or with the lab's attempt left
    /// waiting in managerd) the second one meets RESOURCE_EXHAUSTED (managerd's busy) or the controller's Command
    /// Disallowed, and never connects.
    func testACancelledConnectLeavesNoPendingConnection() async throws {
        try bringUp(2)
        let (peer, peerWelcome) = try openLab(1)
        _ = try peer.call(managerRequest {
            $0.labAdvertise = .with {
                $0.data = Self.labAdvertisingData
                $0.connectable = true
            }
        })
        let peerAddress = try XCTUnwrap(addressBytes(peerWelcome.publicAddress), "stack 1's address: '\(peerWelcome.publicAddress)'")
        let host = try await pandora(0).host

        // berylsim's controllers are 5A:…; nothing answers at C0:FF:EE:00:00:01.
        let absent = Pandora_ConnectLERequest.with { $0.public = Data([0xC0, 0xFF, 0xEE, 0x00, 0x00, 0x01]) }
        let abandoned: Result<Pandora_ConnectLEResponse, any Error>? = await finish(within: .seconds(10)) {
            try await host.connectLE(absent, options: .within(.seconds(1)))
        }
        let abandonedCode = abandoned?.rpcCode
        XCTAssertTrue(abandonedCode == .deadlineExceeded || abandonedCode == .cancelled,
                      "ConnectLE to an absent peer with a 1 s deadline: \(String(describing: abandoned))")

        // The cancel reaches managerd just after the caller's deadline; a pending attempt is busy for ever.
        let present = Pandora_ConnectLERequest.with { $0.public = peerAddress }
        let retryUntil = ContinuousClock.now + .seconds(3)
        var connected: Result<Pandora_ConnectLEResponse, any Error>?
        while true {
            connected = await finish(within: .seconds(15)) { try await host.connectLE(present, options: .within(.seconds(10))) }
            guard connected?.rpcCode == .resourceExhausted, ContinuousClock.now < retryUntil else { break }
            try await Task.sleep(for: .milliseconds(200))
        }
        guard case .success(let response)? = connected else {
            let hint = connected?.rpcCode == .resourceExhausted
                ? " — managerd still holds the abandoned attempt: the deadline never withdrew it (gRPC signals it through ServerContext.cancellation, not by cancelling the handler's task)"
                : ""
            return XCTFail("ConnectLE to an advertising peer after an abandoned attempt: \(String(describing: connected))\(hint)")
        }
        guard case .connection(let connection)? = response.result else { return XCTFail("no connection: \(response)") }
        XCTAssertEqual(connection.cookie.value.count, 4)

        // The other side of the air: a link up, with stack 1 as peripheral.
        let up = peer.nextManagerEvent(within: .seconds(5)) { event in
            if case .lab(let lab)? = event.kind, case .linkUp(let link)? = lab.kind { return !link.central }
            return false
        }
        XCTAssertNotNil(up, "the advertiser saw no link come up")
    }

    // MARK: 4

    /// What a lab harness gets wrong is refused at once with INVALID_ARGUMENT (BR/EDR with UNIMPLEMENTED), never hangs,
    /// and leaves the server serving.
    func testMalformedRequestsGetInvalidArgument() async throws {
        try bringUp(1)
        let host = try await pandora(0).host
        let options = CallOptions.within(.seconds(5))

        let noAddress = Pandora_ConnectLERequest()
        let shortAddress = Pandora_ConnectLERequest.with { $0.public = Data([1, 2, 3, 4, 5]) }
        let shortCookie = Pandora_DisconnectRequest.with { $0.connection.cookie.value = Data([0, 0, 1]) }
        let longData = Pandora_AdvertiseRequest.with {
            $0.legacy = true
            $0.data.manufacturerSpecificData = Data(repeating: 0xAB, count: 40)
        }
        let unknownOwnAddress = Pandora_ScanRequest.with {
            $0.legacy = true
            $0.ownAddressType = .UNRECOGNIZED(9)
        }
        let calls: [(String, @Sendable () async throws -> Void)] = [
            ("ConnectLE without an address", { _ = try await host.connectLE(noAddress, options: options) }),
            ("ConnectLE with a 5-byte address", { _ = try await host.connectLE(shortAddress, options: options) }),
            ("Disconnect with a 3-byte cookie", { _ = try await host.disconnect(shortCookie, options: options) }),
            ("Advertise with 40 bytes of manufacturer data", {
                try await host.advertise(longData, options: options) { response in
                    for try await _ in response.messages {}
                }
            }),
            ("Scan with own_address_type 9", {
                try await host.scan(unknownOwnAddress, options: options) { response in
                    for try await _ in response.messages {}
                }
            }),
        ]
        for (name, call) in calls {
            let outcome = await finish(within: .seconds(8), call)
            XCTAssertEqual(outcome?.rpcCode, .invalidArgument, "\(name): \(String(describing: outcome))")
        }

        let brEdr = Pandora_ConnectRequest.with { $0.address = Data([1, 2, 3, 4, 5, 6]) }
        let refused: Result<Void, any Error>? = await finish(within: .seconds(8)) { _ = try await host.connect(brEdr, options: options) }
        XCTAssertEqual(refused?.rpcCode, .unimplemented, "Connect (BR/EDR): \(String(describing: refused))")

        let read: Result<Data, any Error>? = await finish(within: .seconds(15)) {
            try await host.readLocalAddress(Google_Protobuf_Empty(), options: .within(.seconds(10))).address
        }
        guard case .success(let address)? = read else { return XCTFail("ReadLocalAddress after the refusals: \(String(describing: read))") }
        XCTAssertEqual(address, addressBytes(controllerAddress(0) ?? ""))
    }

    // MARK: 5

    /// A Scan stream ends (normally or with an error) when managerd dies under the lab session, rather than hanging,
    /// and later calls fail at once as UNAVAILABLE.
    func testStreamsEndWhenTheLabSessionEnds() async throws {
        try bringUp(2)
        let (peer, _) = try openLab(1)
        _ = try peer.call(managerRequest { $0.labAdvertise = .with { $0.data = Self.labAdvertisingData } })
        let harness = try await pandora(0)
        let host = harness.host

        let watch = StreamWatch()
        let request = Pandora_ScanRequest.with {
            $0.legacy = true
            $0.passive = true
        }
        let scanning = Task {
            do {
                try await host.scan(request, options: .within(.seconds(120))) { response in
                    for try await _ in response.messages { watch.heard() }
                }
                watch.end("normally")
            } catch {
                watch.end("\(error)")
            }
        }
        defer { scanning.cancel() }

        let reporting = await watch.wait(.seconds(15)) { $0.messages > 0 }
        XCTAssertTrue(reporting, "the Scan stream delivered nothing while stack 1 advertised (ended: \(watch.now.ended ?? "no"))")
        XCTAssertNil(watch.now.ended, "the Scan stream ended before managerd did")

        let pid = try XCTUnwrap(scratch.pid(of: "managerd0"))
        XCTAssertEqual(kill(pid, SIGKILL), 0)
        let ended = await watch.wait(.seconds(5)) { $0.ended != nil }
        XCTAssertTrue(ended, "the Scan stream was still open 5 s after managerd died (\(watch.now.messages) reports)")
        XCTAssertNotNil(harness.lab.channel.closedReason, "the lab session did not notice managerd's end")

        let after: Result<Pandora_ReadLocalAddressResponse, any Error>? = await finish(within: .seconds(5)) {
            try await host.readLocalAddress(Google_Protobuf_Empty(), options: .within(.seconds(3)))
        }
        XCTAssertEqual(after?.rpcCode, .unavailable, "a call after the session ended: \(String(describing: after))")
    }
}
