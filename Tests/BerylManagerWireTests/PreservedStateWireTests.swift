import BerylCore
import BerylManager
import BerylManagerWire
import BerylWire
import XCTest

/// managerd's translation of preserved state: willRestoreState on the wire, and version 1 records (the wire
/// message's bytes) read into the current struct.
final class PreservedStateWireTests: XCTestCase {
    private var legacy: Beryl_Ipc_V1_PreservedState {
        .with {
            $0.central = .with { central in
                central.scanning = true
                central.scanServiceUuids = ["180D"]
                central.allowDuplicates = true
                central.solicitedServiceUuids = ["FE59"]
                central.links = [.with { link in
                    link.identifier = "P1"
                    link.name = "Lock"
                    link.notifyOnDisconnection = true
                    link.database = .with { $0.services = [.with { service in
                        service.uuid = "A0B40001-9266-4B2B-8D1B-2F3A0E6F1C01"
                        service.startHandle = 16
                        service.endHandle = 24
                        service.characteristics = [.with { $0.uuid = "2A37"; $0.properties = 0x12; $0.valueHandle = 18; $0.descriptors = [.with { $0.uuid = "2902"; $0.handle = 19 }] }]
                        service.included = [.with { $0.uuid = "180F"; $0.startHandle = 30; $0.endHandle = 33 }]
                    }] }
                    link.notifyingValueHandles = [18]
                }, .with { $0.identifier = "P2"; $0.pending = true }]
            }
            $0.peripheral = .with { peripheral in
                peripheral.services = [.with { service in
                    service.spec = .with { spec in
                        spec.uuid = "181A"
                        spec.primary = true
                        spec.includedStartHandles = [40]
                        spec.characteristics = [
                            .with { $0.uuid = "2A6E"; $0.properties = 0x12; $0.permissions = 0x01; $0.cached = true; $0.value = Data([0x10, 0x08])
                                    $0.descriptors = [.with { $0.uuid = "2901"; $0.value = Data("Temp".utf8) }] },
                            // notifyEncryptionRequired (0x100) is wider than a declaration's byte, and is kept.
                            .with { $0.uuid = "2A6F"; $0.properties = 0x11A; $0.permissions = 0x03 },
                        ]
                    }
                    service.published = .with { $0.startHandle = 50; $0.endHandle = 56; $0.valueHandles = [52, 55] }
                }]
                peripheral.advertising = true
                peripheral.localName = "Thermo"
                peripheral.advertisedServiceUuids = ["181A"]
                peripheral.subscriptions = [.with { $0.manager = 1; $0.central = "C1"; $0.valueHandle = 52; $0.notify = true; $0.maximumUpdateLength = 244 }]
            }
        }
    }

    func testEveryFieldCrossesTheWireBothWays() throws {
        let state = try PreservedState(wire: legacy)
        XCTAssertEqual(state.central?.scan, ScanRequest(services: [BluetoothUUID(0x180D)], allowDuplicates: true, solicited: [BluetoothUUID(0xFE59)]))
        XCTAssertEqual(state.central?.links.first?.database?.services.first?.characteristics.first?.descriptors.first?.handle, 19)
        XCTAssertEqual(state.peripheral?.services.first?.definition.characteristics.map(\.cachedValue), [[0x10, 0x08], nil], "a value makes it cached, none leaves it to the app")
        XCTAssertEqual(state.peripheral?.services.first?.handles, 50...56)
        XCTAssertEqual(state.wire, legacy, "what the app hears as willRestoreState is what was kept")
    }

    func testAVersionOneRecordIsMigrated() throws {
        let bytes: [UInt8] = try legacy.serializedBytes()
        let migrated = try PreservedState.decodeStored(bytes)
        XCTAssertEqual(migrated, try PreservedState(wire: legacy))
        XCTAssertEqual(try PreservedState.decodeStored(migrated.encoded()), migrated, "and written again as version 2")
        XCTAssertEqual(try PreservedState.decodeStored([]), PreservedState(), "an empty version 1 record was an empty state")
    }

    func testADamagedRecordIsRefusedWithItsReason() {
        var badUUID = legacy
        badUUID.central.scanServiceUuids = ["not-a-uuid"]
        XCTAssertThrowsError(try PreservedState.decodeStored(try badUUID.serializedBytes())) { error in
            XCTAssertEqual(error as? PreservedStateError, .unreadable("not a Bluetooth UUID: not-a-uuid"))
        }
        var wideHandle = legacy
        wideHandle.peripheral.subscriptions[0].valueHandle = 0x1_0000
        XCTAssertThrowsError(try PreservedState(wire: wideHandle)) { error in
            XCTAssertEqual(error as? PreservedStateError, .unreadable("attribute handle 65536 is out of range"))
        }
        XCTAssertThrowsError(try PreservedState.decodeStored([0xFF, 0xFF, 0xFF])) { error in
            guard case .unreadable? = error as? PreservedStateError else { return XCTFail("\(error)") }
        }
    }

    func testAttdsDiscoveryAnswersBecomeDiscoveries() throws {
        let container = Beryl_Ipc_V1_GattDatabase.with { $0.services = [.with { service in
            service.startHandle = 10
            service.endHandle = 20
            service.characteristics = [.with { $0.uuid = "2A37"; $0.properties = 0x10; $0.valueHandle = 12; $0.descriptors = [.with { $0.uuid = "2902"; $0.handle = 13 }] }]
            service.included = [.with { $0.uuid = "180F"; $0.startHandle = 1; $0.endHandle = 4 }]
        }] }
        XCTAssertEqual(try RemoteDatabase.Discovery(wire: container, depth: .characteristics, range: 10...20, sought: []),
                       .characteristics([.init(uuid: BluetoothUUID(0x2A37), properties: 0x10, valueHandle: 12, descriptors: [.init(uuid: BluetoothUUID(0x2902), handle: 13)])], inServiceAt: 10))
        XCTAssertEqual(try RemoteDatabase.Discovery(wire: container, depth: .included, range: 10...20, sought: []),
                       .included([.init(uuid: BluetoothUUID(0x180F), handles: 1...4)], inServiceAt: 10))
        XCTAssertEqual(try RemoteDatabase.Discovery(wire: container, depth: .descriptors, range: 13...14, sought: []),
                       .descriptors([.init(uuid: BluetoothUUID(0x2902), handle: 13)], ofValueAt: 12), "descriptors start just after their value")
        XCTAssertThrowsError(try RemoteDatabase.Discovery(wire: container, depth: .services, range: 1...0xFFFF, sought: []), "a service must name its UUID")
        let named = Beryl_Ipc_V1_GattDatabase.with { $0.services = [.with { $0.uuid = "180D"; $0.startHandle = 10; $0.endHandle = 20 }] }
        XCTAssertEqual(try RemoteDatabase.Discovery(wire: named, depth: .services, range: 1...0xFFFF, sought: ["180D"]),
                       .services([.init(uuid: BluetoothUUID(0x180D), handles: 10...20)], sought: [BluetoothUUID(0x180D)]), "what it looked for")
        XCTAssertEqual(try RemoteDatabase.Discovery(wire: named, depth: .whole, range: 1...0xFFFF, sought: []),
                       .whole([.init(uuid: BluetoothUUID(0x180D), handles: 10...20)], sought: nil), "none named: every service")
    }
}
