import Beryl
import BerylDaemonKit
import BerylSupervisor
import BerylTestSupport
import BerylWire
import Dispatch
import Foundation
import Synchronization
import XCTest

/// Records what a delegate heard, for the test to wait on.
final class Recorder: Sendable {
    private let lines = Mutex<[String]>([])
    func note(_ line: String) { lines.withLock { $0.append(line) } }
    var all: [String] { lines.withLock { $0 } }
    func wait(for prefix: String, timeout: TimeInterval = 15) -> String? {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let line = all.first(where: { $0.hasPrefix(prefix) }) { return line }
            usleep(20_000)
        }
        return nil
    }
}

/// A heart-rate peripheral app as the programming guide writes it: a dynamic body-sensor location, a writable
/// control point, and a notifying measurement.
final class HeartRatePeripheral: PeripheralManagerDelegate {
    let recorder = Recorder()
    let location = MutableCharacteristic(type: BluetoothUUID(0x2A38), properties: .read, value: nil, permissions: .readable)
    let control = MutableCharacteristic(type: BluetoothUUID(0x2A39), properties: .write, value: nil, permissions: .writeable)
    let measurement = MutableCharacteristic(type: BluetoothUUID(0x2A37), properties: .notify, value: nil, permissions: .readable)
    let cached = MutableCharacteristic(type: BluetoothUUID(0x2A29), properties: .read, value: Data("Beryl Labs".utf8), permissions: .readable)

    func peripheralManagerDidUpdateState(_ peripheral: PeripheralManager) { recorder.note("state \(peripheral.state)") }
    func peripheralManager(_ peripheral: PeripheralManager, didAdd service: Service, error: Error?) {
        recorder.note("added \(service.uuid) \(error.map { "\($0)" } ?? "ok")")
    }
    func peripheralManagerDidStartAdvertising(_ peripheral: PeripheralManager, error: Error?) { recorder.note("advertising \(error.map { "\($0)" } ?? "ok")") }
    func peripheralManager(_ peripheral: PeripheralManager, didReceiveRead request: ATTRequest) {
        recorder.note("read \(request.characteristic.uuid) offset \(request.offset)")
        guard request.characteristic === location else { return peripheral.respond(to: request, withResult: .readNotPermitted) }
        guard request.offset <= 1 else { return peripheral.respond(to: request, withResult: .invalidOffset) }
        request.value = Data([0x01])
        peripheral.respond(to: request, withResult: .success)
    }
    func peripheralManager(_ peripheral: PeripheralManager, didReceiveWrite requests: [ATTRequest]) {
        recorder.note("write \(requests.map { "\($0.characteristic.uuid)=\($0.value?.map { String(format: "%02x", $0) }.joined() ?? "")" }.joined(separator: ","))")
        peripheral.respond(to: requests[0], withResult: requests[0].value == Data([0xFF]) ? .writeNotPermitted : .success)
    }
    func peripheralManager(_ peripheral: PeripheralManager, central: Central, didSubscribeTo characteristic: Characteristic) {
        recorder.note("subscribed \(characteristic.uuid) max \(central.maximumUpdateValueLength)")
    }
    func peripheralManager(_ peripheral: PeripheralManager, central: Central, didUnsubscribeFrom characteristic: Characteristic) {
        recorder.note("unsubscribed \(characteristic.uuid)")
    }
}

final class HeartRateCentral: CentralManagerDelegate, PeripheralDelegate {
    let recorder = Recorder()
    let discovered = Mutex<[Peripheral]>([])
    func centralManagerDidUpdateState(_ central: CentralManager) { recorder.note("state \(central.state)") }
    func centralManager(_ central: CentralManager, didDiscover peripheral: Peripheral, advertisementData: [String: Any], rssi RSSI: NSNumber) {
        discovered.withLock { $0.append(peripheral) }
        let uuids = advertisementData[AdvertisementDataServiceUUIDsKey] as? [BluetoothUUID] ?? []
        recorder.note("discovered \(advertisementData[AdvertisementDataLocalNameKey] as? String ?? "?") \(uuids.map(\.description)) rssi \(RSSI)")
    }
    func centralManager(_ central: CentralManager, didConnect peripheral: Peripheral) { recorder.note("connected \(peripheral.identifier)") }
    func centralManager(_ central: CentralManager, didDisconnectPeripheral peripheral: Peripheral, error: Error?) {
        recorder.note("disconnected \(error.map { "\($0)" } ?? "cleanly")")
    }
    func peripheral(_ peripheral: Peripheral, didDiscoverServices error: Error?) {
        recorder.note("services \(peripheral.services?.map(\.uuid.description) ?? []) \(error.map { "\($0)" } ?? "ok")")
    }
    func peripheral(_ peripheral: Peripheral, didUpdateValueFor characteristic: Characteristic, error: Error?) {
        recorder.note("value \(characteristic.uuid) \(characteristic.value?.map { String(format: "%02x", $0) }.joined() ?? "-") \(error.map { "\($0)" } ?? "")")
    }
    func peripheral(_ peripheral: Peripheral, didWriteValueFor characteristic: Characteristic, error: Error?) {
        recorder.note("wrote \(characteristic.uuid) \(error.map { "\($0)" } ?? "ok")")
    }
    func peripheral(_ peripheral: Peripheral, didUpdateNotificationStateFor characteristic: Characteristic, error: Error?) {
        recorder.note("notifying \(characteristic.uuid) \(characteristic.isNotifying)")
    }
}

final class IncludedServicesCentral: CentralManagerDelegate, PeripheralDelegate {
    let recorder = Recorder()
    func centralManagerDidUpdateState(_ central: CentralManager) { recorder.note("state \(central.state)") }
    func peripheral(_ peripheral: Peripheral, didDiscoverIncludedServicesFor service: Service, error: Error?) {
        recorder.note("included \(service.uuid): " + (service.includedServices ?? []).map { "\($0.uuid) \($0.isPrimary ? "primary" : "secondary")" }.joined(separator: ", "))
    }
}
