import BerylATT
import BerylCore
import BerylGATT
import XCTest

final class DatabaseHandleTests: XCTestCase {
    private func thermostat() -> ServiceDefinition {
        ServiceDefinition(uuid: BluetoothUUID("7E570001-0000-1000-8000-00805F9B34FB")!, characteristics: [
            CharacteristicDefinition(uuid: BluetoothUUID("7E570002-0000-1000-8000-00805F9B34FB")!, properties: [.read, .write], permissions: [.readable, .writeable]),
            CharacteristicDefinition(uuid: BluetoothUUID(0x2A6E), properties: .notify, permissions: .readable),
        ])
    }

    /// An app adding its service again after the stack reset gets its handles back (clients' caches and bonded
    /// clients' stored subscriptions stay right); a different service never lands on handles a client may have cached.
    func testTheSameServiceAddedAgainGetsItsHandlesBackAndNoOtherDoes() throws {
        let database = AttributeDatabase()
        try database.addCoreServices(deviceName: "Beryl")
        let first = try database.add(thermostat())
        let after = try database.add(ServiceDefinition(uuid: BluetoothUUID(0x180F), characteristics: [
            CharacteristicDefinition(uuid: BluetoothUUID(0x2A19), properties: .read, permissions: .readable, value: [50]),
        ]))
        XCTAssertTrue(database.removeService(at: first))
        let other = try database.add(ServiceDefinition(uuid: BluetoothUUID(0x181A), characteristics: [
            CharacteristicDefinition(uuid: BluetoothUUID(0x2A6E), properties: .notify, permissions: .readable),
            CharacteristicDefinition(uuid: BluetoothUUID(0x2A6F), properties: .notify, permissions: .readable),
        ]))
        XCTAssertGreaterThan(other, after, "another service gets fresh handles")
        let again = try database.add(thermostat())
        XCTAssertEqual(again, first, "the same service gets its old handles")
        XCTAssertEqual(database.attribute(at: again)?.groupEnd, first + 5)
        XCTAssertEqual(database.attributes(in: 1...0xFFFF).map(\.handle), database.attributes(in: 1...0xFFFF).map(\.handle).sorted())
    }

    /// A bonded client's stored CCCD in a service published after the link came up is taken back (Core Vol 3 Part G
    /// §3.3.3.3: configurations persist across connections for bonded devices), and only for real CCCDs.
    func testStoredSubscriptionsAreAdoptedWhenTheirServiceIsPublished() throws {
        let database = AttributeDatabase()
        try database.addCoreServices(deviceName: "Beryl")
        let server = ATTServer(database: database)
        let start = try database.add(thermostat())
        let cccd = start + 5  // declaration, setpoint declaration and value, temperature declaration and value, its CCCD
        let adopted = server.adoptStored(clientConfigurations: [cccd: 0x0001, start + 2: 0x0001, 0x0FFF: 0x0002], in: start...(start + 5))
        XCTAssertEqual(adopted.map(\.valueHandle), [start + 4])
        XCTAssertEqual(server.clientConfigurations[cccd], 0x0001)
        XCTAssertNil(server.clientConfigurations[start + 2], "not a CCCD")
        XCTAssertTrue(server.adoptStored(clientConfigurations: [cccd: 0x0001], in: start...(start + 5)).isEmpty, "once")
    }
}
