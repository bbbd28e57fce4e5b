import BerylCore
@testable import BerylHCI
import BerylSim
import XCTest

final class BringUpTests: XCTestCase {
    func testBringUpReachesPoweredOnAndLearnsTheController() {
        let harness = HostHarness()
        harness.startAll()
        let host = harness.hosts[0]
        XCTAssertEqual(host.state, .poweredOn)
        XCTAssertEqual(harness.states[0], [.resetting, .poweredOn])
        XCTAssertEqual(host.facts.address, harness.air.controllers[0].publicAddress)
        XCTAssertEqual(host.facts.aclMTU, 251)
        XCTAssertEqual(host.facts.aclBuffers, 8)
        XCTAssertEqual(host.facts.aclBufferSource, "LE v2")
        XCTAssertEqual(host.facts.filterAcceptListSize, 16)
        XCTAssertEqual(host.facts.hciVersion, 0x0D)
        XCTAssertEqual(harness.air.controllers[0].commandFlowViolations, 0, "bring-up honours the command credit")
    }

    /// A controller whose public address is all zeros (Bumble's, some dongles): the host takes its static random
    /// identity and sets it as the controller's random address before anything else (Core Vol 6 Part B §1.3.2.1).
    func testAControllerWithoutAPublicAddressGetsTheStaticIdentity() {
        let identity = BDAddress("C3:11:22:33:44:55")!
        let harness = HostHarness(controllers: 1) { _ in HCIHost(staticIdentity: identity) }
        harness.rewrite = { _, bytes in
            // Read BD_ADDR's Command Complete: 04 0E len credits 09 10 status address.
            guard bytes.count >= 13, bytes[0] == 0x04, bytes[1] == 0x0E, bytes[4] == 0x09, bytes[5] == 0x10 else { return bytes }
            return Array(bytes[0..<7]) + [UInt8](repeating: 0, count: 6) + Array(bytes[13...])
        }
        harness.startAll()
        let host = harness.hosts[0]
        XCTAssertEqual(host.state, .poweredOn)
        XCTAssertEqual(host.facts.address, identity)
        XCTAssertTrue(host.facts.addressIsRandom)
        let sent = harness.commandsSent[0]
        let setAt = sent.firstIndex(of: HCIOpcode.leSetRandomAddress.rawValue)
        XCTAssertNotNil(setAt, "LE Set Random Address was sent")
        XCTAssertEqual(setAt.map { sent[$0 - 1] }, HCIOpcode.readBDAddr.rawValue, "right after Read BD_ADDR")

        // With a public address, the identity is not used.
        let plain = HostHarness(controllers: 1) { _ in HCIHost(staticIdentity: identity) }
        plain.startAll()
        XCTAssertEqual(plain.hosts[0].facts.address, plain.air.controllers[0].publicAddress)
        XCTAssertFalse(plain.hosts[0].facts.addressIsRandom)
        XCTAssertFalse(plain.commandsSent[0].contains(HCIOpcode.leSetRandomAddress.rawValue))
    }

    /// Bring-up suggests whole 251-octet PDUs for new links (Core Vol 4 Part E §7.8.35) within what the controller
    /// supports (§7.8.46); each new link's central then asks for the 2M PHY (§7.8.49), and both link layers move to both.
    func testNewLinksStartWithTheLongestDataPDUAndThe2MPHY() {
        let harness = HostHarness()
        harness.startAll()
        let sent = harness.commandsSent[0]
        let read = sent.firstIndex(of: HCIOpcode.leReadMaximumDataLength.rawValue)
        XCTAssertNotNil(read)
        XCTAssertEqual(read.map { sent[$0 + 1] }, HCIOpcode.leWriteSuggestedDefaultDataLength.rawValue, "written after reading the maximum")
        XCTAssertEqual(harness.hosts[0].facts.suggestedDataLength, DataLength(octets: 251, time: 2120))
        XCTAssertEqual(harness.air.controllers[1].suggestedDataLength.octets, 251)
        XCTAssertEqual(harness.air.controllers[1].suggestedDataLength.time, 2120)

        let (central, peripheral) = harness.connect()
        harness.run(for: .milliseconds(200))
        XCTAssertEqual(harness.commandsSent[0].filter { $0 == HCIOpcode.leSetPHY.rawValue }.count, 1, "once per link")
        XCTAssertFalse(harness.commandsSent[1].contains(HCIOpcode.leSetPHY.rawValue), "the central alone asks: two requests would collide")
        for index in 0...1 {
            XCTAssertEqual(harness.commandsSent[index].filter { $0 == HCIOpcode.leSetDataLength.rawValue }.count, 1,
                           "each side asks for its own transmit length, for controllers that do not start from the default")
        }
        XCTAssertEqual(harness.air.linkSnapshots.first?.phy, 2)
        XCTAssertEqual(harness.air.linkSnapshots.first?.maxOctets, 251)
        for (index, handle) in [(0, central), (1, peripheral)] {
            let le = harness.events[index].filter { $0.code == HCIEventCode.leMeta.rawValue }
            // LE PHY Update Complete: status 0, the handle, TX and RX PHY 2M (§7.7.65.12).
            XCTAssertTrue(le.contains { $0.parameters == [LESubevent.phyUpdateComplete.rawValue, 0, UInt8(handle & 0xFF), UInt8(handle >> 8), 2, 2] },
                          "controller \(index) reports the 2M PHY")
            // LE Data Length Change: 251 octets each way (§7.7.65.7).
            let change = le.first { $0.parameters.first == LESubevent.dataLengthChange.rawValue }?.parameters
            XCTAssertEqual(change.map { Array($0[3...4]) }, [251, 0], "controller \(index): transmit octets")
            XCTAssertEqual(change.map { Array($0[7...8]) }, [251, 0], "controller \(index): receive octets")
        }
    }

    /// A profile's no2MPHY keeps new links on the 1M PHY though the controller has the 2M one.
    func testTheNo2MPHYQuirkLeavesLinksOn1M() {
        let harness = HostHarness(controllers: 2) { _ in
            var quirks = ControllerQuirks()
            quirks.no2MPHY = true
            return HCIHost(quirks: quirks)
        }
        harness.startAll()
        XCTAssertTrue(harness.hosts[0].facts.hasLEFeature(bit: 8))
        _ = harness.connect()
        harness.run(for: .milliseconds(200))
        XCTAssertFalse(harness.commandsSent[0].contains(HCIOpcode.leSetPHY.rawValue))
        XCTAssertEqual(harness.air.linkSnapshots.first?.phy, 1)
        XCTAssertEqual(harness.air.linkSnapshots.first?.maxOctets, 251, "the data length still grows")
    }

    /// A profile that forbids the Data Length Extension keeps new links at 27 octets; a controller without the 2M PHY
    /// (LE feature bit 8) is not asked for it.
    func testTheDataLengthQuirkAndAControllerWithout2MKeepTheDefaults() {
        let harness = HostHarness(controllers: 2) { index in
            var quirks = ControllerQuirks()
            quirks.noDataLengthExtension = true
            return HCIHost(quirks: quirks)
        }
        harness.rewrite = { _, bytes in
            // LE Read Local Supported Features' Command Complete: 04 0E len credits 03 20 status features; bit 8 cleared.
            guard bytes.count >= 15, bytes[0] == 0x04, bytes[1] == 0x0E, bytes[4] == 0x03, bytes[5] == 0x20 else { return bytes }
            var rewritten = bytes
            rewritten[8] &= ~1
            return rewritten
        }
        harness.startAll()
        XCTAssertFalse(harness.commandsSent[0].contains(HCIOpcode.leWriteSuggestedDefaultDataLength.rawValue))
        XCTAssertNil(harness.hosts[0].facts.suggestedDataLength)
        XCTAssertFalse(harness.hosts[0].facts.hasLEFeature(bit: 8))
        _ = harness.connect()
        harness.run(for: .milliseconds(200))
        XCTAssertFalse(harness.commandsSent[0].contains(HCIOpcode.leSetPHY.rawValue))
        XCTAssertFalse(harness.commandsSent[0].contains(HCIOpcode.leSetDataLength.rawValue))
        XCTAssertEqual(harness.air.linkSnapshots.first?.phy, 1)
        XCTAssertEqual(harness.air.linkSnapshots.first?.maxOctets, 27)
    }

    func testSharedBuffersFallBackToReadBufferSize() {
        var config = SimConfig()
        config.sharedBuffers = true
        config.aclBufferSize = 1021
        config.aclBufferCount = 4
        let harness = HostHarness(config: config)
        harness.startAll()
        XCTAssertEqual(harness.hosts[0].facts.aclBufferSource, "shared BR/EDR")
        XCTAssertEqual(harness.hosts[0].facts.aclMTU, 1021)
        XCTAssertEqual(harness.hosts[0].facts.aclBuffers, 4)
    }

    func testProfileQuirksAndVendorStepsAreApplied() {
        let harness = HostHarness(controllers: 2) { index in
            var quirks = ControllerQuirks()
            quirks.noReadBufferSizeV2 = index == 0
            quirks.maxACLBuffers = index == 0 ? 2 : nil
            let steps = index == 0 ? [VendorStep(opcode: 0x0C6D, parameters: [1, 0], description: "LE host support", thenBaud: 3_000_000)] : []
            return HCIHost(quirks: quirks, vendorSteps: steps)
        }
        harness.startAll()
        XCTAssertEqual(harness.hosts[0].facts.aclBufferSource, "LE v1", "v2 avoided by quirk")
        XCTAssertEqual(harness.baudSwitches[0], [3_000_000], "the UART moves once the vendor step is accepted")
        let (central, _) = harness.connect()
        for _ in 0..<20 { XCTAssertEqual(harness.submit(0, handle: central, [UInt8](repeating: 1, count: 200)), .queued) }
        harness.run(for: .seconds(1))
        XCTAssertEqual(harness.maxInFlight[0], 2, "maxACLBuffers caps what is in flight")
        XCTAssertEqual(harness.acl[1].reduce(0) { $0 + $1.data.count }, 4000)
    }

    func testAVendorStepTheControllerRefusesMakesItUnsupported() {
        let harness = HostHarness(controllers: 1) { _ in HCIHost(vendorSteps: [VendorStep(opcode: 0xFC01, parameters: [], description: "unknown")]) }
        harness.startAll()
        harness.run(for: .seconds(10))
        guard case .unsupported(let why) = harness.hosts[0].state else { return XCTFail("\(harness.hosts[0].state)") }
        XCTAssertTrue(why.contains("status 0x1"), why)
        let refusals = harness.states[0].filter { if case .unsupported = $0 { true } else { false } }
        XCTAssertEqual(harness.logs[0].filter { $0.hasPrefix("bring-up failed") }.count, HCIHost.bringUpAttempts - 1, "tried again, in case the refusal was garbled")
        XCTAssertEqual(harness.commandsSent[0].filter { $0 == HCIOpcode.reset.rawValue }.count, HCIHost.bringUpAttempts, "each try starts with HCI Reset")
        XCTAssertEqual(refusals.count, 1, "clients hear the refusal once, when it stands")
        XCTAssertNil(harness.hosts[0].nextDeadline, "and no more tries")
    }

    /// A bring-up answer garbled by a corrupted stream (here: Read Local Supported Commands with a made-up status)
    /// does not leave the controller unsupported for good: bring-up runs again and the controller comes on.
    func testABringUpAnswerGarbledOnceIsTriedAgain() {
        let harness = HostHarness(controllers: 1)
        var garbled = false
        harness.rewrite = { _, bytes in
            // Command Complete (0x0E) for Read Local Supported Commands (0x1002): status 0x00 becomes 0xA5, once.
            guard !garbled, bytes.count > 6, bytes[0] == 0x04, bytes[1] == 0x0E, bytes[4] == 0x02, bytes[5] == 0x10 else { return bytes }
            garbled = true
            var copy = bytes
            copy[6] = 0xA5
            return copy
        }
        harness.hosts[0].start(at: harness.now)
        harness.run(until: { harness.hosts[0].state == .poweredOn }, timeout: .seconds(5))
        XCTAssertTrue(garbled)
        XCTAssertEqual(harness.hosts[0].state, .poweredOn)
        XCTAssertEqual(harness.states[0], [.resetting, .poweredOn], "resetting throughout, as far as clients know")
        XCTAssertEqual(harness.logs[0].filter { $0.hasPrefix("bring-up failed") }.count, 1)
        XCTAssertEqual(harness.commandsSent[0].filter { $0 == HCIOpcode.reset.rawValue }.count, 2, "a second bring-up, from HCI Reset")
    }
}

final class FlowControlTests: XCTestCase {
    func testClientsAreServedInTurnWithinTheCommandCredit() {
        let harness = HostHarness(controllers: 1)
        harness.startAll()
        let host = harness.hosts[0]
        for index in 0..<30 {
            host.submitCommand(HCICommandPacket(.readBDAddr), client: 1, token: UInt64(index), at: harness.now)
            host.submitCommand(HCICommandPacket(.leRand), client: 2, token: UInt64(100 + index), at: harness.now)
        }
        harness.run(until: { harness.answers[0].count == 60 }, timeout: .seconds(5))
        XCTAssertEqual(harness.answers[0].count, 60)
        XCTAssertEqual(harness.air.controllers[0].commandFlowViolations, 0)
        let order = harness.answers[0].map(\.client)
        XCTAssertEqual(Array(order.prefix(6)), [1, 2, 1, 2, 1, 2], "round robin, not one client's backlog first")
        XCTAssertTrue(harness.answers[0].allSatisfy { ($0.client == 1) == ($0.event.parameters[1] == 0x09) }, "each answer reached its sender")
    }

    func testAClientThatDiesMidCommandDoesNotStallOthers() {
        let harness = HostHarness(controllers: 1)
        harness.startAll()
        let host = harness.hosts[0]
        host.submitCommand(HCICommandPacket(.readBDAddr), client: 7, token: 1, at: harness.now)
        host.submitCommand(HCICommandPacket(.leRand), client: 7, token: 2, at: harness.now)
        host.submitCommand(HCICommandPacket(.readLocalVersionInformation), client: 8, token: 3, at: harness.now)
        host.clientGone(7)
        harness.run(until: { harness.answers[0].contains { $0.token == 3 } }, timeout: .seconds(1))
        XCTAssertEqual(harness.answers[0].map(\.token), [3], "the dead client's answer is discarded, its queue dropped")
        XCTAssertEqual(host.state, .poweredOn)
    }

    func testResetIsRefusedToClientsAndCommandsBeforePowerOnFail() {
        let harness = HostHarness(controllers: 1)
        harness.hosts[0].submitCommand(HCICommandPacket(.readBDAddr), client: 1, token: 5, at: .zero)
        XCTAssertEqual(harness.hosts[0].takeOutputs().count, 1)
        harness.startAll()
        harness.hosts[0].submitCommand(HCICommandPacket(.reset), client: 1, token: 6, at: harness.now)
        let outputs = harness.hosts[0].takeOutputs()
        XCTAssertEqual(outputs.first, .commandFailed(client: 1, token: 6, reason: .reservedCommand))
    }
}

final class ACLFlowTests: XCTestCase {
    func testFragmentationAndCreditsUnderLoadNeverOverflowTheController() {
        let harness = HostHarness()
        harness.startAll()
        let (central, peripheral) = harness.connect()
        var expected: [UInt8] = []
        for index in 0..<60 {
            let pdu = (0..<700).map { UInt8(truncatingIfNeeded: $0 &+ index) }
            expected += pdu
            XCTAssertEqual(harness.submit(0, handle: central, pdu), .queued)
        }
        harness.run(until: { harness.acl[1].reduce(0) { $0 + $1.data.count } == expected.count }, timeout: .seconds(10))
        XCTAssertEqual(harness.acl[1].flatMap(\.data), expected)
        XCTAssertTrue(harness.acl[1].allSatisfy { $0.handle == peripheral })
        XCTAssertEqual(harness.air.controllers[0].aclOverflows, 0, "the strict controller saw no overflow")
        XCTAssertEqual(harness.maxInFlight[0], 8)
        XCTAssertEqual(harness.hosts[0].aclInFlight, 0, "every credit came back")
        XCTAssertEqual(harness.hosts[0].submitACL(handle: 0x0999, pdu: [1], at: harness.now), .unknownLink)
    }

    func testTwoLinksShareTheBuffersFairly() {
        let harness = HostHarness(controllers: 3)
        harness.startAll()
        let (first, _) = harness.connect()
        // A second link: controller 2 advertises, controller 0 connects.
        harness.command(2, .leSetAdvertisingParameters, [0x20, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7, 0])
        harness.command(2, .leSetAdvertisingEnable, [1])
        var create = ByteWriter()
        create.append([0x10, 0, 0x10, 0, 0, 0])
        create.append(harness.hosts[2].facts.address.bytes)
        create.u8(0)
        for value: UInt16 in [6, 6, 0, 100, 0, 0] { create.u16(value) }
        harness.command(0, .leCreateConnection, create.bytes)
        harness.run(until: { harness.handle(2) != nil }, timeout: .seconds(2))
        let second = harness.events[0].compactMap { event -> UInt16? in
            guard event.code == 0x3E, event.parameters.first == 0x0A, event.parameters[1] == 0 else { return nil }
            return UInt16(event.parameters[2]) | UInt16(event.parameters[3]) << 8
        }.last!
        XCTAssertNotEqual(first, second)
        for _ in 0..<40 { harness.submit(0, handle: first, [UInt8](repeating: 1, count: 251)) }
        for _ in 0..<4 { harness.submit(0, handle: second, [UInt8](repeating: 2, count: 251)) }
        harness.run(until: { harness.acl[2].reduce(0) { $0 + $1.data.count } == 4 * 251 }, timeout: .seconds(2))
        XCTAssertLessThan(harness.acl[1].reduce(0) { $0 + $1.data.count }, 40 * 251 / 2,
                          "the small transfer finished while the big one was under half done: turns were taken")
    }

    /// Data queued before a Disconnect reaches the peer first: the Disconnect waits for the link's queue to drain.
    func testADisconnectWaitsForTheLinksQueuedData() {
        let harness = HostHarness()
        harness.startAll()
        let (central, peripheral) = harness.connect()
        XCTAssertEqual(harness.hosts[0].connections[central]?.central, true)
        XCTAssertEqual(harness.hosts[1].connections[peripheral]?.central, false)
        let data = (0..<40).map { index in [UInt8](repeating: UInt8(index), count: 251) }
        for pdu in data { XCTAssertEqual(harness.submit(0, handle: central, pdu), .queued) }
        harness.command(0, .disconnect, [UInt8(central & 0xFF), UInt8(central >> 8), 0x13])
        harness.run(until: { harness.events[1].contains { $0.code == 0x05 } }, timeout: .seconds(5))
        XCTAssertEqual(harness.acl[1].flatMap(\.data), data.flatMap { $0 }, "all 40 PDUs arrived before the link went down")
        XCTAssertNil(harness.hosts[0].connections[central])
    }

    /// A Disconnection Complete lost in the stream leaves the host believing in the link; the controller answers the
    /// next Disconnect for it with Unknown Connection Identifier (0x02), and the host ends the link for every client.
    func testALostDisconnectionCompleteIsRecoveredByTheNextDisconnect() {
        let harness = HostHarness()
        harness.startAll()
        let (central, _) = harness.connect()
        harness.lose = { controller, code in controller == 0 && code == HCIEventCode.disconnectionComplete.rawValue }
        harness.air.setInRange(1, false)
        harness.run(for: .seconds(3))  // past the supervision timeout: both controllers dropped the link
        XCTAssertNotNil(harness.hosts[0].connections[central], "the host never heard")
        XCTAssertFalse(harness.events[0].contains { $0.code == 0x05 })
        harness.lose = nil
        let status = harness.command(0, .disconnect, [UInt8(central & 0xFF), UInt8(central >> 8), 0x13])
        XCTAssertEqual(status.first, 0x02, "Unknown Connection Identifier")
        XCTAssertNil(harness.hosts[0].connections[central])
        let ended = harness.events[0].first { $0.code == 0x05 }
        XCTAssertEqual(ended?.parameters, [0x00, UInt8(central & 0xFF), UInt8(central >> 8), 0x08], "every client hears the link end")
    }

    /// An ATT PDU as L2CAP carries it on the fixed ATT channel (Core Vol 3 Part A §3.1).
    private func att(_ opcode: UInt8, _ parameters: [UInt8] = [0x03, 0x00, 0x01]) -> [UInt8] {
        let length = UInt16(1 + parameters.count)
        return [UInt8(length & 0xFF), UInt8(length >> 8), 0x04, 0x00, opcode] + parameters
    }

    func testALinkOwedAnATTAnswerEndsWhenItsATTClientGoes() {
        let harness = HostHarness()
        harness.startAll()
        let (central, peripheral) = harness.connect()
        // A Write Request reaches the peripheral's attd, which dies before it answers.
        XCTAssertEqual(harness.submit(0, handle: central, att(0x12)), .queued)
        harness.run(until: { !harness.acl[1].isEmpty }, timeout: .seconds(1))
        harness.hosts[1].attOwnerGone(at: harness.now)
        harness.run(until: { harness.events[0].contains { $0.code == 0x05 } }, timeout: .seconds(1))
        let ended = harness.events[0].first { $0.code == 0x05 }
        XCTAssertEqual(ended?.parameters, [0x00, UInt8(central & 0xFF), UInt8(central >> 8), 0x13],
                       "the central hears Remote User Terminated at once, not after a 30 s ATT timeout")
        XCTAssertNil(harness.hosts[1].connections[peripheral])
    }

    func testALinkOwedNothingOutlivesItsATTClient() {
        let harness = HostHarness()
        harness.startAll()
        let (central, peripheral) = harness.connect()
        // Answered requests, a Write Command and a notification: nothing is owed.
        XCTAssertEqual(harness.submit(0, handle: central, att(0x12)), .queued)
        harness.run(until: { harness.acl[1].count == 1 }, timeout: .seconds(1))
        XCTAssertEqual(harness.submit(1, handle: peripheral, att(0x13, [])), .queued)
        XCTAssertEqual(harness.submit(0, handle: central, att(0x52)), .queued)
        XCTAssertEqual(harness.submit(0, handle: central, att(0x1B)), .queued)
        // An indication the peripheral's attd confirmed.
        XCTAssertEqual(harness.submit(0, handle: central, att(0x1D)), .queued)
        harness.run(until: { harness.acl[1].count == 4 }, timeout: .seconds(1))
        XCTAssertEqual(harness.submit(1, handle: peripheral, att(0x1E, [])), .queued)
        harness.run(for: .milliseconds(100))
        harness.hosts[1].attOwnerGone(at: harness.now)
        harness.run(for: .milliseconds(500))
        XCTAssertFalse(harness.events[0].contains { $0.code == 0x05 }, "the link stays up for attd's successor")
        XCTAssertNotNil(harness.hosts[1].connections[peripheral])

        // An indication left unconfirmed is owed, even once a request has been answered.
        XCTAssertEqual(harness.submit(0, handle: central, att(0x1D)), .queued)
        XCTAssertEqual(harness.submit(0, handle: central, att(0x0A, [0x03, 0x00])), .queued)
        harness.run(until: { harness.acl[1].count == 6 }, timeout: .seconds(1))
        XCTAssertEqual(harness.submit(1, handle: peripheral, att(0x0B, [0x01])), .queued)
        harness.hosts[1].attOwnerGone(at: harness.now)
        harness.run(until: { harness.events[0].contains { $0.code == 0x05 } }, timeout: .seconds(1))
        XCTAssertEqual(harness.events[0].first { $0.code == 0x05 }?.parameters.last, 0x13)
    }

    /// A corrupted stream resets the controller, which ends its links silently: the host tells its clients.
    func testAResetControllersLinksAreReportedDisconnected() {
        let harness = HostHarness()
        harness.startAll()
        let (central, _) = harness.connect()
        harness.events[0].removeAll()
        harness.hosts[0].controllerBytes([0x3B, 0x00], at: harness.now)  // no packet type starts with 0x3B
        harness.run(until: { harness.hosts[0].state == .poweredOn && !harness.events[0].isEmpty }, timeout: .seconds(2))
        XCTAssertEqual(harness.events[0].first { $0.code == 0x05 }?.parameters, [0x00, UInt8(central & 0xFF), UInt8(central >> 8), 0x08])
        XCTAssertTrue(harness.hosts[0].connections.isEmpty)
        XCTAssertEqual(harness.hosts[0].submitACL(handle: central, pdu: [1, 0, 4, 0, 0x0A], at: harness.now), .unknownLink, "no ACL to a link that is gone")
    }

    /// A lab's factory reset: the controller takes HCI Reset and the whole bring-up again, the links end as this host
    /// ended them (0x16), a client's command caught in flight fails rather than hanging, and the controller forgot the
    /// link (a new connection gets going from scratch).
    func testAResetAClientAsksForEndsLinksAsTerminatedByLocalHostAndBringsTheControllerBack() {
        let harness = HostHarness()
        harness.startAll()
        let (central, _) = harness.connect()
        harness.run(for: .milliseconds(100))  // the link's own set-up (data length, PHY) is answered first
        harness.events[0].removeAll()
        harness.states[0].removeAll()
        harness.commandsSent[0].removeAll()
        harness.hosts[0].submitCommand(HCICommandPacket(.readBDAddr), client: 7, token: 70, at: harness.now)
        harness.hosts[0].resetController(at: harness.now)
        harness.run(until: { harness.hosts[0].state == .poweredOn && harness.states[0].count >= 2 }, timeout: .seconds(2))
        XCTAssertEqual(harness.states[0], [.resetting, .poweredOn])
        XCTAssertEqual(harness.events[0].first { $0.code == 0x05 }?.parameters, [0x00, UInt8(central & 0xFF), UInt8(central >> 8), 0x16])
        XCTAssertTrue(harness.failures[0].contains { $0.client == 7 && $0.token == 70 }, "\(harness.failures[0])")
        XCTAssertEqual(Array(harness.commandsSent[0].prefix(2)), [HCIOpcode.readBDAddr.rawValue, HCIOpcode.reset.rawValue])
        XCTAssertTrue(harness.commandsSent[0].contains(HCIOpcode.leSetEventMask.rawValue), "the whole bring-up ran again")
        XCTAssertTrue(harness.hosts[0].connections.isEmpty)
        let (again, _) = harness.connect()
        XCTAssertNotNil(harness.hosts[0].connections[again])
    }

    /// A new hcid starts while its controller still advertises for the last one, and a central connects before the
    /// controller takes the new Reset: that LE Connection Complete speaks of a link the Reset ends. It is dropped,
    /// not held as a link nobody serves (fault run: kill -9 hcid × connecting, ATT timeouts on every later link).
    func testAConnectionReportedBeforeTheResetIsTakenIsForgotten() {
        let harness = HostHarness()
        harness.startAll()
        let fresh = HCIHost()
        harness.hosts[1] = fresh
        harness.events[1].removeAll()
        fresh.start(at: harness.now)
        // LE Connection Complete (Core Vol 4 Part E §7.7.65.1): handle 0x0051, peripheral role, a public peer.
        let early: [UInt8] = [0x04, 0x3E, 19, 0x01, 0x00, 0x51, 0x00, 0x01, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06,
                              0x18, 0x00, 0x00, 0x00, 0x48, 0x00, 0x00]
        fresh.controllerBytes(early, at: harness.now)
        XCTAssertTrue(harness.run(until: { fresh.state == .poweredOn }, timeout: .seconds(2)))
        XCTAssertNil(fresh.connections[0x51], "the reset ended it")
        XCTAssertFalse(harness.events[1].contains { $0.code == HCIEventCode.leMeta.rawValue }, "clients never hear of it")
        XCTAssertTrue(harness.logs[1].contains { $0.contains("link 0x51 connected before the controller took the reset") }, "\(harness.logs[1])")
        // A connection after the reset is a link as any other.
        let (_, peripheral) = harness.connect()
        XCTAssertNotNil(fresh.connections[peripheral])
    }

    /// The peripheral's host loses the LE Connection Complete (a corrupted stream): the first ACL on the link it never
    /// heard of ends it, so the central learns now instead of at its ATT timeout.
    func testALinkWhoseConnectionEventWasLostIsEndedOnItsFirstData() {
        let harness = HostHarness()
        harness.startAll()
        harness.lose = { controller, code in controller == 1 && code == HCIEventCode.leMeta.rawValue }
        let (central, peripheral) = harness.connect()
        harness.lose = nil
        XCTAssertNil(harness.hosts[1].connections[peripheral], "the peripheral's host never heard")
        XCTAssertEqual(harness.submit(0, handle: central, att(0x02, [0x00, 0x02])), .queued)  // Exchange MTU
        harness.run(until: { harness.events[0].contains { $0.code == 0x05 } }, timeout: .seconds(1))
        XCTAssertEqual(harness.events[0].first { $0.code == 0x05 }?.parameters, [0x00, UInt8(central & 0xFF), UInt8(central >> 8), 0x13])
        XCTAssertTrue(harness.acl[1].isEmpty, "nothing handed to clients for a link they do not know")
    }

    func testDisconnectionReturnsOutstandingCredits() {
        let harness = HostHarness()
        harness.startAll()
        let (central, _) = harness.connect()
        for _ in 0..<30 { harness.submit(0, handle: central, [UInt8](repeating: 3, count: 251)) }
        harness.air.setInRange(1, false)
        harness.run(until: { harness.events[0].contains { $0.code == 0x05 } }, timeout: .seconds(3))
        XCTAssertEqual(harness.hosts[0].aclInFlight, 0)
        XCTAssertEqual(harness.hosts[0].aclQueuedFragments, 0)
    }
}

final class ControllerFaultTests: XCTestCase {
    func testAFrozenControllerIsReportedUnresponsiveAndRecoversAfterThaw() {
        let harness = HostHarness(controllers: 1)
        harness.startAll()
        harness.air.freeze(0)
        harness.hosts[0].submitCommand(HCICommandPacket(.readBDAddr), client: 1, token: 9, at: harness.now)
        harness.run(until: { if case .unresponsive = harness.hosts[0].state { return true } else { return false } }, timeout: .seconds(3))
        XCTAssertEqual(harness.hosts[0].state, .unresponsive(opcode: HCIOpcode.readBDAddr.rawValue))
        XCTAssertEqual(harness.failures[0].map(\.token), [9], "the waiting client is told")
        // Still frozen: the resets that try to recover it go unanswered too, and it is the same silence.
        harness.run(for: .seconds(10))
        XCTAssertEqual(harness.hosts[0].timesUnresponsive, 1, "\(harness.logs[0])")
        harness.air.thaw(0)
        harness.run(until: { harness.hosts[0].state == .poweredOn }, timeout: .seconds(10))
        XCTAssertEqual(harness.hosts[0].state, .poweredOn)
        XCTAssertEqual(harness.hosts[0].timesUnresponsive, 1)

        // Frozen again once it was back: a second silence.
        harness.air.freeze(0)
        harness.hosts[0].submitCommand(HCICommandPacket(.readBDAddr), client: 1, token: 10, at: harness.now)
        harness.run(until: { if case .unresponsive = harness.hosts[0].state { return true } else { return false } }, timeout: .seconds(3))
        XCTAssertEqual(harness.hosts[0].timesUnresponsive, 2)
    }

    /// Bumble's controllers claim the 2M PHY and never answer LE Set PHY: no Command Status, no PHY Update Complete.
    /// A controller that goes on sending meanwhile does not implement the command rather than being frozen: the link
    /// stays up, the command's credit comes back for the next command, and the next link is not asked again.
    func testATuningCommandTheControllerLeavesUnansweredIsForgottenNotTakenForAFreeze() {
        let harness = HostHarness()
        harness.rewrite = { index, bytes in index == 0 ? Self.withoutAnswersToLESetPHY(bytes) : bytes }
        harness.startAll()
        let (central, peripheral) = harness.connect()
        XCTAssertEqual(harness.commandsSent[0].filter { $0 == HCIOpcode.leSetPHY.rawValue }.count, 1)
        // The peripheral sends: the central's controller goes on delivering ACL while LE Set PHY waits.
        for step in 0..<30 {
            harness.submit(1, handle: peripheral, [0x03, 0x00, 0x04, 0x00, 0x1B, 0x03, 0x00, UInt8(step)])
            harness.run(for: .milliseconds(100))
        }
        XCTAssertEqual(harness.hosts[0].state, .poweredOn, "\(harness.logs[0])")
        XCTAssertEqual(harness.hosts[0].unansweredTuning, [.leSetPHY])
        XCTAssertFalse(harness.events[0].contains { $0.code == HCIEventCode.disconnectionComplete.rawValue }, "the link stays")
        XCTAssertTrue(harness.hosts[0].acl.isOpen(central))
        XCTAssertEqual(harness.acl[0].count, 30, "everything the peripheral sent arrived")
        XCTAssertEqual(harness.hosts[0].timesUnresponsive, 0, "\(harness.logs[0])")
        // The credit came back: a client's command is answered at once.
        // Command Complete: credits, opcode, then the status (Core Vol 4 Part E §7.7.14).
        let answer = harness.command(0, .readBDAddr)
        XCTAssertEqual(answer.count > 3 ? answer[3] : nil, 0x00, "Read BD_ADDR answered with success")

        // The next link is not asked for the 2M PHY again.
        harness.command(0, .disconnect, [UInt8(central & 0xFF), UInt8(central >> 8), 0x13])
        harness.run(until: { harness.events[0].contains { $0.code == HCIEventCode.disconnectionComplete.rawValue } }, timeout: .seconds(2))
        _ = harness.connect()
        harness.run(for: .milliseconds(300))
        XCTAssertEqual(harness.commandsSent[0].filter { $0 == HCIOpcode.leSetPHY.rawValue }.count, 1, "asked on the first link only")
        XCTAssertEqual(harness.hosts[0].state, .poweredOn)
    }

    /// The same unanswered LE Set PHY from a controller that sent nothing since is a frozen controller, as before.
    func testATuningCommandUnansweredByASilentControllerIsAFreeze() {
        let harness = HostHarness()
        harness.rewrite = { index, bytes in index == 0 ? Self.withoutAnswersToLESetPHY(bytes) : bytes }
        harness.startAll()
        _ = harness.connect()
        harness.air.freeze(0)
        harness.run(until: { if case .unresponsive = harness.hosts[0].state { return true } else { return false } }, timeout: .seconds(3))
        XCTAssertEqual(harness.hosts[0].state, .unresponsive(opcode: HCIOpcode.leSetPHY.rawValue))
        XCTAssertEqual(harness.hosts[0].unansweredTuning, [])
        XCTAssertEqual(harness.hosts[0].timesUnresponsive, 1)
    }

    /// A controller's H4 output without its answers to LE Set PHY: the Command Status and the PHY Update Complete.
    private static func withoutAnswersToLESetPHY(_ bytes: [UInt8]) -> [UInt8] {
        HostHarness.keeping(bytes) { packet in
            // Command Status: status, credits, opcode (Core Vol 4 Part E §7.7.15); LE PHY Update Complete (§7.7.65.12).
            let isSetPHYStatus = packet.count >= 7 && packet[0] == 0x04 && packet[1] == HCIEventCode.commandStatus.rawValue
                && UInt16(packet[5]) | UInt16(packet[6]) << 8 == HCIOpcode.leSetPHY.rawValue
            let isPHYUpdate = packet.count >= 4 && packet[0] == 0x04 && packet[1] == HCIEventCode.leMeta.rawValue
                && packet[3] == LESubevent.phyUpdateComplete.rawValue
            return !isSetPHYStatus && !isPHYUpdate
        }
    }

    /// A flipped high byte in an ACL length: without a bound the framer would wait for 16 kB that never come,
    /// swallowing every later event (a link's end, the next link's start). Beyond what the controller sends, it resets.
    func testAnACLLengthBeyondWhatTheControllerSendsResetsAtOnce() {
        let harness = HostHarness()
        harness.startAll()
        let (_, peripheral) = harness.connect()
        harness.events[1].removeAll()
        harness.stateAndEventOrder[1].removeAll()
        let corrupted: [UInt8] = [0x02, UInt8(peripheral & 0xFF), UInt8(peripheral >> 8) | 0x20, 0x05, 0x40, 0x01, 0x00, 0x04, 0x00, 0x0A]
        harness.hosts[1].controllerBytes(corrupted, at: harness.now)
        XCTAssertEqual(harness.hosts[1].state, .resetting, "reset on the header, not after the packet")
        harness.run(until: { harness.hosts[1].state == .poweredOn }, timeout: .seconds(2))
        XCTAssertEqual(harness.events[1].first { $0.code == 0x05 }?.parameters,
                       [0x00, UInt8(peripheral & 0xFF), UInt8(peripheral >> 8), 0x08], "the link the reset ended is reported")
        // managerd tells a link the stack reset away from one the peer dropped by the state it heard first.
        let order = harness.stateAndEventOrder[1]
        XCTAssertLessThan(order.firstIndex(of: .state(.resetting)) ?? .max, order.firstIndex(of: .event(code: HCIEventCode.disconnectionComplete.rawValue)) ?? -1,
                          "resetting is said before the links it ends: \(order)")
    }

    /// A length corrupted upwards but within bounds leaves a packet that never completes; the host gives it a second.
    func testAPacketLeftUnfinishedResetsTheControllerAfterASecond() {
        let harness = HostHarness(controllers: 1)
        harness.startAll()
        let began = harness.now
        harness.hosts[0].controllerBytes([0x04, 0x0E, 0xC8, 0x01, 0x03, 0x0C, 0x00], at: harness.now)  // 200 bytes announced, 4 sent
        harness.run(for: .milliseconds(900))
        XCTAssertEqual(harness.hosts[0].state, .poweredOn, "a packet still arriving is waited for")
        harness.run(until: { harness.states[0].last == .resetting }, timeout: .seconds(1))
        XCTAssertEqual(harness.states[0].last, .resetting)
        XCTAssertGreaterThanOrEqual(harness.now - began, harness.hosts[0].partialPacketLimit)
        harness.run(until: { harness.hosts[0].state == .poweredOn }, timeout: .seconds(2))
        XCTAssertEqual(harness.hosts[0].state, .poweredOn)
        XCTAssertEqual(harness.command(0, .readBDAddr).dropFirst(3).first, 0x00, "serving again: Read BD_ADDR succeeds")
    }

    func testAFramerSkipsAnACLHeaderLongerThanAllowedAndFindsTheNextPacket() {
        var framer = H4Framer(maximumACLPayload: 251)
        let outputs = framer.feed([0x02, 0x40, 0x20, 0x2C, 0x11] + HCIPacket.event(HCIEventPacket(code: 0x0E, parameters: [1, 3, 0x0C, 0])).h4Bytes)
        XCTAssertEqual(outputs.first, .implausibleLength(.acl, 0x112C))
        XCTAssertEqual(outputs.last, .packet(.event(HCIEventPacket(code: 0x0E, parameters: [1, 3, 0x0C, 0]))))
        XCTAssertEqual(framer.bufferedByteCount, 0)
    }

    func testACorruptedStreamResetsTheControllerAndComesBack() {
        let harness = HostHarness(controllers: 1)
        harness.startAll()
        harness.air.setCorruptRate(0, 0.3)
        for index in 0..<20 { harness.hosts[0].submitCommand(HCICommandPacket(.leRand), client: 1, token: UInt64(index), at: harness.now) }
        harness.run(for: .milliseconds(200))
        harness.air.setCorruptRate(0, 0)
        harness.run(until: { harness.hosts[0].state == .poweredOn && harness.states[0].count > 2 }, timeout: .seconds(15))
        XCTAssertEqual(harness.hosts[0].state, .poweredOn)
        XCTAssertTrue(harness.states[0].contains(.resetting))
        XCTAssertEqual(harness.answers[0].count + harness.failures[0].count, 20, "every command answered or failed exactly once")
        XCTAssertEqual(Set(harness.answers[0].map(\.token) + harness.failures[0].map(\.token)).count, 20)
        XCTAssertNotEqual(Array(harness.command(0, .readBDAddr).suffix(6)), [], "serving again")
    }
}

/// A Pi's Broadcom radio: the profile moves the UART to 3 Mbaud, the .hcd patch's Launch_RAM restarts the firmware at
/// the boot speed, and hcid follows it down, waits for the boot, moves both up again and brings the new firmware up.
final class BroadcomPatchTests: XCTestCase {
    static let toThreeMegabaud = VendorStep(opcode: 0xFC18, parameters: [0, 0, 0xC0, 0xC6, 0x2D, 0x00], description: "Update_UART_Baud_Rate", thenBaud: 3_000_000)
    static let patch = [VendorStep(opcode: 0xFC2E, parameters: [], description: "Download_Minidriver"),
                        VendorStep(opcode: 0xFC4C, parameters: [0x00, 0x00, 0x21, 0x00, 0xAA, 0xBB], description: "patch record 0"),
                        VendorStep(opcode: 0xFC4C, parameters: [0x04, 0x00, 0x21, 0x00, 0xCC, 0xDD], description: "patch record 1"),
                        VendorStep(opcode: VendorStep.broadcomLaunchRAM, parameters: [0xFF, 0xFF, 0xFF, 0xFF], description: "patch record 2")]

    func testAPatchedFirmwareIsFollowedBackToItsBootSpeedAndBroughtUpAgain() throws {
        let harness = HostHarness(controllers: 1) { _ in
            HCIHost(vendorSteps: [Self.toThreeMegabaud] + Self.patch, transportBaud: 115_200)
        }
        let uart = BroadcomUART()
        harness.uarts[0] = uart
        harness.hosts[0].start(at: harness.now)
        XCTAssertTrue(harness.run(until: { harness.hosts[0].state == .poweredOn }, timeout: .seconds(5)), "\(harness.hosts[0].state)")
        XCTAssertEqual(harness.baudSwitches[0], [3_000_000, 115_200, 3_000_000])
        XCTAssertEqual(uart.controllerBaud, 3_000_000)
        XCTAssertEqual(uart.garbled, 0, "nothing was sent at the wrong speed")
        let sent = harness.commandsSent[0]
        let launched = try XCTUnwrap(sent.firstIndex(of: VendorStep.broadcomLaunchRAM))
        XCTAssertEqual(Array(sent[(launched + 1)...].prefix(3)), [0xFC18, HCIOpcode.reset.rawValue, HCIOpcode.readLocalVersionInformation.rawValue],
                       "the speed again, then HCI Reset and the standard bring-up for the new firmware")
        XCTAssertEqual(sent.filter { $0 == HCIOpcode.setEventMask.rawValue }.count, 2, "event masks set again after the boot")
        XCTAssertEqual(sent.filter { $0 == VendorStep.broadcomLaunchRAM }.count, 1, "the patch is not sent twice")
        XCTAssertFalse(harness.command(0, .readBDAddr).isEmpty, "a client's command is answered at the final speed")
    }

    func testAUSBBroadcomAfterItsPatchWaitsForTheBootThenResets() throws {
        let harness = HostHarness(controllers: 1) { _ in HCIHost(vendorSteps: Self.patch) }
        let uart = BroadcomUART()  // the model also answers vendor commands; no speed ever changes
        harness.uarts[0] = uart
        harness.hosts[0].start(at: harness.now)
        XCTAssertTrue(harness.run(until: { harness.hosts[0].state == .poweredOn }, timeout: .seconds(5)),
                      "\(harness.hosts[0].state) \(harness.logs[0]) \(harness.commandsSent[0].map { String($0, radix: 16) })")
        XCTAssertEqual(harness.baudSwitches[0], [])
        XCTAssertEqual(uart.garbled, 0, "nothing sent while the firmware booted")
        let sent = harness.commandsSent[0]
        let launched = try XCTUnwrap(sent.firstIndex(of: VendorStep.broadcomLaunchRAM))
        XCTAssertEqual(sent.dropFirst(launched + 1).first, HCIOpcode.reset.rawValue)
    }
}
