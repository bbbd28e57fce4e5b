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
        queue.append("discovered A 1", discoveryOf: "A")
        queue.append("connected B", discoveryOf: nil)
        queue.append("discovered A 2", discoveryOf: "A")
        XCTAssertEqual(queue.count, 2)
        queue.append("notification B 1", discoveryOf: nil)
        queue.append("notification B 2", discoveryOf: nil)
        XCTAssertEqual(queue.dropped, 1)
        XCTAssertEqual(queue.drain(), ["discovered A 2", "notification B 1", "notification B 2"])
        XCTAssertEqual(queue.count, 0)
    }

    func testBackgroundAdvertisingHasNoNameAndOverflowsEveryService() {
        let payload = AdvertisingPayload.background(serviceUUIDs: [BluetoothUUID(0x180D), BluetoothUUID(0x180F)])
        XCTAssertEqual(payload.advertising, [2, 0x01, 0x06], "flags only")
        XCTAssertEqual(payload.scanResponse, [])
        XCTAssertEqual(payload.overflow, [BluetoothUUID(0x180D), BluetoothUUID(0x180F)])
    }
}

