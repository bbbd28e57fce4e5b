@testable import Beryl
import BerylIPC
import BerylSupervisor
import Foundation
import Synchronization
import XCTest

/// A central that records each discovery callback once.
final class DiscoveryCentral: CentralManagerDelegate, PeripheralDelegate, Sendable {
    let recorder = Recorder()
    func centralManagerDidUpdateState(_ central: CentralManager) { recorder.note("state \(central.state)") }
    func centralManager(_ central: CentralManager, didConnect peripheral: Peripheral) { recorder.note("connected") }
    func peripheral(_ peripheral: Peripheral, didDiscoverServices error: Error?) { recorder.note("services \(error.map { "\($0)" } ?? "ok")") }
    func peripheral(_ peripheral: Peripheral, didDiscoverCharacteristicsFor service: Service, error: Error?) {
        recorder.note("characteristics \(service.uuid) \(error.map { "\($0)" } ?? "ok")")
    }
    func peripheral(_ peripheral: Peripheral, didDiscoverDescriptorsFor characteristic: Characteristic, error: Error?) {
        recorder.note("descriptors \(characteristic.uuid) \(error.map { "\($0)" } ?? "ok")")
    }
    func peripheral(_ peripheral: Peripheral, didUpdateValueFor descriptor: Descriptor, error: Error?) {
        recorder.note("descriptor value \(descriptor.uuid) \(descriptor.value.map { "\($0)" } ?? "nil") \(error.map { "\($0)" } ?? "ok")")
    }
    func peripheral(_ peripheral: Peripheral, didWriteValueFor descriptor: Descriptor, error: Error?) {
        recorder.note("descriptor written \(descriptor.uuid) \((error as? ATTError).map { "ATT \($0.code.rawValue)" } ?? error.map { "\($0)" } ?? "ok")")
    }
}

/// Each discovery call runs the ATT procedure its name says, for what it was asked, and adds to what was found
/// (Core Vol 3 Part G §4.4–§4.7): counted on the central's HCI monitor.
final class DiscoveryOnTheWireTests: TwoStacksTestCase {
    static let first = BluetoothUUID(string: "5E1F0001-0000-1000-8000-00805F9B34FB")
    static let second = BluetoothUUID(string: "5E1F0002-0000-1000-8000-00805F9B34FB")
    static let named = BluetoothUUID(string: "5E1F0011-0000-1000-8000-00805F9B34FB")
    static let plain = BluetoothUUID(string: "5E1F0012-0000-1000-8000-00805F9B34FB")

    /// The ATT requests the central sent within `duration`: opcode and, for ranged ones, the range.
    private func attRequests(_ monitor: HCIMonitor, for duration: Duration) -> [(opcode: UInt8, range: ClosedRange<UInt16>?)] {
        monitor.sentPDUs(within: duration).map { pdu in
            let ranged: Set<UInt8> = [0x04, 0x06, 0x08, 0x10]
            var range: ClosedRange<UInt16>?
            if ranged.contains(pdu[0]), pdu.count >= 5 {
                let start = UInt16(pdu[1]) | UInt16(pdu[2]) << 8, end = UInt16(pdu[3]) | UInt16(pdu[4]) << 8
                if start <= end { range = start...end }
            }
            return (pdu[0], range)
        }
    }

    func testDiscoveryRunsWhatItIsAskedForAndAddsToWhatWasFound() throws {
        // The peripheral: two services, the first with two characteristics, the second of which has a user description.
        let app = HeartRatePeripheral()
        let manager = PeripheralManager(delegate: app, queue: DispatchQueue(label: "peripheral"), socketPath: socket(1))
        XCTAssertNotNil(app.recorder.wait(for: "state poweredOn"))
        let named = MutableCharacteristic(type: Self.named, properties: [.read, .notify], value: nil, permissions: .readable)
        named.descriptors = [MutableDescriptor(type: BluetoothUUID(string: UUIDCharacteristicUserDescriptionString), value: "Set point")]
        let first = MutableService(type: Self.first, primary: true)
        first.characteristics = [MutableCharacteristic(type: Self.plain, properties: .read, value: Data([1]), permissions: .readable), named]
        let second = MutableService(type: Self.second, primary: true)
        second.characteristics = [MutableCharacteristic(type: Self.plain, properties: .read, value: Data([2]), permissions: .readable)]
        manager.add(first)
        XCTAssertNotNil(app.recorder.wait(for: "added \(Self.first)"))
        manager.add(second)
        XCTAssertNotNil(app.recorder.wait(for: "added \(Self.second)"))
        manager.startAdvertising([AdvertisementDataServiceUUIDsKey: [Self.first]])

        let client = DiscoveryCentral()
        let central = CentralManager(delegate: client, queue: DispatchQueue(label: "central"), socketPath: socket(0))
        XCTAssertNotNil(client.recorder.wait(for: "state poweredOn"))
        let address = try XCTUnwrap(StackProbe.controllerInfo(at: "\(scratch.root)/run1/hcid.sock")?.address)
        let peripheral = try XCTUnwrap(central.retrievePeripheral(address: address))
        peripheral.delegate = client
        central.connect(peripheral, options: nil)
        XCTAssertNotNil(client.recorder.wait(for: "connected"))
        let monitor = try HCIMonitor(hcidSocket: "\(scratch.root)/run0/hcid.sock")
        func calls(_ prefix: String) -> Int { client.recorder.all.filter { $0.hasPrefix(prefix) }.count }

        // discoverServices([first]): Find By Type Value for it, and no characteristic or descriptor discovery in it.
        peripheral.discoverServices([Self.first])
        XCTAssertNotNil(client.recorder.wait(for: "services ok"))
        XCTAssertEqual(peripheral.services?.map(\.uuid), [Self.first])
        XCTAssertNil(peripheral.services?.first?.characteristics, "no characteristics before they are discovered")
        let firstService = try XCTUnwrap(peripheral.services?.first)
        var requests = attRequests(monitor, for: .milliseconds(600))
        XCTAssertTrue(requests.contains { $0.opcode == 0x06 }, "Find By Type Value: \(requests)")
        XCTAssertFalse(requests.contains { $0.opcode == 0x10 }, "no Read By Group Type (all services): \(requests)")
        XCTAssertFalse(requests.contains { [0x04, 0x08].contains($0.opcode) && $0.range?.overlaps(UInt16(firstService.range.lowerBound)...UInt16(firstService.range.upperBound)) == true },
                       "nothing inside the service yet: \(requests)")

        // A second call adds, and the first service keeps its object.
        peripheral.discoverServices([Self.second])
        XCTAssertTrue(eventually { calls("services ok") == 2 })
        XCTAssertEqual(peripheral.services?.map(\.uuid), [Self.first, Self.second])
        XCTAssertTrue(peripheral.services?.first === firstService)

        // Characteristics of the first service, only the one asked for; then all, keeping the first's object.
        peripheral.discoverCharacteristics([Self.named], for: firstService)
        XCTAssertTrue(eventually { calls("characteristics") == 1 })
        XCTAssertEqual(firstService.characteristics?.map(\.uuid), [Self.named])
        let namedCharacteristic = try XCTUnwrap(firstService.characteristics?.first)
        requests = attRequests(monitor, for: .milliseconds(300))
        let within = UInt16(firstService.range.lowerBound)...UInt16(firstService.range.upperBound)
        XCTAssertTrue(requests.contains { $0.opcode == 0x08 && $0.range.map { within.contains($0.lowerBound) } == true }, "Read By Type in the service: \(requests)")
        XCTAssertFalse(requests.contains { $0.opcode == 0x04 }, "no descriptor discovery: \(requests)")
        XCTAssertNil(namedCharacteristic.descriptors, "no descriptors before they are discovered")
        peripheral.discoverCharacteristics(nil, for: firstService)
        XCTAssertTrue(eventually { calls("characteristics") == 2 })
        XCTAssertEqual(firstService.characteristics?.map(\.uuid), [Self.plain, Self.named])
        XCTAssertTrue(firstService.characteristics?.last === namedCharacteristic)
        XCTAssertNil(peripheral.services?.last?.characteristics, "the other service was not touched")

        // Descriptors of one characteristic: Find Information after its value, and the user description read as text.
        peripheral.discoverDescriptors(for: namedCharacteristic)
        XCTAssertTrue(eventually { calls("descriptors") == 1 })
        let descriptorUUIDs = namedCharacteristic.descriptors?.map(\.uuid) ?? []
        XCTAssertTrue(descriptorUUIDs.contains(BluetoothUUID(0x2901)) && descriptorUUIDs.contains(BluetoothUUID(0x2902)), "\(descriptorUUIDs)")
        requests = attRequests(monitor, for: .milliseconds(300))
        XCTAssertTrue(requests.contains { $0.opcode == 0x04 && $0.range?.lowerBound == UInt16(namedCharacteristic.valueHandle + 1) }, "\(requests)")
        let description = try XCTUnwrap(namedCharacteristic.descriptors?.first { $0.uuid == BluetoothUUID(0x2901) })
        peripheral.readValue(for: description)
        XCTAssertEqual(client.recorder.wait(for: "descriptor value"), "descriptor value 2901 Set point ok")
        XCTAssertEqual(description.value as? String, "Set point")
        // A user description the server did not make writable: the peer's own ATT error, typed.
        peripheral.writeValue(Data("Other".utf8), for: description)
        XCTAssertEqual(client.recorder.wait(for: "descriptor written"), "descriptor written 2901 ATT 3")
        XCTAssertEqual(calls("services"), 2, "one callback per call")
        withExtendedLifetime((manager, central)) {}
    }
}
