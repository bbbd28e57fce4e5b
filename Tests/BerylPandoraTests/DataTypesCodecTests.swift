import BerylPandora
import Foundation
import PandoraInterfaces
import XCTest

/// AD structures ⇄ Pandora's DataTypes, with the values Avatar's test_scan_response_data advertises and checks.
final class DataTypesCodecTests: XCTestCase {
    private func roundTrip(_ build: (inout Pandora_DataTypes) -> Void) throws -> Pandora_DataTypes {
        var types = Pandora_DataTypes()
        build(&types)
        return DataTypesCodec.decode(try DataTypesCodec.encode(types, deviceName: "Beryl"))
    }

    func testServiceUUIDsOfEachSizeKeepTheirWidthAndOrder() throws {
        var types = Pandora_DataTypes()
        types.incompleteServiceClassUuids16 = ["183A", "181F"]
        // Two 16-bit UUIDs, little-endian, under AD type 0x02 (Core Supplement Part A §1.1).
        XCTAssertEqual(try DataTypesCodec.encode(types, deviceName: ""), [0x05, 0x02, 0x3A, 0x18, 0x1F, 0x18])
        XCTAssertEqual(try roundTrip { $0.incompleteServiceClassUuids32 = ["FFFF183A", "FFFF181F"] }.incompleteServiceClassUuids32, ["FFFF183A", "FFFF181F"])
        let uuid128 = "FFFF181F-FFFF-1000-8000-00805F9B34FB"
        XCTAssertEqual(try roundTrip { $0.incompleteServiceClassUuids128 = [uuid128] }.incompleteServiceClassUuids128, [uuid128])
        XCTAssertEqual(try roundTrip { $0.serviceSolicitationUuids32 = ["FFFF183A", "FFFF181F"] }.serviceSolicitationUuids32, ["FFFF183A", "FFFF181F"])
    }

    func testScalarFieldsAsAvatarChecksThem() throws {
        XCTAssertEqual(try roundTrip { $0.txPowerLevel = 20 }.txPowerLevel, 20)
        XCTAssertEqual(try roundTrip { $0.classOfDevice = 0x40680 }.classOfDevice, 0x40680)
        XCTAssertEqual(try roundTrip { $0.appearance = 0x0591 }.appearance, 0x0591)
        XCTAssertEqual(try roundTrip { $0.advertisingInterval = 0x1000 }.advertisingInterval, 0x1000)
        let range = try roundTrip {
            $0.peripheralConnectionIntervalMin = 0x0006
            $0.peripheralConnectionIntervalMax = 0x0C80
        }
        XCTAssertEqual([range.peripheralConnectionIntervalMin, range.peripheralConnectionIntervalMax], [0x0006, 0x0C80])
        // The URI travels as its UTF-8 text, as Pandora's peers send it.
        XCTAssertEqual(try roundTrip { $0.uri = "https://www.google.com" }.uri, "https://www.google.com")
        XCTAssertEqual(try roundTrip { $0.serviceDataUuid16 = ["183A": Data([1, 2, 3, 4])] }.serviceDataUuid16, ["183A": Data([1, 2, 3, 4])])
        XCTAssertEqual(try roundTrip { $0.manufacturerSpecificData = Data([0, 1, 2, 3, 4]) }.manufacturerSpecificData, Data([0, 1, 2, 3, 4]))
    }

    func testIncludedLocalNamesUseTheDeviceNameAndShortenedIsEightBytes() throws {
        var types = Pandora_DataTypes()
        types.includeShortenedLocalName = true
        types.includeCompleteLocalName = true
        let bytes = try DataTypesCodec.encode(types, deviceName: "Beryl lab board")
        let decoded = DataTypesCodec.decode(bytes)
        XCTAssertEqual(decoded.shortenedLocalName, "Beryl la")
        XCTAssertEqual(decoded.completeLocalName, "Beryl lab board")
    }

    func testRefusesWhatItCannotSendWithATypedReason() {
        var tooLong = Pandora_DataTypes()
        tooLong.manufacturerSpecificData = Data(repeating: 7, count: 30)
        XCTAssertThrowsError(try DataTypesCodec.encode(tooLong, deviceName: "")) { XCTAssertEqual($0 as? DataTypesCodec.Refusal, .tooLong(length: 32)) }
        var badUUID = Pandora_DataTypes()
        badUUID.completeServiceClassUuids16 = ["18Z0"]
        XCTAssertThrowsError(try DataTypesCodec.encode(badUUID, deviceName: "")) {
            XCTAssertEqual($0 as? DataTypesCodec.Refusal, .badUUID(field: "complete_service_class_uuids16", value: "18Z0"))
        }
        var txIncluded = Pandora_DataTypes()
        txIncluded.includeTxPowerLevel = true
        XCTAssertThrowsError(try DataTypesCodec.encode(txIncluded, deviceName: "")) { XCTAssertEqual($0 as? DataTypesCodec.Refusal, .unsupported(field: "include_tx_power_level")) }
    }

    func testMalformedADStructuresFromTheAirAreCutNotCrashed() {
        // A length running past the end, a zero length, and an unknown type between good ones.
        let decoded = DataTypesCodec.decode([0x03, 0x19, 0x91, 0x05, 0x02, 0x7E, 0xAA, 0x09, 0xFF, 0x01])
        XCTAssertEqual(decoded.appearance, 0x0591)
        XCTAssertTrue(decoded.manufacturerSpecificData.isEmpty)
        XCTAssertEqual(DataTypesCodec.decode([0x00, 0x03, 0x19, 0x91, 0x05]).appearance, 0)
        XCTAssertEqual(DataTypesCodec.decode([0x02, 0x0A]).txPowerLevel, 0)
    }
}

/// A scannable advertisement waits for its scan response, as an active scanner hears them.
final class ScanReportMergerTests: XCTestCase {
    func testActiveScanJoinsAScannableAdvertisementWithItsScanResponse() {
        var merger = ScanReportMerger(active: true)
        XCTAssertEqual(merger.take(.init(address: "A", kind: .advScanInd, rssi: -40, data: [2, 1, 6])), [])
        let joined = merger.take(.init(address: "A", kind: .scanResponse, rssi: -41, data: [3, 0xFF, 1, 2]))
        XCTAssertEqual(joined.count, 1)
        XCTAssertEqual(joined.first?.data, [2, 1, 6, 3, 0xFF, 1, 2])
        XCTAssertEqual(joined.first?.scannable, true)
        XCTAssertEqual(joined.first?.connectable, false)
    }

    func testAnAdvertisementWithNoScanResponseIsReportedWhenTheNextArrives() {
        var merger = ScanReportMerger(active: true)
        _ = merger.take(.init(address: "A", kind: .advInd, rssi: -40, data: [1]))
        let out = merger.take(.init(address: "A", kind: .advInd, rssi: -40, data: [2]))
        XCTAssertEqual(out.map(\.data), [[1]])
        XCTAssertEqual(out.first?.connectable, true)
    }

    func testPassiveScanAndUnscannableKindsAreReportedAtOnceAndStrayResponsesDropped() {
        var passive = ScanReportMerger(active: false)
        XCTAssertEqual(passive.take(.init(address: "A", kind: .advInd, rssi: -40, data: [1])).count, 1)
        var active = ScanReportMerger(active: true)
        XCTAssertEqual(active.take(.init(address: "B", kind: .advDirectInd, rssi: -40, data: [])).first?.connectable, true)
        XCTAssertEqual(active.take(.init(address: "C", kind: .advNonconnInd, rssi: -40, data: [9])).first?.scannable, false)
        XCTAssertEqual(active.take(.init(address: "D", kind: .scanResponse, rssi: -40, data: [9])), [])
    }
}
