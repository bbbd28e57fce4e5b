import Beryl
import BerylDaemonKit
import BerylSupervisor
import BerylTestSupport
import BerylWire
import Dispatch
import Foundation
import Synchronization
import XCTest

/// Two apps on one stack: two peripheral apps publish into one database and advertise in turn; two central apps
/// on the other stack scan through one controller scan (each by its own filter) and share one link.
final class SharedStackTests: TwoStacksTestCase {

    func testTwoAppsShareScansALinkAndTheDatabase() async throws {
        let queue = DispatchQueue(label: "apps")
        let heartApp = HeartRatePeripheral()
        let heartManager = PeripheralManager(delegate: heartApp, queue: queue, socketPath: socket(1))
        let batteryApp = HeartRatePeripheral()
        let batteryManager = PeripheralManager(delegate: batteryApp, queue: queue, socketPath: socket(1))
        XCTAssertNotNil(heartApp.recorder.wait(for: "state poweredOn"))
        XCTAssertNotNil(batteryApp.recorder.wait(for: "state poweredOn"))
        let heart = MutableService(type: BluetoothUUID(0x180D), primary: true)
        heart.characteristics = [heartApp.location]
        try await heartManager.add(heart)
        let battery = MutableService(type: BluetoothUUID(0x180F), primary: true)
        let level = MutableCharacteristic(type: BluetoothUUID(0x2A19), properties: .read, value: Data([77]), permissions: .readable)
        battery.characteristics = [level]
        try await batteryManager.add(battery)
        heartManager.startAdvertising(AdvertisingOptions(localName: "Heart", serviceUUIDs: [BluetoothUUID(0x180D)]))
        batteryManager.startAdvertising(AdvertisingOptions(localName: "Battery", serviceUUIDs: [BluetoothUUID(0x180F)]))

        let heartClient = HeartRateCentral()
        let batteryClient = HeartRateCentral()
        let heartCentral = CentralManager(delegate: heartClient, queue: queue, socketPath: socket(0))
        let batteryCentral = CentralManager(delegate: batteryClient, queue: queue, socketPath: socket(0))
        XCTAssertNotNil(heartClient.recorder.wait(for: "state poweredOn"))
        XCTAssertNotNil(batteryClient.recorder.wait(for: "state poweredOn"))
        heartCentral.scanForPeripherals(withServices: [BluetoothUUID(0x180D)])
        batteryCentral.scanForPeripherals(withServices: [BluetoothUUID(0x180F)])
        // The stack advertises each app's data in turn (one controller advertiser): each scan sees only its own.
        XCTAssertNotNil(heartClient.recorder.wait(for: "discovered Heart [\"180D\"]"), heartClient.recorder.all.joined(separator: "\n"))
        XCTAssertNotNil(batteryClient.recorder.wait(for: "discovered Battery [\"180F\"]"), batteryClient.recorder.all.joined(separator: "\n"))
        XCTAssertFalse(heartClient.recorder.all.contains { $0.contains("180F") }, "each app gets its own filter's discoveries")
        heartCentral.stopScan()
        batteryCentral.stopScan()

        // Both central apps connect to the same peripheral: one link, two holders.
        let peripheralID = try XCTUnwrap(heartClient.discovered.withLock { $0.first?.identifier })
        let forHeart = try XCTUnwrap(heartCentral.retrievePeripherals(withIdentifiers: [peripheralID]).first)
        let forBattery = try XCTUnwrap(batteryCentral.retrievePeripherals(withIdentifiers: [peripheralID]).first)
        try await heartCentral.connected(to: forHeart)
        try await batteryCentral.connected(to: forBattery)
        let heartServices = try await forHeart.services(discovering: nil)
        let batteryServices = try await forBattery.services(discovering: nil)
        // One database holds both apps' services.
        XCTAssertEqual(Set(heartServices.map(\.uuid.description)), ["1800", "1801", "180D", "180F"])
        let levelCharacteristic = try XCTUnwrap(batteryServices.first { $0.uuid == BluetoothUUID(0x180F) }?.characteristics?.first)
        let value = try await forBattery.readValue(for: levelCharacteristic)
        XCTAssertEqual(value, Data([77]))

        // One app cancels: the link stays for the other.
        heartCentral.cancelPeripheralConnection(forHeart)
        XCTAssertEqual(heartClient.recorder.wait(for: "disconnected"), "disconnected cleanly")
        let stillThere = try await forBattery.readValue(for: levelCharacteristic)
        XCTAssertEqual(stillThere, Data([77]), "the other app's link is untouched")
        batteryCentral.cancelPeripheralConnection(forBattery)
        XCTAssertNotNil(batteryClient.recorder.wait(for: "disconnected"))
        withExtendedLifetime((heartManager, batteryManager, heartCentral, batteryCentral)) {}
    }
}
