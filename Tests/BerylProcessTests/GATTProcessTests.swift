import BerylBench
import BerylCore
import BerylDaemonKit
import BerylHCI
import BerylIPC
import BerylSupervisor
import Foundation
import XCTest

/// Two stacks (hcid + attd) on berylsim driven over their sockets: Service Changed from a peripheral whose database
/// changes, and the pacing of notifications (busy, then ReadyToUpdate).
final class GATTProcessTests: XCTestCase {
    var scratch: Scratch!
    var central: IPCClient!
    var publisher: IPCClient!
    var link: UInt32 = 0

    override func setUpWithError() throws {
        scratch = try Scratch()
        let sim = scratch.root + "/sim"
        try scratch.start("berylsim", [Executables.path("berylsim"), "--dir", sim, "--controllers", "2"], socket: sim + "/control.sock")
        for index in 0...1 {
            let run = "\(scratch.root)/run\(index)"
            let common = ["--runtime-dir", run, "--state-dir", "\(scratch.root)/state\(index)"]
            try scratch.start("hcid\(index)", [Executables.path("hcid")] + common + ["--transport", "unix:\(sim)/controller-\(index).sock"], socket: run + "/hcid.sock")
            XCTAssertTrue(eventually { StackProbe.controllerInfo(at: run + "/hcid.sock")?.state == .poweredOn })
            try scratch.start("attd\(index)", [Executables.path("attd")] + common, socket: run + "/attd.sock")
        }
        central = try IPCClient(path: "\(scratch.root)/run0/attd.sock")
        publisher = try IPCClient(path: "\(scratch.root)/run1/attd.sock")
    }

    override func tearDown() { scratch.stopAll() }

    private func publish(_ uuid: String, notify: Bool = false) throws -> Beryl_Ipc_V1_ServicePublished {
        var request = Request()
        request.att.publishService.service = .with {
            $0.uuid = uuid
            $0.primary = true
            $0.characteristics = [.with { $0.uuid = "2A19"; $0.properties = notify ? 0x12 : 0x02; $0.permissions = 0x01; $0.cached = true; $0.value = Data([42]) }]
        }
        return try publisher.call(request).att.servicePublished
    }

    private func connect() throws {
        let centralHCI = try IPCClient(path: "\(scratch.root)/run0/hcid.sock")
        let peripheralHCI = try IPCClient(path: "\(scratch.root)/run1/hcid.sock")
        try HCIBenchmark.subscribe(centralHCI)
        _ = try HCIBenchmark.command(peripheralHCI, HCICommands.leSetAdvertisingParameters(interval: 0x20))
        _ = try HCIBenchmark.command(peripheralHCI, HCICommandPacket(.leSetAdvertisingEnable, parameters: [1]))
        let address = try XCTUnwrap(StackProbe.controllerInfo(at: "\(scratch.root)/run1/hcid.sock").flatMap { DeviceAddress($0.address) })
        _ = try HCIBenchmark.command(centralHCI, HCICommands.leCreateConnection(peer: address, interval: 6, supervisionTimeout: 100))
        link = UInt32(try HCIBenchmark.waitForHandle(centralHCI))
        XCTAssertTrue(eventually {
            var bearers = Request()
            bearers.att.getBearers = .init()
            return (try? self.central.call(bearers).att.bearers.bearers.contains { $0.connectionHandle == self.link && $0.attMtu > 23 }) == true
        }, "attd saw the link and exchanged the MTU")
    }

    private func discover() throws -> Beryl_Ipc_V1_GattDatabase {
        var request = Request()
        request.att.gattDiscover.connectionHandle = link
        return try central.call(request, timeout: .seconds(20)).att.gattDatabase
    }

    /// GATT/CL/GAS/BV-01-C: the peripheral's database grows; its Service Changed indication makes the central's attd
    /// re-discover the range and tell its clients what is there now.
    func testServiceChangedIsIndicatedAndTheRangeRediscovered() throws {
        _ = try publish("180F")
        try connect()
        let before = try discover()
        XCTAssertEqual(before.services.map(\.uuid), ["1800", "1801", "180F"])
        usleep(300_000)  // the Service Changed CCCD write follows discovery
        _ = central.takeEvents()
        let added = try publish("181A")
        var changed: Beryl_Ipc_V1_GattServiceChanged?
        XCTAssertTrue(eventually(.seconds(10)) {
            while let envelope = try? self.central.receive(timeout: .milliseconds(50)) {
                if case .gattServiceChanged(let event)? = envelope.event.att.kind { changed = event }
            }
            return changed != nil
        }, "no Service Changed reached the central's clients")
        XCTAssertEqual(changed?.startHandle, added.startHandle)
        XCTAssertEqual(changed?.endHandle, added.endHandle)
        XCTAssertEqual(changed?.database.services.map(\.uuid), ["181A"])
        XCTAssertEqual(changed?.database.services.first?.characteristics.first?.uuid, "2A19")
    }

    /// Service Changed indicated again while the central's attd is still re-discovering is merged into one more
    /// re-discovery, not queued once per indication: five services published back to back reach the clients in fewer
    /// events, and every one of them is in what they hear.
    func testServiceChangesDuringARediscoveryAreMerged() throws {
        _ = try publish("180F")
        try connect()
        _ = try discover()
        usleep(300_000)  // the Service Changed CCCD write follows discovery
        _ = central.takeEvents()
        // Each service has 24 notifying characteristics, so re-discovering one takes dozens of round trips: the other
        // four are published, and indicated, well within the first re-discovery however loaded the machine is.
        var added: [String] = []
        for uuid in ["181A", "181B", "181C", "181D", "181E"] {
            var request = Request()
            request.att.publishService.service = .with {
                $0.uuid = uuid
                $0.primary = true
                $0.characteristics = (0..<24).map { index in
                    .with { $0.uuid = String(format: "2A%02X", 0x19 + index); $0.properties = 0x12; $0.permissions = 0x01; $0.cached = true; $0.value = Data([42]) }
                }
            }
            added.append(String(try publisher.call(request).att.servicePublished.startHandle))
        }
        var heard: [Beryl_Ipc_V1_GattServiceChanged] = []
        _ = eventually(.seconds(15)) {
            while let envelope = try? self.central.receive(timeout: .milliseconds(50)) {
                if case .gattServiceChanged(let event)? = envelope.event.att.kind { heard.append(event) }
            }
            return Set(heard.flatMap { $0.database.services.map(\.uuid) }).isSuperset(of: ["181A", "181B", "181C", "181D", "181E"])
        }
        XCTAssertEqual(Set(heard.flatMap { $0.database.services.map(\.uuid) }).intersection(["181A", "181B", "181C", "181D", "181E"]).count, 5,
                       "\(heard.map { "\($0.startHandle)-\($0.endHandle)" }) for services at \(added)")
        XCTAssertLessThan(heard.count, 5, "one re-discovery at a time, the changes meanwhile merged")
    }

    /// Filtered discovery and the read procedures through the socket: by service UUID, Read Multiple, Read By Type.
    func testFilteredDiscoveryReadMultipleAndReadByType() throws {
        let battery = try publish("180F")
        let other = try publish("181A")
        try connect()
        var filtered = Request()
        filtered.att.gattDiscover = .with { $0.connectionHandle = link; $0.serviceUuids = ["181A"] }
        XCTAssertEqual(try central.call(filtered, timeout: .seconds(20)).att.gattDatabase.services.map(\.uuid), ["181A"])
        var multiple = Request()
        multiple.att.gattReadMultiple = .with { $0.connectionHandle = link; $0.handles = [battery.valueHandles[0], other.valueHandles[0]] }
        XCTAssertEqual(Array(try central.call(multiple).att.gattValue.value), [42, 42])
        var byType = Request()
        byType.att.gattReadByType = .with { $0.connectionHandle = link; $0.uuid = "2A19" }
        XCTAssertEqual(try central.call(byType).att.gattValues.values.map(\.handle), [battery.valueHandles[0], other.valueHandles[0]])
        var bad = Request()
        bad.att.gattReadByType = .with { $0.connectionHandle = link; $0.uuid = "not a uuid" }
        XCTAssertThrowsError(try central.call(bad))
    }

    /// Requests naming impossible handles, or services shaped like GATT's own declarations, are refused with the field
    /// at fault; attd (which trapped on the first two) serves on.
    func testImpossibleHandlesAndDeclarationTypesAreRefused() throws {
        func refusal(_ client: IPCClient, _ request: Request) -> (IPCErrorCode, String)? {
            do {
                _ = try client.call(request)
                return nil
            } catch {
                guard case .remote(let code, _, let field, _) = error else { return nil }
                return (code, field)
            }
        }
        for (characteristic, descriptor) in [("2800", "2901"), ("2A19", "2803")] {
            var request = Request()
            request.att.publishService.service = .with {
                $0.uuid = "180F"
                $0.primary = true
                $0.characteristics = [.with {
                    $0.uuid = characteristic; $0.properties = 0x02; $0.permissions = 0x01; $0.cached = true; $0.value = Data(repeating: 7, count: 300)
                    $0.descriptors = [.with { $0.uuid = descriptor; $0.value = Data([1]) }]
                }]
            }
            let refused = refusal(publisher, request)
            XCTAssertEqual(refused?.0, .invalidArgument, "\(characteristic)/\(descriptor)")
            XCTAssertTrue(refused?.1.hasSuffix(characteristic == "2800" ? "characteristics[0].uuid" : "descriptors[0].uuid") == true, "\(String(describing: refused))")
        }
        _ = try publish("180F")
        try connect()
        var backwards = Request()
        backwards.att.gattDiscover = .with { $0.connectionHandle = link; $0.startHandle = 10; $0.endHandle = 5 }
        XCTAssertEqual(refusal(central, backwards)?.1, "start_handle")
        var pastTheEnd = Request()
        pastTheEnd.att.gattSubscribe = .with { $0.connectionHandle = link; $0.valueHandle = 0xFFFF_FFFF; $0.enable = true }
        XCTAssertEqual(refusal(central, pastTheEnd)?.1, "value_handle")
        var namedPastTheEnd = Request()
        namedPastTheEnd.att.gattSubscribe = .with { $0.connectionHandle = link; $0.valueHandle = 3; $0.cccdHandle = 0x1_0004; $0.enable = true }
        XCTAssertEqual(refusal(central, namedPastTheEnd)?.1, "cccd_handle")
        XCTAssertEqual(try discover().services.map(\.uuid), ["1800", "1801", "180F"], "attd still serves")
    }

    /// updateValue's contract: a full transmit queue refuses the notification (busy) and ReadyToUpdate follows.
    func testNotificationsAreRefusedWhenTheQueueIsFullThenReadyFollows() throws {
        let service = try publish("180F", notify: true)
        try connect()
        var subscribe = Request()
        subscribe.att.gattSubscribe = .with { $0.connectionHandle = link; $0.valueHandle = service.valueHandles[0]; $0.enable = true }
        _ = try central.call(subscribe)
        // All 400 sent before any answer is read, as an app flooding updateValue would: one at a time, a loaded machine
        // can pace the calls slower than the link drains them, and nothing would ever be refused.
        let ids = Set(try (0..<400).map { index in
            try publisher.send(.with { $0.att.notify = .with { $0.valueHandle = service.valueHandles[0]; $0.value = Data([UInt8(index % 256)] + [UInt8](repeating: 0, count: 200)) } })
        })
        var refused = 0
        var accepted = 0
        var ready = false
        while refused + accepted < ids.count {
            let envelope = try publisher.receive(timeout: .seconds(10))
            if case .readyToUpdate? = envelope.event.att.kind { ready = true }
            guard ids.contains(envelope.requestID), case .response(let response)? = envelope.body else { continue }
            if case .error(let error)? = response.kind {
                XCTAssertEqual(error.code, .busy)
                refused += 1
            } else {
                XCTAssertEqual(response.att.notified.peers, 1)
                accepted += 1
            }
        }
        XCTAssertGreaterThan(refused, 0, "400 notifications at once cannot all fit")
        XCTAssertGreaterThanOrEqual(accepted, 32)
        XCTAssertTrue(eventually(.seconds(10)) {
            while let envelope = try? self.publisher.receive(timeout: .milliseconds(50)) {
                if case .readyToUpdate? = envelope.event.att.kind { ready = true }
            }
            return ready
        }, "no ReadyToUpdate after the queue drained")
        var received = 0
        _ = eventually(.seconds(5)) {
            while let envelope = try? self.central.receive(timeout: .milliseconds(50)) {
                if case .gattNotification? = envelope.event.att.kind { received += 1 }
            }
            return received >= accepted
        }
        XCTAssertEqual(received, accepted, "every accepted notification arrived, none of the refused")
    }

    /// A dynamic, writable characteristic published by its own session of the peripheral's attd.
    private func publishWritable(_ uuid: String, by session: IPCClient) throws -> UInt32 {
        var request = Request()
        request.att.publishService.service = .with {
            $0.uuid = uuid
            $0.primary = true
            $0.characteristics = [.with { $0.uuid = "2A3D"; $0.properties = 0x0A; $0.permissions = 0x03 }]
        }
        return try XCTUnwrap(session.call(request).att.servicePublished.valueHandles.first)
    }

    /// The next write a peer asks of this publisher, passing over the bearer events every session hears.
    private func writeRequested(at client: IPCClient, within timeout: Duration) -> Beryl_Ipc_V1_WriteRequested? {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            guard let envelope = try? client.receive(timeout: .milliseconds(50)), case .event(let event)? = envelope.body,
                  case .writeRequested(let write)? = event.att.kind else { continue }
            return write
        }
        return nil
    }

    private func reliableWrite(_ handles: [UInt32]) -> Result<Void, IPCClientError> {
        var request = Request()
        request.att.gattReliableWrite = .with {
            $0.connectionHandle = link
            $0.writes = handles.map { handle in .with { $0.handle = handle; $0.value = Data([7]) } }
        }
        return Result { () throws(IPCClientError) in _ = try central.call(request, timeout: .seconds(20)) }
    }

    /// An Execute Write whose queued writes fall in two publishers' services is answered Unlikely Error and reaches
    /// neither (one would be handed the other's values, and its answer would settle both); one publisher's own batch
    /// reaches it whole and its answer settles it (Core Vol 3 Part F §3.4.6).
    func testAnExecuteWriteAcrossTwoPublishersReachesNeither() throws {
        let other = try IPCClient(path: "\(scratch.root)/run1/attd.sock")
        let mine = try publishWritable("FF01", by: publisher)
        let theirs = try publishWritable("FF02", by: other)
        try connect()
        guard case .failure(.remote(_, _, _, let detail)) = reliableWrite([mine, theirs]) else { return XCTFail("the batch across two publishers is refused") }
        XCTAssertEqual(detail.attError, 0x0E, "Unlikely Error")
        XCTAssertNil(writeRequested(at: publisher, within: .milliseconds(500)), "neither publisher is asked")
        XCTAssertNil(writeRequested(at: other, within: .milliseconds(500)))

        var single = Request()
        single.att.gattReliableWrite = .with { $0.connectionHandle = link; $0.writes = [.with { $0.handle = mine; $0.value = Data([7]) }] }
        let sent = try central.send(single)
        let write = try XCTUnwrap(writeRequested(at: publisher, within: .seconds(10)), "one publisher's batch is its to answer")
        XCTAssertEqual(write.writes.map(\.handle), [mine])
        var answer = Request()
        answer.att.answerWrite.id = write.id
        _ = try publisher.call(answer)
        var settled: Beryl_Ipc_V1_Response?
        while settled == nil {
            let envelope = try central.receive(timeout: .seconds(10), requestID: sent)
            if envelope.requestID == sent, case .response(let response)? = envelope.body { settled = response }
        }
        if case .error(let error)? = settled?.kind { XCTFail("the answered batch succeeds: \(error)") }
    }
}
