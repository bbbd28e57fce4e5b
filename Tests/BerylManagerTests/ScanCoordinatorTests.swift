import BerylCore
import BerylGAP
import BerylManager
import BerylStore
import Foundation
import XCTest

final class ScanCoordinatorTests: XCTestCase {
    private func advertisement(_ services: [UInt16]) -> AdvertisementData {
        var data = AdvertisementData()
        data.serviceUUIDs = services.map(BluetoothUUID.init)
        return data
    }

    /// Two apps' scans share the controller; each gets what its own filter and duplicate rule allow.
    func testScansAreMergedAndRoutedPerFilter() {
        var scans = ScanCoordinator()
        let heart = ManagerKey(session: 1, manager: 1)
        let everything = ManagerKey(session: 2, manager: 1)
        scans.start(heart, ScanRequest(services: [BluetoothUUID(0x180D)]))
        scans.start(everything, ScanRequest(allowDuplicates: true))
        XCTAssertTrue(scans.isScanning)
        XCTAssertEqual(scans.route(identifier: "A", advertisement: advertisement([0x180D])), [heart, everything])
        XCTAssertEqual(scans.route(identifier: "A", advertisement: advertisement([0x180D])), [everything], "one discovery per peripheral without duplicates")
        XCTAssertEqual(scans.route(identifier: "B", advertisement: advertisement([0x180F])), [everything])
        scans.start(heart, ScanRequest(services: [BluetoothUUID(0x180D)]))
        XCTAssertEqual(scans.route(identifier: "A", advertisement: advertisement([0x180D])), [heart, everything], "a new scan starts afresh")
        scans.stopAll(.session(2))
        XCTAssertEqual(scans.scanners, [heart])
        scans.stop(heart)
        XCTAssertFalse(scans.isScanning)
    }

    func testOverflowAndSolicitedServicesMatch() {
        var scans = ScanCoordinator()
        let key = ManagerKey(session: 1, manager: 1)
        scans.start(key, ScanRequest(services: [BluetoothUUID(0x1234)], solicited: [BluetoothUUID(0x1812)]))
        var overflow = AdvertisementData()
        overflow.overflowServiceUUIDs = [BluetoothUUID(0x1234)]
        XCTAssertEqual(scans.route(identifier: "A", advertisement: overflow), [key], "a scan naming an overflow UUID finds it")
        var solicited = AdvertisementData()
        solicited.solicitedServiceUUIDs = [BluetoothUUID(0x1812)]
        XCTAssertEqual(scans.route(identifier: "B", advertisement: solicited), [key])
    }

    // A fresh scan is told of what was heard before it; a scan already running is not marked told of it, so it still
    // hears of the peripheral when its advertising next comes (a review found the replay marking every scanner).
    func testTellingANewScanOfWhatWasHeardLeavesTheOthersUntold() {
        var scans = ScanCoordinator()
        let running = ManagerKey(session: 1, manager: 1), fresh = ManagerKey(session: 2, manager: 1)
        scans.start(running, ScanRequest(services: [BluetoothUUID(0x180D)]))
        scans.start(fresh, ScanRequest())
        XCTAssertEqual(scans.route(identifier: "A", advertisement: advertisement([0x180D]), only: fresh), [fresh])
        XCTAssertEqual(scans.route(identifier: "A", advertisement: advertisement([0x180D])), [running], "the running scan hears of it still")
    }
}
