import Beryl
import BerylSupervisor
import Dispatch
import Foundation
import Synchronization
import XCTest

/// A peripheral app that notifies a counter every 20 ms to whoever subscribed, and notes who subscribes and lets go.
private final class Ticker: PeripheralManagerDelegate, Sendable {
    let recorder = Recorder()
    let characteristic = MutableCharacteristic(type: BluetoothUUID(0xFFA1), properties: .notify, value: nil, permissions: .readable)
    private let count = Atomic<UInt8>(0)

    func peripheralManagerDidUpdateState(_ peripheral: PeripheralManager) { recorder.note("state \(peripheral.state)") }
    func peripheralManager(_ peripheral: PeripheralManager, central: Central, didSubscribeTo characteristic: Characteristic) {
        recorder.note("subscribed")
    }
    func peripheralManager(_ peripheral: PeripheralManager, central: Central, didUnsubscribeFrom characteristic: Characteristic) {
        recorder.note("unsubscribed")
    }
    func tick(_ manager: PeripheralManager) {
        let value = count.wrappingAdd(1, ordering: .relaxed).newValue
        _ = manager.updateValue(Data([value]), for: characteristic, onSubscribedCentrals: nil)
    }
}

/// Values heard by one central app.
private final class Listener: CentralManagerDelegate, PeripheralDelegate, Sendable {
    let recorder = Recorder()
    let heard = Atomic<Int>(0)
    func centralManagerDidUpdateState(_ central: CentralManager) { recorder.note("state \(central.state)") }
    func centralManager(_ central: CentralManager, didDisconnectPeripheral peripheral: Peripheral, error: Error?) { recorder.note("disconnected") }
    func peripheral(_ peripheral: Peripheral, didUpdateValueFor characteristic: Characteristic, error: Error?) {
        if characteristic.isNotifying { heard.add(1, ordering: .relaxed) }
    }
    func peripheral(_ peripheral: Peripheral, didUpdateNotificationStateFor characteristic: Characteristic, error: Error?) {
        recorder.note("notifying \(characteristic.isNotifying)" + (error.map { " \($0)" } ?? ""))
    }
    var count: Int { heard.load(ordering: .relaxed) }
}

/// Two central apps on one stack share its link to a peripheral, which keeps one Client Characteristic Configuration
/// for that link (Core Vol 3 Part G §3.3.3.3). As on iOS, subscriptions are each app's: one app letting go must not
/// silence the other, and the peripheral hears the link unsubscribe only when the last subscribed app lets go —
/// by unsubscribing, cancelling its connection, or going away.
final class SharedSubscriptionTests: TwoStacksTestCase {
    func testTheDescriptorIsClearedOnlyWhenTheLastAppLetsGo() async throws {
        let ticker = Ticker()
        let tickQueue = DispatchQueue(label: "ticker")
        let peripheralManager = PeripheralManager(delegate: ticker, queue: tickQueue, socketPath: socket(1))
        XCTAssertNotNil(ticker.recorder.wait(for: "state poweredOn"))
        try await peripheralManager.publishAndAdvertise(ticker.characteristic, in: BluetoothUUID(0xFFA0), as: "Ticker")
        let timer = DispatchSource.makeTimerSource(queue: tickQueue)
        timer.schedule(deadline: .now(), repeating: .milliseconds(20))
        timer.setEventHandler { ticker.tick(peripheralManager) }
        timer.resume()
        defer { timer.cancel() }

        let listeners = [Listener(), Listener()]
        var centrals: [CentralManager?] = listeners.map { CentralManager(delegate: $0, queue: DispatchQueue(label: "central"), socketPath: socket(0)) }
        var peripherals: [Peripheral] = []
        var counters: [Characteristic] = []
        for (central, listener) in zip(centrals.compactMap { $0 }, listeners) {
            XCTAssertNotNil(listener.recorder.wait(for: "state poweredOn"))
            let (peripheral, counter) = try await central.connectedCharacteristic(BluetoothUUID(0xFFA1), in: BluetoothUUID(0xFFA0), delegate: listener)
            peripheral.setNotifyValue(true, for: counter)
            XCTAssertNotNil(listener.recorder.wait(for: "notifying true"))
            peripherals.append(peripheral)
            counters.append(counter)
        }
        XCTAssertEqual(ticker.recorder.all.filter { $0 == "subscribed" }.count, 1, "one link, one descriptor: \(ticker.recorder.all)")

        // The first app lets go: the second still hears every tick, the first hears none, and the peripheral heard no
        // unsubscription.
        peripherals[0].setNotifyValue(false, for: counters[0])
        XCTAssertNotNil(listeners[0].recorder.wait(for: "notifying false"))
        let heard = listeners.map(\.count)
        XCTAssertTrue(eventually(.seconds(5)) { listeners[1].count >= heard[1] + 20 }, "the second app heard \(listeners[1].count - heard[1]) after the first let go")
        XCTAssertEqual(listeners[0].count, heard[0], "values still reached the app that let go")
        XCTAssertFalse(ticker.recorder.all.contains("unsubscribed"), "\(ticker.recorder.all)")

        // The second cancels its connection; the first keeps the link, and now nobody is subscribed.
        centrals[1]?.cancelPeripheralConnection(peripherals[1])
        XCTAssertNotNil(ticker.recorder.wait(for: "unsubscribed"), "the last subscriber's cancel clears the descriptor: \(ticker.recorder.all)")

        // The second connects again (not subscribing), the first subscribes again, then the first app goes: the
        // descriptor is cleared with it while the second keeps the link up.
        try await centrals[1]!.connected(to: peripherals[1])
        peripherals[0].setNotifyValue(true, for: counters[0])
        XCTAssertTrue(eventually { ticker.recorder.all.filter { $0 == "subscribed" }.count == 2 }, "\(ticker.recorder.all)")
        let disconnections = listeners[1].recorder.all.filter { $0 == "disconnected" }.count
        peripherals.removeFirst()
        counters.removeAll()
        centrals[0] = nil
        XCTAssertTrue(eventually(.seconds(10)) { ticker.recorder.all.filter { $0 == "unsubscribed" }.count == 2 },
                      "an app that went leaves nobody subscribed: \(ticker.recorder.all)")
        XCTAssertEqual(peripherals[0].state, .connected, "the second app kept the link")
        XCTAssertEqual(listeners[1].recorder.all.filter { $0 == "disconnected" }.count, disconnections, "\(listeners[1].recorder.all)")
        withExtendedLifetime((peripheralManager, centrals)) {}
    }
}
