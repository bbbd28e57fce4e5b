@testable import BerylSim
import XCTest

final class ConnectionTests: XCTestCase {
    private func makeSim(_ count: Int = 2, leMask: UInt64 = 0x0DFF) -> SimHarness {
        let sim = SimHarness(controllers: count)
        for index in 0..<count { sim[index].powerOn(leMask: leMask) }
        return sim
    }

    private func disconnections(_ host: RawHost) -> [(handle: UInt16, reason: UInt8)] {
        host.events(0x05).map { (UInt16($0[1]) | UInt16($0[2]) << 8, $0[3]) }
    }

    func testConnectionCompleteOnBothSidesWithRolesAndPeers() {
        let sim = makeSim(3)
        sim.scan(2, active: false)
        let (central, peripheral) = sim.connect(central: 0, peripheral: 1, intervalUnits: 24, timeoutUnits: 100)
        let c = sim[0].leEvents(0x01)[0]
        let p = sim[1].leEvents(0x01)[0]
        XCTAssertEqual(c[0], 0, "success")
        XCTAssertEqual(c[3], 0, "central role")
        XCTAssertEqual(Array(c[5...10]), sim[1].address)
        XCTAssertEqual(Array(c[11...16]), [24, 0, 0, 0, 100, 0], "interval, latency, supervision timeout")
        XCTAssertEqual(p[3], 1, "peripheral role")
        XCTAssertEqual(Array(p[5...10]), sim[0].address)
        XCTAssertNotEqual(central, 0)
        XCTAssertNotEqual(peripheral, 0)
        // Legacy connectable advertising ends with the connection.
        let reportsBefore = sim[2].leEvents(0x02).count
        sim.run(for: .seconds(1))
        XCTAssertEqual(sim[2].leEvents(0x02).count, reportsBefore)
    }

    func testEnhancedConnectionCompleteReplacesTheLegacyEventWhenUnmasked() {
        let sim = makeSim(leMask: 0x0FFF)
        sim.advertise(1)
        let parameters = le16(0x60) + le16(0x60) + [0, 0] + sim[1].address + [0] + le16(24) + le16(24) + le16(0) + le16(100) + le16(0) + le16(0)
        XCTAssertEqual(sim[0].status(0x200D, parameters), 0)
        sim.run(for: .seconds(1))
        XCTAssertTrue(sim[0].leEvents(0x01).isEmpty)
        XCTAssertEqual(sim[0].leEvents(0x0A).count, 1)
        XCTAssertEqual(sim[0].leEvents(0x0A)[0].count, 30)
    }

    func testCreateConnectionCancelCompletesWithUnknownConnectionIdentifier() {
        let sim = makeSim()
        let parameters = le16(0x60) + le16(0x60) + [0, 0] + [1, 2, 3, 4, 5, 6] + [0] + le16(24) + le16(24) + le16(0) + le16(100) + le16(0) + le16(0)
        XCTAssertEqual(sim[0].status(0x200D, parameters), 0)
        XCTAssertEqual(sim[0].status(0x200D, parameters), 0x0C, "one connection attempt at a time")
        XCTAssertEqual(sim[0].call(0x200E), [0x01, 0x0E, 0x20, 0x00])
        sim.run(for: .milliseconds(10))
        XCTAssertEqual(sim[0].leEvents(0x01).first?.first, 0x02)
    }

    func testInvalidConnectionParametersAreRefused() {
        let sim = makeSim()
        // Supervision timeout 100 ms is not more than (1 + 0) × 100 ms × 2.
        let parameters = le16(0x60) + le16(0x60) + [0, 0] + [1, 2, 3, 4, 5, 6] + [0] + le16(80) + le16(80) + le16(0) + le16(10) + le16(0) + le16(0)
        XCTAssertEqual(sim[0].status(0x200D, parameters), 0x12)
    }

    func testDisconnectGivesLocalHostTerminatedAndThePeerTheReason() {
        let sim = makeSim()
        let (central, peripheral) = sim.connect(central: 0, peripheral: 1)
        XCTAssertEqual(sim[0].status(0x0406, le16(central) + [0x99]), 0x12, "not a disconnect reason")
        XCTAssertEqual(sim[0].status(0x0406, le16(0x0EEE) + [0x13]), 0x02)
        XCTAssertEqual(sim[0].status(0x0406, le16(central) + [0x13]), 0)
        sim.run(for: .milliseconds(100))
        XCTAssertEqual(disconnections(sim[0]).map(\.reason), [0x16])
        XCTAssertEqual(disconnections(sim[0]).map(\.handle), [central])
        XCTAssertEqual(disconnections(sim[1]).map(\.reason), [0x13])
        XCTAssertEqual(disconnections(sim[1]).map(\.handle), [peripheral])
    }

    func testOutOfRangeEndsTheLinkBySupervisionTimeout() {
        let sim = makeSim()
        _ = sim.connect(central: 0, peripheral: 1, timeoutUnits: 100)
        sim.air.setInRange(1, false)
        sim.run(for: .milliseconds(900))
        XCTAssertTrue(disconnections(sim[0]).isEmpty, "not before the 1 s supervision timeout")
        sim.run(for: .milliseconds(200))
        XCTAssertEqual(disconnections(sim[0]).map(\.reason), [0x08])
        XCTAssertEqual(disconnections(sim[1]).map(\.reason), [0x08])
    }

    func testACLIsDeliveredInLinkLayerFragmentsAndCompletedAfterDelivery() {
        let sim = makeSim()
        let (central, peripheral) = sim.connect(central: 0, peripheral: 1, intervalUnits: 40)
        let payload = (0..<100).map { UInt8($0) }
        sim[0].sendACL(handle: central, boundary: 0b00, payload)
        sim.run(for: .microseconds(500))
        XCTAssertTrue(sim[0].events(0x13).isEmpty, "no completion before the link layer delivered it")
        sim.run(for: .milliseconds(60))
        let received = sim[1].acl
        XCTAssertEqual(received.map(\.data.count), [27, 27, 27, 19], "default data length of 27 octets")
        XCTAssertEqual(received.map(\.boundary), [0b10, 0b01, 0b01, 0b01])
        XCTAssertTrue(received.allSatisfy { $0.handle == peripheral })
        XCTAssertEqual(received.flatMap(\.data), payload)
        XCTAssertEqual(sim[0].events(0x13), [[1] + le16(central) + le16(1)])
    }

    func testAnInstantLinkDeliversAndReturnsTheBufferAtOnceInOrder() {
        var config = SimConfig()
        config.link = .instant
        (config.aclBufferSize, config.aclBufferCount) = (27, 8)
        let sim = SimHarness(controllers: 2, config: config)
        for index in 0..<2 { sim[index].powerOn(leMask: 0x0DFF) }
        let (central, peripheral) = sim.connect(central: 0, peripheral: 1, intervalUnits: 800, timeoutUnits: 300)  // a 1 s interval
        let packets = (0..<64).map { sequence in [UInt8(sequence)] + [UInt8](repeating: 0xA5, count: 26) }
        for packet in packets { sim[1].sendACL(handle: peripheral, packet) }
        sim.run(for: .microseconds(500))  // the H4 bytes cross; no connection event comes in this time
        XCTAssertEqual(sim[0].acl.map(\.data), packets, "all 64, in order, without waiting for an event")
        XCTAssertTrue(sim[0].acl.allSatisfy { $0.handle == central })
        let completed = sim[1].events(0x13).reduce(0) { $0 + (Int($1[3]) | Int($1[4]) << 8) }
        XCTAssertEqual(completed, 64, "every buffer back at once")
        XCTAssertTrue(sim[1].events(0x1A).isEmpty, "64 packets through 8 buffers: each came back before the next packet")
        XCTAssertEqual(sim.air.controllers[1].aclBuffersInUse, 0)
    }

    func testACLBufferLimitsAreEnforced() {
        let sim = makeSim()
        let (central, _) = sim.connect(central: 0, peripheral: 1, intervalUnits: 80)
        sim[0].sendACL(handle: central, [UInt8](repeating: 1, count: 252))
        sim.run(for: .microseconds(300))
        XCTAssertEqual(sim[0].events(0x1A), [[0x01]], "252 bytes exceed the 251-byte buffer")
        for _ in 0..<9 { sim[0].sendACL(handle: central, [1, 2, 3, 4]) }
        sim.run(for: .microseconds(300))
        XCTAssertEqual(sim[0].events(0x1A).count, 2, "the ninth packet overflows 8 buffers")
        XCTAssertEqual(sim.air.controllers[0].aclOverflows, 2)
        sim.run(for: .milliseconds(200))
        XCTAssertEqual(sim[1].acl.count, 8)
        let completed = sim[0].events(0x13).reduce(0) { $0 + Int($1[3]) | Int($1[4]) << 8 }
        XCTAssertEqual(completed, 8)
    }

    func testEncryptionWithMatchingKeysAndTheMICFailureWithout() {
        let ltk = (1...16).map { UInt8($0) }
        let random: [UInt8] = [9, 8, 7, 6, 5, 4, 3, 2]
        let ediv: [UInt8] = [0x34, 0x12]
        do {
            let sim = makeSim()
            let (central, peripheral) = sim.connect(central: 0, peripheral: 1)
            XCTAssertEqual(sim[1].status(0x2019, le16(peripheral) + random + ediv + ltk), 0x0C, "only the central starts encryption")
            XCTAssertEqual(sim[0].status(0x2019, le16(central) + random + ediv + ltk), 0)
            sim.run(until: { !sim[1].leEvents(0x05).isEmpty }, timeout: .seconds(1))
            XCTAssertEqual(sim[1].leEvents(0x05), [le16(peripheral) + random + ediv])
            XCTAssertEqual(Array(sim[1].call(0x201A, le16(peripheral) + ltk)[3...]), [0] + le16(peripheral))
            sim.run(for: .milliseconds(100))
            XCTAssertEqual(sim[0].events(0x08), [[0] + le16(central) + [1]])
            XCTAssertEqual(sim[1].events(0x08), [[0] + le16(peripheral) + [1]])
        }
        do {
            let sim = makeSim()
            let (central, peripheral) = sim.connect(central: 0, peripheral: 1)
            XCTAssertEqual(sim[0].status(0x2019, le16(central) + random + ediv + ltk), 0)
            sim.run(until: { !sim[1].leEvents(0x05).isEmpty }, timeout: .seconds(1))
            sim[1].call(0x201A, le16(peripheral) + ltk.reversed())
            sim.run(for: .milliseconds(100))
            XCTAssertEqual(disconnections(sim[0]).map(\.reason), [0x3D])
            XCTAssertEqual(disconnections(sim[1]).map(\.reason), [0x3D])
        }
        do {
            let sim = makeSim()
            let (central, peripheral) = sim.connect(central: 0, peripheral: 1)
            XCTAssertEqual(sim[0].status(0x2019, le16(central) + random + ediv + ltk), 0)
            sim.run(until: { !sim[1].leEvents(0x05).isEmpty }, timeout: .seconds(1))
            sim[1].call(0x201B, le16(peripheral))
            sim.run(for: .milliseconds(100))
            XCTAssertEqual(sim[0].events(0x08), [[0x06] + le16(central) + [0]], "PIN or Key Missing")
            XCTAssertTrue(disconnections(sim[0]).isEmpty, "the link stays up")
        }
    }

    func testConnectionParameterUpdateFromEitherSide() {
        let sim = makeSim(leMask: 0x0DDF)  // Remote Connection Parameter Request (bit 5) masked on both
        let (central, peripheral) = sim.connect(central: 0, peripheral: 1)
        XCTAssertEqual(sim[0].status(0x2013, le16(central) + le16(40) + le16(40) + le16(0) + le16(200) + le16(0) + le16(0)), 0)
        sim.run(for: .milliseconds(300))
        XCTAssertEqual(sim[0].leEvents(0x03), [[0] + le16(central) + le16(40) + le16(0) + le16(200)])
        XCTAssertEqual(sim[1].leEvents(0x03), [[0] + le16(peripheral) + le16(40) + le16(0) + le16(200)])

        XCTAssertEqual(sim[1].status(0x2013, le16(peripheral) + le16(24) + le16(24) + le16(0) + le16(100) + le16(0) + le16(0)), 0)
        sim.run(for: .milliseconds(200))
        XCTAssertEqual(sim[1].leEvents(0x03).last?.first, 0x1A, "central's host cannot be asked: Unsupported Remote Feature")

        XCTAssertEqual(sim[0].status(0x2001, [0xFF, 0x0F, 0, 0, 0, 0, 0, 0]), 0)
        XCTAssertEqual(sim[1].status(0x2013, le16(peripheral) + le16(24) + le16(30) + le16(0) + le16(100) + le16(0) + le16(0)), 0)
        sim.run(until: { !sim[0].leEvents(0x06).isEmpty }, timeout: .seconds(1))
        XCTAssertEqual(sim[0].leEvents(0x06), [le16(central) + le16(24) + le16(30) + le16(0) + le16(100)])
        XCTAssertEqual(Array(sim[0].call(0x2020, le16(central) + le16(24) + le16(30) + le16(0) + le16(100) + le16(0) + le16(0))[3...]),
                       [0] + le16(central))
        sim.run(for: .milliseconds(400))
        XCTAssertEqual(sim[1].leEvents(0x03).last, [0] + le16(peripheral) + le16(24) + le16(0) + le16(100))
    }

    func testDataLengthPHYRemoteFeaturesAndRSSI() {
        let sim = makeSim()
        let (central, peripheral) = sim.connect(central: 0, peripheral: 1)
        XCTAssertEqual(Array(sim[0].call(0x2022, le16(central) + le16(251) + le16(2120))[3...]), [0] + le16(central))
        sim.run(for: .milliseconds(100))
        XCTAssertEqual(Array(sim[0].leEvents(0x07).last?[2...3] ?? []), le16(251), "central's max TX octets")
        XCTAssertEqual(Array(sim[1].leEvents(0x07).last?[6...7] ?? []), le16(251), "peripheral's max RX octets")
        sim[0].sendACL(handle: central, [UInt8](repeating: 7, count: 251))
        sim.run(for: .milliseconds(100))
        XCTAssertEqual(sim[1].acl.map(\.data.count), [251], "one PDU now carries the whole packet")

        XCTAssertEqual(sim[0].status(0x2032, le16(central) + [0, 0b10, 0b10] + le16(0)), 0)
        sim.run(for: .milliseconds(100))
        XCTAssertEqual(sim[0].leEvents(0x0C), [[0] + le16(central) + [2, 2]])
        XCTAssertEqual(sim[1].leEvents(0x0C), [[0] + le16(peripheral) + [2, 2]])
        XCTAssertEqual(Array(sim[1].call(0x2030, le16(peripheral))[3...]), [0] + le16(peripheral) + [2, 2])
        // Asked again for what it has: the asking host hears so, the peer's host hears nothing (nothing changed).
        XCTAssertEqual(sim[1].status(0x2032, le16(peripheral) + [0, 0b10, 0b10] + le16(0)), 0)
        sim.run(for: .milliseconds(100))
        XCTAssertEqual(sim[1].leEvents(0x0C).count, 2)
        XCTAssertEqual(sim[0].leEvents(0x0C).count, 1)

        XCTAssertEqual(sim[0].status(0x2016, le16(central)), 0)
        sim.run(for: .milliseconds(100))
        XCTAssertEqual(sim[0].leEvents(0x04), [[0] + le16(central) + [0x2F, 0x01, 0, 0, 0, 0, 0, 0]])

        let rssi = sim[0].call(0x1405, le16(central))
        XCTAssertEqual(Array(rssi[3...5]), [0] + le16(central))
        XCTAssertTrue((-43...(-37)).contains(Int(Int8(bitPattern: rssi[6]))), "1 m apart")
    }

    /// Both hosts ask for their transmit length at once, as each does for a new link: both directions grow, and
    /// each host's last LE Data Length Change says so (Core Vol 4 Part E §7.7.65.7: TX octets, TX time, RX octets, RX time).
    func testBothSidesAskingForADataLengthAtOnceBothTakeEffect() {
        let sim = makeSim()
        let (central, peripheral) = sim.connect(central: 0, peripheral: 1)
        XCTAssertEqual(Array(sim[0].call(0x2022, le16(central) + le16(251) + le16(2120))[3...]), [0] + le16(central))
        XCTAssertEqual(Array(sim[1].call(0x2022, le16(peripheral) + le16(251) + le16(2120))[3...]), [0] + le16(peripheral))
        sim.run(for: .milliseconds(200))
        for (index, handle) in [(0, central), (1, peripheral)] {
            let change = sim[index].leEvents(0x07).last ?? []
            XCTAssertEqual(Array(change.prefix(2)), le16(handle))
            XCTAssertEqual(Array(change.dropFirst(2).prefix(2)), le16(251), "controller \(index) transmits 251 octets")
            XCTAssertEqual(Array(change.dropFirst(6).prefix(2)), le16(251), "controller \(index) receives 251 octets")
        }
    }

    func testResetForgetsLinksAndThePeerTimesOut() {
        let sim = makeSim()
        _ = sim.connect(central: 0, peripheral: 1, timeoutUnits: 50)
        sim[1].powerOn()
        XCTAssertTrue(disconnections(sim[1]).isEmpty, "reset tells its own host nothing")
        XCTAssertTrue(sim.air.controllers[1].connectionHandles.isEmpty)
        sim.run(for: .milliseconds(600))
        XCTAssertEqual(disconnections(sim[0]).map(\.reason), [0x08])
    }
}

final class FilterAcceptListTests: XCTestCase {
    func testConnectingThroughTheFilterAcceptListPicksOnlyListedAdvertisers() {
        let sim = SimHarness(controllers: 3)
        for index in 0..<3 { sim[index].powerOn() }
        sim.advertise(1)
        sim.advertise(2)
        XCTAssertEqual(sim[0].status(0x2011, [0] + sim[2].address), 0)
        XCTAssertEqual(sim[0].status(0x2011, [2] + sim[2].address), 0x12, "address type 2 is not a valid entry")
        let create = le16(0x60) + le16(0x60) + [1, 0] + [0, 0, 0, 0, 0, 0] + [0] + le16(24) + le16(24) + le16(0) + le16(100) + le16(0) + le16(0)
        XCTAssertEqual(sim[0].status(0x200D, create), 0)
        XCTAssertEqual(sim[0].status(0x2010), 0x0C, "the list is in use while initiating with it")
        sim.run(until: { !sim[0].leEvents(0x01).isEmpty }, timeout: .seconds(2))
        XCTAssertEqual(Array(sim[0].leEvents(0x01)[0][5...10]), sim[2].address, "connected to the listed device")
        XCTAssertTrue(sim[1].leEvents(0x01).isEmpty)
        XCTAssertEqual(sim[0].status(0x2010), 0, "free again once connected")
    }

    func testAScanWindowShorterThanTheIntervalHearsProportionallyLess() {
        func reports(window: UInt16) -> Int {
            let sim = SimHarness()
            sim[0].powerOn()
            sim[1].powerOn()
            sim.advertise(1, intervalUnits: 0x20)
            sim.scan(0, active: false, interval: 0x0100, window: window)
            sim.run(for: .seconds(4))
            return sim[0].leEvents(0x02).count
        }
        let full = reports(window: 0x0100)
        let quarter = reports(window: 0x0040)
        XCTAssertGreaterThan(full, 100)
        XCTAssertEqual(Double(quarter) / Double(full), 0.25, accuracy: 0.08, "\(quarter) of \(full)")
    }
}
