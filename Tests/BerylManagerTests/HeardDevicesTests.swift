import BerylCore
import BerylGAP
import BerylManager
import XCTest

/// Advertising joined with its scan response, as Core Bluetooth reports a discovery: scripted reports, no radio.
final class HeardDevicesTests: XCTestCase {
    private let lock = DeviceAddress("C1:02:03:04:05:06/random")!
    private let flags: [UInt8] = [2, 0x01, 0x06]
    private let nameData: [UInt8] = [5, 0x09] + Array("Lock".utf8)

    private func report(_ kind: AdvertisingReport.Kind, _ data: [UInt8], rssi: Int8 = -60) -> AdvertisingReport {
        AdvertisingReport(kind: kind, address: lock, data: data, rssi: rssi)
    }

    func testAScannableAdvertiserIsReportedWithItsScanResponse() {
        var heard = HeardDevices()
        var flagsOnly = AdvertisementData()
        _ = flagsOnly.merge(flags)
        flagsOnly.isConnectable = true
        XCTAssertEqual(heard.received(report(.connectableUndirected, flags), appsScanning: true), .heard(flagsOnly, reportNow: false),
                       "waits for the scan response, where the name usually is")
        XCTAssertEqual(heard.advertisements[lock], flagsOnly)
        guard case .heard(let joined, true) = heard.received(report(.scanResponse, nameData, rssi: -50), appsScanning: true) else {
            return XCTFail("the scan response completes the report")
        }
        XCTAssertEqual(joined.localName, "Lock")
        XCTAssertTrue(joined.isConnectable, "as the advertising PDU said, not the scan response")
        XCTAssertEqual(heard.rssi[lock], -50)
        _ = heard.received(report(.connectableUndirected, flags, rssi: 127), appsScanning: true)
        XCTAssertEqual(heard.rssi[lock], -50, "127 is not a measurement")
    }

    func testNoScanResponseMeansTheNextAdvertisementIsReportedWithout() {
        var heard = HeardDevices()
        guard case .heard(_, false) = heard.received(report(.scannableUndirected, flags), appsScanning: true) else { return XCTFail() }
        guard case .heard(let alone, true) = heard.received(report(.scannableUndirected, flags), appsScanning: true) else {
            return XCTFail("waited once")
        }
        XCTAssertNil(alone.localName)
        XCTAssertFalse(alone.isConnectable)
        guard case .heard(_, true) = heard.received(report(.nonConnectable, flags), appsScanning: true) else {
            return XCTFail("a non-scannable advertiser has no scan response to wait for")
        }
    }

    func testNewAdvertisingContentMakesTheOldScanResponseStale() {
        var heard = HeardDevices()
        _ = heard.received(report(.connectableUndirected, flags), appsScanning: true)
        _ = heard.received(report(.scanResponse, nameData), appsScanning: true)
        let other: [UInt8] = flags + [3, 0x03, 0x0F, 0x18]
        guard case .heard(let rotated, false) = heard.received(report(.connectableUndirected, other), appsScanning: true) else {
            return XCTFail("new content waits for its own scan response")
        }
        XCTAssertNil(rotated.localName, "the name was the old content's")
        XCTAssertEqual(rotated.serviceUUIDs, [BluetoothUUID(0x180F)])
    }

    func testMalformedDataIsDroppedAndALabScanOnlyListens() {
        var heard = HeardDevices()
        _ = heard.received(report(.nonConnectable, flags), appsScanning: false)
        guard case .heard(_, false) = heard.received(report(.nonConnectable, flags), appsScanning: false) else {
            return XCTFail("no app scans: nothing to report")
        }
        guard case .malformed = heard.received(report(.nonConnectable, [9, 0x09, 0x41]), appsScanning: true) else {
            return XCTFail("a structure running past the data")
        }
    }
}
