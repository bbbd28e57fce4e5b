@testable import BerylSim
import XCTest

final class AdvertisingTests: XCTestCase {
    private func reports(_ host: RawHost) -> [(type: UInt8, address: [UInt8], data: [UInt8], rssi: Int8)] {
        host.leEvents(0x02).map { body in
            let length = Int(body[9])
            return (body[1], Array(body[3...8]), Array(body[10..<10 + length]), Int8(bitPattern: body[10 + length]))
        }
    }

    private func makeSim(_ count: Int = 2) -> SimHarness {
        let sim = SimHarness(controllers: count)
        for index in 0..<count { sim[index].powerOn() }
        return sim
    }

    func testPassiveScanningSeesAdvertisingDataButNoScanResponse() {
        let sim = makeSim()
        sim.advertise(1, type: 0, data: [0x02, 0x01, 0x06], scanResponse: [0x03, 0x09, 0x41, 0x42])
        sim.scan(0, active: false)
        sim.run(for: .seconds(1))
        let seen = reports(sim[0])
        XCTAssertFalse(seen.isEmpty)
        XCTAssertTrue(seen.allSatisfy { $0.type == 0x00 && $0.data == [0x02, 0x01, 0x06] })
        XCTAssertEqual(seen.first?.address, sim[1].address)
    }

    func testActiveScanningGetsTheScanResponseOfScannableTypesOnly() {
        for (type, scannable) in [(UInt8(0), true), (2, true), (3, false)] {
            let sim = makeSim()
            sim.advertise(1, type: type, data: [0x02, 0x01, 0x06], scanResponse: [0x03, 0x09, 0x41, 0x42])
            sim.scan(0, active: true)
            sim.run(for: .seconds(1))
            let seen = reports(sim[0])
            XCTAssertTrue(seen.contains { $0.type == type }, "type \(type) reported as itself")
            let responses = seen.filter { $0.type == 0x04 }
            if scannable {
                XCTAssertFalse(responses.isEmpty, "type \(type)")
                XCTAssertTrue(responses.allSatisfy { $0.data == [0x03, 0x09, 0x41, 0x42] })
            } else {
                XCTAssertTrue(responses.isEmpty, "ADV_NONCONN_IND is not scannable")
            }
        }
    }

    func testDirectedAdvertisingReachesOnlyItsTarget() {
        let sim = makeSim(3)
        sim.advertise(0, type: 4, peer: sim[1].address)
        sim.scan(1, active: false)
        sim.scan(2, active: false)
        sim.run(for: .seconds(1))
        XCTAssertTrue(reports(sim[1]).contains { $0.type == 0x01 && $0.data.isEmpty })
        XCTAssertTrue(reports(sim[2]).isEmpty)
    }

    func testHighDutyDirectedAdvertisingTimesOut() {
        let sim = makeSim()
        sim.advertise(0, type: 1, peer: sim[1].address)
        sim.run(for: .seconds(1))
        XCTAssertTrue(sim[0].leEvents(0x01).isEmpty)
        sim.run(for: .milliseconds(400))
        XCTAssertEqual(sim[0].leEvents(0x01).first?.first, 0x3C, "Connection Complete with Advertising Timeout")
        XCTAssertFalse(sim.air.controllers[0].isAdvertising)
    }

    func testDuplicateFilteringReportsEachAdvertiserOnce() {
        let sim = makeSim()
        sim.advertise(1, intervalUnits: 0x0040)
        sim.scan(0, active: true, duplicates: true)
        sim.run(for: .seconds(2))
        XCTAssertEqual(reports(sim[0]).map(\.type), [0x00, 0x04])
        XCTAssertEqual(sim[0].status(0x200C, [0, 0]), 0)
        sim.scan(0, active: true, duplicates: false)
        sim.run(for: .seconds(2))
        XCTAssertGreaterThan(reports(sim[0]).count, 20)
    }

    func testAdvertisingIntervalIsHonouredInSimulatedTime() {
        let sim = makeSim()
        sim.advertise(1, intervalUnits: 160)  // 100 ms, plus 0–10 ms advDelay per event
        sim.scan(0, active: false)
        sim.run(for: .seconds(2))
        let count = reports(sim[0]).count
        XCTAssertTrue((17...20).contains(count), "\(count) advertising events in 2 s at 100–110 ms apart")
    }

    func testRSSIFollowsDistanceAndRangeEndsReception() {
        let sim = makeSim()
        sim.advertise(1)
        sim.scan(0, active: false)
        sim.air.move(1, x: 1, y: 0)
        sim.run(for: .seconds(1))
        let near = reports(sim[0]).map { Int($0.rssi) }
        XCTAssertTrue(near.allSatisfy { (-43...(-37)).contains($0) }, "\(near) at 1 m")
        sim.air.move(1, x: 10, y: 0)
        let before = reports(sim[0]).count
        sim.run(for: .seconds(1))
        let far = reports(sim[0]).dropFirst(before).map { Int($0.rssi) }
        XCTAssertTrue(!far.isEmpty && far.allSatisfy { (-63...(-57)).contains($0) }, "\(far) at 10 m")
        sim.air.setInRange(1, false)
        let count = reports(sim[0]).count
        sim.run(for: .seconds(1))
        XCTAssertEqual(reports(sim[0]).count, count, "nothing heard out of range")
    }

    func testCommandsThatConflictWithTheCurrentStateAreDisallowed() {
        let sim = makeSim()
        sim.advertise(1)
        XCTAssertEqual(sim[1].status(0x2006, le16(0x0800) + le16(0x0800) + [0, 0, 0, 0, 0, 0, 0, 0, 0, 0x07, 0]), 0x0C)
        XCTAssertEqual(sim[1].status(0x2005, [1, 2, 3, 4, 5, 0xC6]), 0x0C, "random address while advertising")
        XCTAssertEqual(sim[0].status(0x200E), 0x0C, "cancel with no connection attempt")
        XCTAssertEqual(sim[0].status(0x200B, [0] + le16(0x10) + le16(0x20) + [0, 0]), 0x12, "window longer than interval")
        // Own address type random without a random address.
        XCTAssertEqual(sim[0].status(0x200B, [0] + le16(0x10) + le16(0x10) + [1, 0]), 0)
        XCTAssertEqual(sim[0].status(0x200C, [1, 0]), 0x12)
    }
}
