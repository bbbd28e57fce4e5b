import BerylCore
import BerylTools
import Foundation
import XCTest

final class GATTProfileTests: XCTestCase {
    let example = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Examples/profiles/heart-rate.json").path

    func testTheExampleProfileParsesWithDefaultsAndAdvertisingPayloads() throws {
        let profile = try GATTProfile.load(path: example)
        XCTAssertEqual(profile.localName, "Beryl HR")
        XCTAssertEqual(profile.advertise, [BluetoothUUID(0x180D)])
        let heartRate = profile.services[0]
        XCTAssertEqual(heartRate.characteristics[0].properties, 0x10)
        XCTAssertEqual(heartRate.characteristics[0].notify?.every, .milliseconds(100))
        XCTAssertEqual(heartRate.characteristics[1].value, [0x02])
        XCTAssertEqual(heartRate.characteristics[1].permissions, 0x01, "readable by default for a read property")
        let nus = profile.services[1]
        XCTAssertTrue(nus.primary)
        XCTAssertNil(nus.characteristics[0].value, "no value: dynamic")
        XCTAssertEqual(nus.characteristics[0].properties, 0x02 | 0x04 | 0x08)
        let (advertising, scanResponse) = profile.advertisingPayloads
        XCTAssertEqual(advertising, [2, 0x01, 0x06, 3, 0x03, 0x0D, 0x18])
        XCTAssertEqual(scanResponse, [9, 0x09] + Array("Beryl HR".utf8))
    }

    func testBrokenProfilesNameTheFileTheFieldAndTheReason() throws {
        let directory = NSTemporaryDirectory() + "beryl-gatt-profiles-\(getpid())"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let cases: [(String, String)] = [
            ("[]", "$"),
            (#"{"services": []}"#, "$.services"),
            (#"{"services": [{"uuid": "XYZ"}]}"#, "$.services[0].uuid"),
            (#"{"advertise": ["nope"], "services": [{"uuid": "180D"}]}"#, "$.advertise[0]"),
            (#"{"services": [{"uuid": "180D", "characteristics": [{"uuid": "2A37", "properties": ["fly"]}]}]}"#, "$.services[0].characteristics[0].properties[0]"),
            (#"{"services": [{"uuid": "180D", "characteristics": [{"uuid": "2A37", "properties": ["write"], "permissions": ["readable"]}]}]}"#,
             "$.services[0].characteristics[0].permissions"),
            (#"{"services": [{"uuid": "180D", "characteristics": [{"uuid": "2A37", "properties": ["read"], "value": "zz"}]}]}"#,
             "$.services[0].characteristics[0].value"),
            ("{\"services\": [{\"uuid\": \"180D\", \"characteristics\": [{\"uuid\": \"2A37\", \"properties\": [\"read\"], \"value\": \"\(String(repeating: "00", count: 513))\"}]}]}",
             "$.services[0].characteristics[0].value"),
            (#"{"services": [{"uuid": "180D", "characteristics": [{"uuid": "2A37", "properties": ["read"], "notify": {"everyMs": 100}}]}]}"#,
             "$.services[0].characteristics[0].notify"),
            (#"{"services": [{"uuid": "180D", "characteristics": [{"uuid": "2A37", "properties": ["notify"], "notify": {"everyMs": 1}}]}]}"#,
             "$.services[0].characteristics[0].notify.everyMs"),
            (#"{"services": [{"uuid": "180D", "characteristics": [{"uuid": "2A37", "properties": ["read", "write"], "value": "01"}]}]}"#,
             "$.services[0].characteristics[0].value"),
            (#"{"colour": 1, "services": [{"uuid": "180D"}]}"#, "$.colour"),
        ]
        for (index, (json, field)) in cases.enumerated() {
            let path = "\(directory)/p\(index).json"
            try json.write(toFile: path, atomically: true, encoding: .utf8)
            XCTAssertThrowsError(try GATTProfile.load(path: path), json) { error in
                XCTAssertEqual((error as? ProfileFileError)?.file, path)
                XCTAssertEqual((error as? ProfileFileError)?.field, field, json)
            }
        }
        XCTAssertThrowsError(try GATTProfile.load(path: directory + "/missing.json"))
    }
}
