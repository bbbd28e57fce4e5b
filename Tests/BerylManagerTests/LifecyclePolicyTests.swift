import BerylCore
import BerylGAP
import BerylManager
import XCTest

/// Core Bluetooth's background execution rules, as policy.
final class LifecyclePolicyTests: XCTestCase {
    func testWhatEachStateAllows() {
        let foreground = LifecyclePolicy.of(.foreground, modes: [])
        XCTAssertTrue(foreground.scans && foreground.advertises && foreground.deliversEvents && !foreground.coalesceDuplicates)
        let suspended = LifecyclePolicy.of(.suspended, modes: [.central, .peripheral])
        XCTAssertFalse(suspended.scans || suspended.advertises || suspended.deliversEvents || suspended.answersRequests)
        let central = LifecyclePolicy.of(.background, modes: [.central])
        XCTAssertTrue(central.scans && central.coalesceDuplicates && central.slowScan && central.deliversEvents)
        XCTAssertFalse(central.advertises, "bluetooth-central does not keep advertising")
        let peripheral = LifecyclePolicy.of(.background, modes: [.peripheral])
        XCTAssertTrue(peripheral.advertises && peripheral.backgroundAdvertising && peripheral.answersRequests)
        XCTAssertFalse(peripheral.scans)
        XCTAssertEqual(LifecyclePolicy.of(.background, modes: []), foreground, "a foreground-only app works until it is suspended")
        XCTAssertEqual(LifecyclePolicy.of(.notRunning, modes: [.central]), central, "preserved work follows the background rules")
    }

    func testHeldEventsAreBoundedAndCoalescedPerPeripheral() {
        var queue = SuspendedQueue<String>(capacity: 3)
        queue.append("discovered A 1", replacing: .discovery(peripheral: "A"))
        queue.append("connected B", replacing: nil)
        queue.append("discovered A 2", replacing: .discovery(peripheral: "A"))
        XCTAssertEqual(queue.count, 2)
        queue.append("notification B 1", replacing: nil)
        queue.append("notification B 2", replacing: nil)
        XCTAssertEqual(queue.dropped, 1)
        XCTAssertEqual(queue.drain(), ["discovered A 2", "notification B 1", "notification B 2"])
        XCTAssertEqual(queue.count, 0)
    }

    /// Another app writing to a shared peripheral refills its queue over and over while this one is suspended: this
    /// one keeps one word of room per peripheral, and a discovery of the same peripheral is not taken for it.
    func testReadinessToWriteIsHeldOncePerPeripheral() {
        var queue = SuspendedQueue<String>(capacity: 8)
        for round in 1...20 { queue.append("ready to write A \(round)", replacing: .readyToWrite(peripheral: "A")) }
        queue.append("discovered A", replacing: .discovery(peripheral: "A"))
        queue.append("ready to write B", replacing: .readyToWrite(peripheral: "B"))
        queue.append("ready to write A 21", replacing: .readyToWrite(peripheral: "A"))
        XCTAssertEqual(queue.dropped, 0)
        XCTAssertEqual(queue.drain(), ["discovered A", "ready to write B", "ready to write A 21"])
    }

    /// A chatty peripheral's notifications fill the queue of a suspended app: they push out one another and
    /// discoveries, never the readiness the library waits for.
    func testAFullQueueNeverLetsReadinessGo() {
        var queue = SuspendedQueue<String>(capacity: 4)
        queue.append("ready to write A", replacing: .readyToWrite(peripheral: "A"))
        queue.append("ready to update 3", replacing: .readyToUpdate)
        queue.append("discovered B", replacing: .discovery(peripheral: "B"))
        for n in 1...10 { queue.append("notification \(n)", replacing: nil) }
        queue.append("ready to update 4", replacing: .readyToUpdate)
        XCTAssertEqual(queue.dropped, 9)
        XCTAssertEqual(queue.drain(), ["ready to write A", "notification 9", "notification 10", "ready to update 4"])
    }

    func testBackgroundAdvertisingHasNoNameAndOverflowsEveryService() {
        let payload = AdvertisingPayload.background(serviceUUIDs: [BluetoothUUID(0x180D), BluetoothUUID(0x180F)])
        XCTAssertEqual(Array(payload.advertising.prefix(3)), [2, 0x01, 0x06], "flags, then only the overflow area")
        XCTAssertEqual(Array(payload.advertising[3..<8]), [20, 0xFF, 0xFF, 0xFF, 0x01])
        XCTAssertLessThanOrEqual(payload.advertising.count, 31)
        XCTAssertEqual(payload.scanResponse, [], "no name")
        XCTAssertEqual(payload.overflow, [BluetoothUUID(0x180D), BluetoothUUID(0x180F)])

        // A scanner finds it only by naming one of its services.
        var heard = AdvertisementData()
        XCTAssertNoThrow(try heard.merge(payload.advertising).get())
        XCTAssertEqual(heard.serviceUUIDs, [])
        XCTAssertNil(heard.manufacturerData, "the overflow area is not the app's manufacturer data")
        var scans = ScanCoordinator()
        let heart = ManagerKey(session: 1, manager: 1), battery = ManagerKey(session: 2, manager: 1), other = ManagerKey(session: 3, manager: 1)
        scans.start(heart, ScanRequest(services: [BluetoothUUID(0x180D)]))
        scans.start(battery, ScanRequest(services: [BluetoothUUID(0x180F)]))
        scans.start(other, ScanRequest(services: [BluetoothUUID(0x1809)]))
        let unrelated = [BluetoothUUID(0x1809)].filter { !OverflowArea.mayContain(OverflowArea.mask(for: payload.overflow), $0) }
        XCTAssertEqual(scans.route(identifier: "p", advertisement: heard), unrelated.isEmpty ? [heart, battery, other] : [heart, battery])
    }
}

