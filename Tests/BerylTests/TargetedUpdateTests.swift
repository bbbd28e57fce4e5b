import Beryl
import BerylSupervisor
import Dispatch
import Foundation
import Synchronization
import XCTest

/// A peripheral app that notes who subscribes, in order.
private final class Announcer: PeripheralManagerDelegate, Sendable {
    let recorder = Recorder()
    let subscribers = Mutex<[Central]>([])
    let characteristic = MutableCharacteristic(type: BluetoothUUID(0xFFB1), properties: .notify, value: nil, permissions: .readable)

    func peripheralManagerDidUpdateState(_ peripheral: PeripheralManager) { recorder.note("state \(peripheral.state)") }
    func peripheralManager(_ peripheral: PeripheralManager, central: Central, didSubscribeTo characteristic: Characteristic) {
        subscribers.withLock { $0.append(central) }
        recorder.note("subscribed")
    }
    func peripheralManager(_ peripheral: PeripheralManager, central: Central, didUnsubscribeFrom characteristic: Characteristic) {
        recorder.note("unsubscribed")
    }
}

/// The values one central app heard, in order.
private final class Hearer: CentralManagerDelegate, PeripheralDelegate, Sendable {
    let recorder = Recorder()
    let heard = Mutex<[UInt8]>([])
    func centralManagerDidUpdateState(_ central: CentralManager) { recorder.note("state \(central.state)") }
    func peripheral(_ peripheral: Peripheral, didUpdateValueFor characteristic: Characteristic, error: Error?) {
        if let value = characteristic.value?.first { heard.withLock { $0.append(value) } }
    }
    func peripheral(_ peripheral: Peripheral, didUpdateNotificationStateFor characteristic: Characteristic, error: Error?) {
        recorder.note("notifying \(characteristic.isNotifying)")
    }
    var values: [UInt8] { heard.withLock { $0 } }
}

/// updateValue(_:for:onSubscribedCentrals:) with centrals named reaches only those of the subscribed centrals, as on
/// iOS; nil reaches every one. Two centrals (stacks 0 and 1) subscribe to a peripheral app on stack 2.
final class TargetedUpdateTests: TwoStacksTestCase {
    override var managerdArguments: [[String]] { [[], [], []] }

    func testNamedCentralsAloneHearTheValue() async throws {
        let announcer = Announcer()
        let queue = DispatchQueue(label: "announcer")
        let peripheralManager = PeripheralManager(delegate: announcer, queue: queue, socketPath: socket(2))
        XCTAssertNotNil(announcer.recorder.wait(for: "state poweredOn"))
        try await peripheralManager.publishAndAdvertise(announcer.characteristic, in: BluetoothUUID(0xFFB0), as: "Announcer")

        let hearers = [Hearer(), Hearer()]
        var centrals: [CentralManager] = []
        var peripherals: [Peripheral] = []
        for (index, hearer) in hearers.enumerated() {
            let central = CentralManager(delegate: hearer, queue: DispatchQueue(label: "central"), socketPath: socket(index))
            centrals.append(central)
            XCTAssertNotNil(hearer.recorder.wait(for: "state poweredOn"))
            let (peripheral, value) = try await central.connectedCharacteristic(BluetoothUUID(0xFFB1), in: BluetoothUUID(0xFFB0), delegate: hearer)
            peripherals.append(peripheral)
            peripheral.setNotifyValue(true, for: value)
            XCTAssertNotNil(hearer.recorder.wait(for: "notifying true"))
            XCTAssertTrue(eventually { announcer.subscribers.withLock { $0.count } == index + 1 }, "\(announcer.recorder.all)")
        }
        let (first, second) = announcer.subscribers.withLock { ($0[0], $0[1]) }
        XCTAssertNotEqual(first, second)

        // To the first alone, to the second alone, then to everyone.
        let sent = queue.sync {
            [peripheralManager.updateValue(Data([1]), for: announcer.characteristic, onSubscribedCentrals: [first]),
             peripheralManager.updateValue(Data([2]), for: announcer.characteristic, onSubscribedCentrals: [second]),
             peripheralManager.updateValue(Data([3]), for: announcer.characteristic, onSubscribedCentrals: nil)]
        }
        XCTAssertEqual(sent, [true, true, true])
        XCTAssertTrue(eventually { hearers[0].values.contains(3) && hearers[1].values.contains(3) }, "\(hearers.map(\.values))")
        XCTAssertEqual(hearers[0].values, [1, 3])
        XCTAssertEqual(hearers[1].values, [2, 3])

        // The second central goes: naming it alone sends to no one (and is taken); naming both reaches the first.
        centrals[1].cancelPeripheralConnection(peripherals[1])
        XCTAssertTrue(eventually { announcer.recorder.all.contains("unsubscribed") }, "\(announcer.recorder.all)")
        let after = queue.sync {
            [peripheralManager.updateValue(Data([4]), for: announcer.characteristic, onSubscribedCentrals: [second]),
             peripheralManager.updateValue(Data([5]), for: announcer.characteristic, onSubscribedCentrals: [second, first])]
        }
        XCTAssertEqual(after, [true, true])
        XCTAssertTrue(eventually { hearers[0].values.contains(5) }, "\(hearers.map(\.values))")
        XCTAssertEqual(hearers[0].values, [1, 3, 5], "the value for the central that went reached no one")
        XCTAssertEqual(hearers[1].values, [2, 3])
        withExtendedLifetime((peripheralManager, centrals)) {}
    }
}
