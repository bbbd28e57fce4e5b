import BerylAttWire
import BerylCore
import BerylGATT
import BerylWire
import Foundation
import XCTest

/// An app's GATT client requests as the client core's operations, and what the app hears back, field by field.
final class GATTClientWireTests: XCTestCase {
    private func operation(_ build: (inout Beryl_Ipc_V1_AttRequest) -> Void) throws(FieldRefusal) -> GATTClient.Operation? {
        var request = Beryl_Ipc_V1_AttRequest()
        build(&request)
        return try GATTClient.Operation(wire: request.kind!)
    }

    private func refusal(_ build: (inout Beryl_Ipc_V1_AttRequest) -> Void) -> FieldRefusal? {
        do {
            _ = try operation(build)
            return nil
        } catch {
            return error
        }
    }

    func testEachRequestBecomesItsOperation() throws {
        XCTAssertEqual(try operation { $0.gattDiscover = .with { $0.connectionHandle = 0x40; $0.depth = .characteristics; $0.startHandle = 5; $0.endHandle = 9
            $0.characteristicUuids = ["2A37"] } },
                       .discover(DiscoveryScope(range: 5...9, characteristics: [BluetoothUUID(0x2A37)]), .characteristics))
        XCTAssertEqual(try operation { $0.gattDiscover = .with { $0.serviceUuids = ["180D"] } },
                       .discover(DiscoveryScope(range: 1...0xFFFF, services: [BluetoothUUID(0x180D)]), .whole), "0 and 0 are the whole database")
        XCTAssertEqual(try operation { $0.gattRead = .with { $0.handle = 0x12 } }, .read(handle: 0x12))
        XCTAssertEqual(try operation { $0.gattWrite = .with { $0.handle = 0x12; $0.value = Data([1, 2]) } }, .write(handle: 0x12, value: [1, 2]))
        XCTAssertNil(try operation { $0.gattWrite = .with { $0.handle = 0x12; $0.withoutResponse = true } }, "paced by the link, not a procedure")
        XCTAssertEqual(try operation { $0.gattSubscribe = .with { $0.valueHandle = 0x12; $0.enable = true } }, .configure(cccd: 0x13, notify: true, indicate: false))
        XCTAssertEqual(try operation { $0.gattSubscribe = .with { $0.cccdHandle = 0x20; $0.enable = true; $0.indicate = true } },
                       .configure(cccd: 0x20, notify: false, indicate: true))
        XCTAssertEqual(try operation { $0.gattSubscribe = .with { $0.valueHandle = 0x12; $0.indicate = true } }, .configure(cccd: 0x13, notify: false, indicate: false))
        XCTAssertEqual(try operation { $0.gattReadMultiple = .with { $0.handles = [3, 5] } }, .readMultiple([3, 5]))
        XCTAssertEqual(try operation { $0.gattReadByType = .with { $0.uuid = "2A00"; $0.startHandle = 2; $0.endHandle = 0 } },
                       .readByType(BluetoothUUID(0x2A00), in: 2...0xFFFF))
        XCTAssertEqual(try operation { $0.gattReliableWrite = .with { $0.writes = [.with { $0.handle = 7; $0.value = Data([9]) }] } },
                       .reliableWrite([HandleValue(handle: 7, value: [9])]))
        XCTAssertNil(try operation { $0.getBearers = .init() })
    }

    func testABadFieldIsNamed() {
        XCTAssertEqual(refusal { $0.gattDiscover = .with { $0.startHandle = 9; $0.endHandle = 5 } }?.field, "start_handle")
        XCTAssertEqual(refusal { $0.gattDiscover = .with { $0.serviceUuids = ["180D", "nope"] } }?.field, "service_uuids")
        XCTAssertEqual(refusal { $0.gattDiscover = .with { $0.characteristicUuids = ["x"] } }?.field, "characteristic_uuids")
        XCTAssertEqual(refusal { $0.gattSubscribe = .with { $0.valueHandle = 0xFFFF; $0.enable = true } }?.field, "value_handle")
        XCTAssertEqual(refusal { $0.gattSubscribe = .with { $0.cccdHandle = 0x10000 } }?.field, "cccd_handle")
        XCTAssertEqual(refusal { $0.gattReadMultiple = .with { $0.handles = [3] } }?.field, "handles")
        XCTAssertEqual(refusal { $0.gattReadByType = .with { $0.uuid = "" } }?.field, "uuid")
        XCTAssertEqual(refusal { $0.gattReliableWrite = .init() }?.field, "writes")
        XCTAssertEqual(refusal { $0.gattReliableWrite = .with { $0.writes = [.with { $0.handle = 7; $0.offset = 1 }] } }?.field, "writes")
    }

    func testOutcomesAndFailuresAsTheAppHearsThem() {
        XCTAssertEqual(Response(.value([1, 2])).att.gattValue.value, Data([1, 2]))
        XCTAssertEqual(Response(.values([HandleValue(handle: 3, value: [4])])).att.gattValues.values.map(\.handle), [3])
        XCTAssertEqual(Response(.written).ack, .init())
        XCTAssertEqual(Response(.descriptors([DiscoveredDescriptor(handle: 9, uuid: BluetoothUUID(0x2902))])).att.gattDatabase.services.first?
            .characteristics.first?.descriptors.map(\.handle), [9])

        let att = WireFailure(.att(.insufficientAuthentication))
        XCTAssertEqual(att.code, .invalidArgument)
        XCTAssertEqual(att.detail.attError, 0x05)
        XCTAssertEqual(att.field, "att_error")
        let timedOut = WireFailure(.bearerTimedOut)
        XCTAssertEqual(timedOut.code, .timeout)
        XCTAssertEqual(timedOut.detail.bluetoothError, .connectionTimeout)
        let closed = WireFailure(.linkClosed)
        XCTAssertEqual(closed.code, .notFound)
        XCTAssertEqual(closed.detail.bluetoothError, .peripheralDisconnected)
        let cancelled = WireFailure(.reliableWriteCancelled)
        XCTAssertEqual(cancelled.detail.bluetoothError, .unknown)
        XCTAssertEqual(cancelled.detail.attError, 0)
    }

    func testAServiceSpecIsRefusedAtTheFieldItBreaks() throws {
        var spec = Beryl_Ipc_V1_ServiceSpec.with {
            $0.uuid = "180D"
            $0.primary = true
            $0.characteristics = [.with { $0.uuid = "2A37"; $0.properties = 0x110; $0.permissions = 0x05; $0.cached = true; $0.value = Data([1])
                $0.descriptors = [.with { $0.uuid = "2901"; $0.value = Data("x".utf8) }] }]
        }
        let definition = try ServiceDefinition(wire: spec)
        XCTAssertEqual(definition.uuid, BluetoothUUID(0x180D))
        XCTAssertEqual(definition.characteristics.first?.properties.rawValue, 0x110, "Core Bluetooth's encryption-required bits kept")
        XCTAssertEqual(definition.characteristics.first?.permissions.rawValue, 0x05)
        XCTAssertEqual(definition.characteristics.first?.value, [1])
        XCTAssertEqual(definition.characteristics.first?.descriptors.map(\.uuid), [BluetoothUUID(0x2901)])

        func refused(_ change: (inout Beryl_Ipc_V1_ServiceSpec) -> Void) -> String? {
            var broken = spec
            change(&broken)
            do { _ = try ServiceDefinition(wire: broken); return nil } catch { return error.field }
        }
        XCTAssertEqual(refused { $0.uuid = "heart" }, "service.uuid")
        XCTAssertEqual(refused { $0.characteristics[0].uuid = "2803" }, "service.characteristics[0].uuid")
        XCTAssertEqual(refused { $0.characteristics[0].properties = 0x400 }, "service.characteristics[0]")
        XCTAssertEqual(refused { $0.characteristics[0].value = Data(count: 513) }, "service.characteristics[0].value")
        XCTAssertEqual(refused { $0.characteristics[0].descriptors[0].uuid = "2902" }, "service.characteristics[0].descriptors[0].uuid")
        XCTAssertEqual(refused { $0.includedStartHandles = [0] }, "service.included_start_handles")
        spec.characteristics[0].cached = false
        XCTAssertNil(try ServiceDefinition(wire: spec).characteristics.first?.value, "dynamic: no value kept")
    }

    /// Each event with values that differ per field, so a swapped field shows.
    func testAttdsEventsCarryEveryField() throws {
        let read = Event(readRequested: 11, link: 0x40, handle: 0x12, offset: 3).att.readRequested
        XCTAssertEqual([read.id, UInt64(read.connectionHandle), UInt64(read.handle), UInt64(read.offset)], [11, 0x40, 0x12, 3])
        let write = Event(writeRequested: 12, link: 0x41, writes: [PreparedWrite(handle: 0x13, offset: 2, value: [5])], withResponse: true).att.writeRequested
        XCTAssertEqual([write.id, UInt64(write.connectionHandle)], [12, 0x41])
        XCTAssertTrue(write.withResponse)
        XCTAssertEqual(write.writes, [.with { $0.handle = 0x13; $0.offset = 2; $0.value = Data([5]) }])
        let subscription = Event(subscriptionChanged: 0x14, link: 0x42, notify: false, indicate: true).att.subscriptionChanged
        XCTAssertEqual([subscription.valueHandle, subscription.connectionHandle], [0x14, 0x42])
        XCTAssertEqual([subscription.notify, subscription.indicate], [false, true])
        let notification = Event(notification: 0x15, value: [6], indication: true, link: 0x43).att.gattNotification
        XCTAssertEqual([notification.handle, notification.connectionHandle], [0x15, 0x43])
        XCTAssertEqual(notification.value, Data([6]))
        XCTAssertTrue(notification.indication)
        let tree = DiscoveredServiceTree(service: DiscoveredService(start: 0x20, end: 0x22, uuid: BluetoothUUID(0x180F)), included: [], characteristics: [])
        let changed = Event(serviceChanged: 0x20...0x30, link: 0x44, .success([tree])).att.gattServiceChanged
        XCTAssertEqual([changed.connectionHandle, changed.startHandle, changed.endHandle], [0x44, 0x20, 0x30])
        XCTAssertEqual(changed.database.services.map(\.startHandle), [0x20])
        XCTAssertFalse(Event(serviceChanged: 1...2, link: 0x44, .failure(.linkClosed)).att.gattServiceChanged.hasDatabase, "no database when re-discovery failed")
        let mtu = Event(mtuChanged: 247, link: 0x45, central: true).att.mtuChanged
        XCTAssertEqual([mtu.attMtu, mtu.connectionHandle], [247, 0x45])
        XCTAssertTrue(mtu.central)
        let peer = try XCTUnwrap(DeviceAddress("C0:FF:EE:00:00:01/random"))
        let opened = Event(bearerOpened: 0x46, mtu: 23, central: false, peer: peer).att.bearerOpened
        XCTAssertEqual([opened.connectionHandle, opened.attMtu], [0x46, 23])
        XCTAssertEqual(DeviceAddress(opened.peerAddress), peer, "a new link's peer comes with it")
        let closed = Event(bearerClosed: 0x46, central: true, reason: 0x13, stackFailed: false).att.bearerClosed
        XCTAssertEqual([closed.connectionHandle, closed.reason], [0x46, 0x13])
        XCTAssertTrue(closed.central)
        XCTAssertFalse(closed.stackFailed)
        XCTAssertTrue(Event(bearerClosed: 0x46, central: false, reason: 0x16, stackFailed: true).att.bearerClosed.stackFailed)
        let taken = Event(linksTakenOver: [opened]).att.linksTakenOver
        XCTAssertEqual(taken.bearers.map(\.connectionHandle), [0x46])
        XCTAssertTrue(taken.complete, "the whole list, so that a client can end the links it lacks")
        let secured = Event(securityChanged: LinkSecurity(encrypted: true, authenticated: false, bonded: true), link: 0x47, status: 0x06).att.securityChanged
        XCTAssertEqual([secured.connectionHandle, secured.status], [0x47, 0x06])
        XCTAssertEqual([secured.encrypted, secured.authenticated, secured.bonded], [true, false, true])
    }
}
