import BerylCore
import BerylManager
import Foundation
import XCTest

final class ConnectionEventsTests: XCTestCase {
    let heartRate = BluetoothUUID(0x180D)
    let battery = BluetoothUUID(0x180F)
    let lock = "0F6B2E9C-8C3A-4C1B-9C64-7E1F5B1D2A00"
    let thermostat = "5D1C0A8E-1111-4C1B-9C64-7E1F5B1D2A00"

    func testEachRegistrationHearsOfTheLinksItsOptionsMatch() {
        var interests = ConnectionEventInterests()
        let everything = ManagerKey(session: 1, manager: 1)
        let heartRateOnly = ManagerKey(session: 2, manager: 1)
        let lockOnly = ManagerKey(session: 3, manager: 1)
        interests.register(everything, .init(peripherals: [], services: []))
        interests.register(heartRateOnly, .init(peripherals: [], services: [heartRate]))
        interests.register(lockOnly, .init(peripherals: [lock], services: []))

        XCTAssertEqual(interests.listeners(identifier: lock, services: [battery]), [everything, lockOnly])
        XCTAssertEqual(interests.listeners(identifier: thermostat, services: [heartRate, battery]), [everything, heartRateOnly])
        XCTAssertEqual(interests.listeners(identifier: thermostat, services: []), [everything])

        // Registering again replaces the options; a closed session hears nothing more.
        interests.register(heartRateOnly, .init(peripherals: [thermostat], services: []))
        XCTAssertEqual(interests.listeners(identifier: thermostat, services: []), [everything, heartRateOnly])
        interests.remove(.session(1))
        XCTAssertEqual(interests.listeners(identifier: lock, services: []), [lockOnly])
    }

    /// Each latency's parameters are valid ones (Core Vol 4 Part E §7.8.18) and slower as the latency asked is higher.
    func testTheLatenciesAskForValidParametersInOrder() {
        for latency in ConnectionLatency.allCases { XCTAssertTrue(latency.parameters.isValid, "\(latency)") }
        XCTAssertLessThan(ConnectionLatency.low.parameters.intervalMax, ConnectionLatency.medium.parameters.intervalMin + 1)
        XCTAssertLessThan(ConnectionLatency.medium.parameters.intervalMax, ConnectionLatency.high.parameters.intervalMin)
        XCTAssertGreaterThanOrEqual(ConnectionLatency.low.parameters.intervalMin, 12, "Apple's accessory rule: 15 ms at least")
    }

    func testAuthorizationFollowsTheManifests() throws {
        let catalog = AppCatalog(files: [ManifestFile(path: "/etc/beryl/apps/lock.json", data: Data(#"{"id": "com.example.lock", "user": "doorlock"}"#.utf8))],
                                 lookup: { $0 == "doorlock" ? Account(uid: 1001, gid: 1001) : nil })
        XCTAssertTrue(catalog.mayUseBluetooth(appID: "com.example.lock", uid: 1001))
        XCTAssertFalse(catalog.mayUseBluetooth(appID: "com.example.lock", uid: 1002), "declared for another user")
        XCTAssertFalse(catalog.mayUseBluetooth(appID: "com.example.lock", uid: 0), "managerd refuses root the id too")
        XCTAssertTrue(catalog.mayUseBluetooth(appID: "", uid: 1002), "a foreground-only app without an id")
        XCTAssertTrue(catalog.mayUseBluetooth(appID: "com.example.other", uid: 1002), "an undeclared id")
    }
}
