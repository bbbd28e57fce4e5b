import BerylCore
import BerylGAP
import BerylHCI
import XCTest

final class AdvertisingDataTests: XCTestCase {
    func testParsesTheStructuresCoreBluetoothReports() throws {
        let bytes: [UInt8] = [2, 0x01, 0x06,  3, 0x03, 0x0D, 0x18,  5, 0x09] + Array("Lock".utf8) + [2, 0x0A, 0xF4,
                              5, 0xFF, 0x4C, 0x00, 0x01, 0x02,  4, 0x16, 0x0F, 0x18, 99,  3, 0x14, 0x12, 0x18,  3, 0x77, 1, 2]
        let data = try AdvertisementData.parse(bytes).get()
        XCTAssertEqual(data.localName, "Lock")
        XCTAssertEqual(data.serviceUUIDs, [BluetoothUUID(0x180D)])
        XCTAssertEqual(data.txPowerLevel, -12)
        XCTAssertEqual(data.manufacturerData, [0x4C, 0x00, 0x01, 0x02])
        XCTAssertEqual(data.serviceData[BluetoothUUID(0x180F)], [99])
        XCTAssertEqual(data.solicitedServiceUUIDs, [BluetoothUUID(0x1812)])
    }

    func testMalformedDataIsATypedError() {
        XCTAssertEqual(AdvertisementData.parse([5, 0x09, 0x41]), .failure(.truncated(at: 0)))
        XCTAssertEqual(AdvertisementData.parse([4, 0x03, 0x0D, 0x18, 0x0F]), .failure(.malformedField(.completeServices16)), "an odd-length UUID list")
        XCTAssertEqual(AdvertisementData.parse([2, 0x0A]), .failure(.truncated(at: 0)))
        XCTAssertNotNil(try? AdvertisementData.parse([0, 5, 0x09]).get(), "a zero length ends the significant part")
    }

    func testAScanResponseCompletesAShortenedName() throws {
        var data = try AdvertisementData.parse([4, 0x08] + Array("Loc".utf8)).get()
        XCTAssertEqual(data.localName, "Loc")
        _ = data.merge([5, 0x09] + Array("Lock".utf8))
        XCTAssertEqual(data.localName, "Lock")
        _ = data.merge([4, 0x08] + Array("Loc".utf8))
        XCTAssertEqual(data.localName, "Lock", "a shortened name never replaces the complete one")
    }

    /// Core Bluetooth's rule: 16-bit UUIDs first into the 28 bytes after the flags, then 128-bit ones; the rest overflow.
    func testThePayloadFollowsCoreBluetoothsRules() throws {
        let long = (1...3).map { BluetoothUUID("D00D000\($0)-0000-1000-8000-00805F9B34FB")! }
        let payload = AdvertisingPayload(localName: "A very long name that will not fit", serviceUUIDs: [BluetoothUUID(0x180D), BluetoothUUID(0x180F)] + long)
        XCTAssertLessThanOrEqual(payload.advertising.count, 31)
        let advertised = try AdvertisementData.parse(payload.advertising).get()
        XCTAssertEqual(advertised.serviceUUIDs, [BluetoothUUID(0x180D), BluetoothUUID(0x180F), long[0]])
        XCTAssertEqual(payload.overflow, [long[1], long[2]])
        let response = try AdvertisementData.parse(payload.scanResponse).get()
        XCTAssertEqual(response.localName, String("A very long name that will not fit".prefix(29)))
        XCTAssertEqual(payload.scanResponse[1], 0x08, "shortened name")
        XCTAssertEqual(AdvertisingPayload(localName: nil, serviceUUIDs: []).advertising, [2, 0x01, 0x06])
    }

    /// The guide's rule for the name: in the advertising packet when it fits beside the service UUIDs, so that a
    /// passive scanner (which never asks for a scan response) sees it; only what does not fit moves.
    func testTheLocalNameIsAdvertisedWhenItFitsBesideTheServices() throws {
        let fits = AdvertisingPayload(localName: "Beryl HR", serviceUUIDs: [BluetoothUUID(0x180D)])
        XCTAssertEqual(fits.advertising, [2, 0x01, 0x06, 3, 0x03, 0x0D, 0x18, 9, 0x09] + Array("Beryl HR".utf8))
        XCTAssertEqual(fits.scanResponse, [])
        // Flags (3) + one 128-bit UUID (18) leave 10 bytes: an 8-byte name fits, a 9-byte one does not.
        let service = BluetoothUUID("71DA3FD1-7E10-41C1-B16F-4430B506CDE7")!
        XCTAssertEqual(try AdvertisementData.parse(AdvertisingPayload(localName: "Eight ch", serviceUUIDs: [service]).advertising).get().localName, "Eight ch")
        let moved = AdvertisingPayload(localName: "Nine char", serviceUUIDs: [service])
        XCTAssertNil(try AdvertisementData.parse(moved.advertising).get().localName)
        XCTAssertEqual(try AdvertisementData.parse(moved.scanResponse).get().localName, "Nine char")
    }

    func testAdvertisingReportsDecodeAndRejectBadLengths() {
        let event = HCIEventPacket(code: 0x3E, parameters: [0x02, 1, 0x04, 1, 6, 5, 4, 3, 2, 0xC1, 3, 2, 0x01, 0x06, 0xC4])
        XCTAssertEqual(AdvertisingReport.decode(event), [AdvertisingReport(kind: .scanResponse, address: DeviceAddress("C1:02:03:04:05:06/random")!,
                                                                           data: [2, 0x01, 0x06], rssi: -60)])
        XCTAssertNil(AdvertisingReport.decode(HCIEventPacket(code: 0x3E, parameters: [0x02, 1, 0x00, 0, 1, 2, 3, 4, 5, 6, 40] + [UInt8](repeating: 0, count: 41))),
                     "a data length over 31")
        XCTAssertNil(AdvertisingReport.decode(HCIEventPacket(code: 0x3E, parameters: [0x02, 2, 0x00, 0, 1, 2, 3, 4, 5, 6, 0, 0xC0])), "two reports promised, one given")
        XCTAssertNil(AdvertisingReport.decode(HCIEventPacket(code: 0x3E, parameters: [0x01, 0])), "not an advertising report")
    }

    /// LE Extended Advertising Report (Core Vol 4 Part E §7.7.65.13), as Bumble's controllers send it for legacy
    /// scanning: a legacy ADV_IND (0x13), a bare "connectable" and a scan response; an incomplete fragment is left out.
    func testExtendedAdvertisingReportsDecode() {
        func report(_ eventType: UInt16, data: [UInt8]) -> [UInt8] {
            [UInt8(eventType & 0xFF), UInt8(eventType >> 8), 0x01, 6, 5, 4, 3, 2, 0xC1, 1, 0, 0xFF, 0x7F, 0xCE, 0, 0, 0, 0, 0, 0, 0, 0, 0]
                + [UInt8(data.count)] + data
        }
        let flags: [UInt8] = [2, 0x01, 0x06]
        let event = HCIEventPacket(code: 0x3E, parameters: [0x0D, 4] + report(0x13, data: flags) + report(0x01, data: flags) + report(0x08, data: [])
                                   + report(0x20, data: [1, 2]))
        let address = DeviceAddress("C1:02:03:04:05:06/random")!
        XCTAssertEqual(AdvertisingReport.decode(event), [
            AdvertisingReport(kind: .connectableUndirected, address: address, data: flags, rssi: -50),
            AdvertisingReport(kind: .connectableUndirected, address: address, data: flags, rssi: -50),
            AdvertisingReport(kind: .scanResponse, address: address, data: [], rssi: -50),
        ])
        XCTAssertNil(AdvertisingReport.decode(HCIEventPacket(code: 0x3E, parameters: [0x0D, 1] + report(0x13, data: flags).dropLast())), "short")
    }
}
