@testable import BerylSim
import XCTest

final class FaultTests: XCTestCase {
    private func connected(_ sim: SimHarness) -> (UInt16, UInt16) {
        sim[0].powerOn()
        sim[1].powerOn()
        return sim.connect(central: 0, peripheral: 1, intervalUnits: 8, timeoutUnits: 100)
    }

    func testLinkLayerLossDelaysButDoesNotLoseData() {
        let sim = SimHarness()
        let (central, _) = connected(sim)
        sim.air.dropRate = 0.3
        var sent: [UInt8] = []
        for index in 0..<40 {
            let packet = [UInt8](repeating: UInt8(index), count: 20)
            sent += packet
            // Keep within the 8 controller buffers, as a host honouring the credits would.
            sim.run(until: { sim.air.controllers[0].aclBuffersInUse < 8 }, timeout: .seconds(5))
            sim[0].sendACL(handle: central, packet)
        }
        sim.run(until: { sim[1].acl.flatMap(\.data).count == sent.count }, timeout: .seconds(10))
        XCTAssertEqual(sim[1].acl.flatMap(\.data), sent, "in order, complete, despite 30% loss")
    }

    func testDelayPostponesDelivery() {
        let sim = SimHarness()
        let (central, _) = connected(sim)
        sim.air.delay = .milliseconds(50)
        let start = sim.now
        sim[0].sendACL(handle: central, [1, 2, 3])
        sim.run(until: { !sim[1].acl.isEmpty }, timeout: .seconds(1))
        XCTAssertGreaterThanOrEqual(sim.now - start, .milliseconds(50))
    }

    func testCorruptionFlipsBytesOnTheHostStream() {
        let sim = SimHarness()
        sim.air.setCorruptRate(0, 1.0)
        sim[0].sendCommand(0x0C03)
        sim.air.advance(to: .milliseconds(1))
        let corrupted = sim.air.takeOutput(controller: 0)
        XCTAssertEqual(corrupted.count, 7)
        XCTAssertTrue(zip(corrupted, [0x04, 0x0E, 0x04, 0x01, 0x03, 0x0C, 0x00]).allSatisfy { $0 != $1 }, "every byte flipped at rate 1")
    }

    func testFrozenControllerStopsAnsweringAndItsPeerLosesTheLink() {
        let sim = SimHarness()
        _ = connected(sim)
        sim.air.freeze(1)
        let answeredBefore = sim[1].events(0x0E).count
        sim[1].sendCommand(0x1009)
        sim.run(for: .milliseconds(500))
        XCTAssertEqual(sim[1].events(0x0E).count, answeredBefore, "no answer while frozen")
        sim.run(for: .milliseconds(700))
        XCTAssertEqual(sim[0].events(0x05).map { $0[3] }, [0x08], "peer: supervision timeout")
        sim.air.thaw(1)
        sim.run(for: .milliseconds(10))
        XCTAssertEqual(sim[1].events(0x0E).count, answeredBefore + 1, "the held command is answered after thaw")
        XCTAssertEqual(sim[1].events(0x05).map { $0[3] }, [0x08], "the frozen side's host hears of the loss once thawed")
    }

    func testResetAllRestoresTheInitialAir() {
        let sim = SimHarness()
        _ = connected(sim)
        sim.air.move(1, x: 5, y: 5)
        sim.air.dropRate = 0.5
        sim.air.resetAll()
        XCTAssertTrue(sim.air.controllers.allSatisfy { $0.connectionHandles.isEmpty && !$0.isAdvertising })
        XCTAssertEqual(sim.air.controllers[1].position.x, 1)
        XCTAssertEqual(sim.air.dropRate, 0)
    }
}

final class AirTimeTests: XCTestCase {
    func testTheoreticalMaximumFromSpecTimings() {
        // 2M PHY, 251 octets: (2 + 4 + 2 + 251 + 3) × 4 µs = 1048 µs, empty ack 44 µs, two T_IFS: 1392 µs per exchange.
        XCTAssertEqual(AirTime.exchangeDuration(payload: 251, phy: 2, encrypted: false), .microseconds(1392))
        XCTAssertEqual(AirTime.pdusPerEvent(interval: .microseconds(7500), payload: 251, phy: 2, encrypted: false), 5)
        XCTAssertEqual(AirTime.maximumThroughput(interval: .microseconds(7500), payload: 251, phy: 2, encrypted: false),
                       5 * 251 / 0.0075, accuracy: 0.001)
    }

    func testSaturatedLinkReachesTheAirTimeLimit() {
        var config = SimConfig()
        config.airTime = true
        let measured = LinkThroughput.measure(config: config, phy: 2, octets: 251, intervalUnits: 6, duration: .seconds(2))
        let limit = AirTime.maximumThroughput(interval: .microseconds(7500), payload: 251, phy: 2, encrypted: false)
        XCTAssertEqual(measured / limit, 1, accuracy: 0.05, "measured \(measured) B/s against \(limit) B/s")
        var unlimited = SimConfig()
        unlimited.airTime = false
        XCTAssertGreaterThan(LinkThroughput.measure(config: unlimited, phy: 2, octets: 251, intervalUnits: 6, duration: .seconds(2)),
                             limit * 1.2, "without the model the link carries more than the radio could")
    }
}
