import BerylATT
import BerylCore
import BerylCrypto
import BerylGATT
import XCTest

final class GATTServerDiscoveryTests: XCTestCase {
    /// GATT/SR/GAD/BV-01-C: Discover All Primary Services (Read By Group Type, 0x2800), continued until Attribute Not Found.
    func testGATT_SR_GAD_BV_01_C_discoverAllPrimaryServices() throws {
        let (server, _) = try makeServer()
        let first = sent(server.receive([0x10] + le(1) + le(0xFFFF) + le(0x2800)))
        XCTAssertEqual(first, [0x11, 6] + le(1) + le(3) + le(0x1800) + le(8) + le(15) + le(0x180D), "16-bit services only; the secondary is not listed")
        let second = try XCTUnwrap(sent(server.receive([0x10] + le(16) + le(0xFFFF) + le(0x2800))))
        XCTAssertEqual(Array(second.prefix(6)), [0x11, 20] + le(16) + le(22))
        XCTAssertEqual(sent(server.receive([0x10] + le(23) + le(0xFFFF) + le(0x2800))), [0x01, 0x10] + le(23) + [0x0A])
    }

    /// Only service declarations are groups: a characteristic typed 0x2800 with a long value (which attd refuses to
    /// publish) is not listed, and could not be: its length does not fit the response's one-byte length field.
    func testReadByGroupTypeListsOnlyServiceDeclarations() throws {
        let database = AttributeDatabase()
        try database.add(ServiceDefinition(uuid: BluetoothUUID(0x180F), characteristics: [
            CharacteristicDefinition(uuid: BluetoothUUID(0x2800), properties: .read, permissions: .readable, value: [UInt8](repeating: 7, count: 300)),
        ]))
        let server = ATTServer(database: database)
        _ = server.receive([0x02] + le(517))
        XCTAssertEqual(sent(server.receive([0x10] + le(1) + le(0xFFFF) + le(0x2800))), [0x11, 6] + le(1) + le(3) + le(0x180F))
        XCTAssertEqual(sent(server.receive([0x10] + le(3) + le(0xFFFF) + le(0x2800))), [0x01, 0x10] + le(3) + [0x0A])
    }

    /// GATT/SR/GAD/BV-02-C: Discover Primary Service by Service UUID (Find By Type Value).
    func testGATT_SR_GAD_BV_02_C_discoverPrimaryServiceByUUID() throws {
        let (server, _) = try makeServer()
        XCTAssertEqual(sent(server.receive([0x06] + le(1) + le(0xFFFF) + le(0x2800) + le(0x180D))), [0x07] + le(8) + le(15))
        XCTAssertEqual(sent(server.receive([0x06] + le(1) + le(0xFFFF) + le(0x2800) + le(0x1234))), [0x01, 0x06] + le(1) + [0x0A])
    }

    /// GATT/SR/GAD/BV-03-C: Find Included Services (Read By Type, 0x2802).
    func testGATT_SR_GAD_BV_03_C_findIncludedServices() throws {
        let (server, _) = try makeServer()
        XCTAssertEqual(sent(server.receive([0x08] + le(8) + le(15) + le(0x2802))), [0x09, 8] + le(9) + le(4) + le(7) + le(0x180F))
    }

    /// GATT/SR/GAD/BV-04-C: Discover All Characteristics of a Service (Read By Type, 0x2803).
    func testGATT_SR_GAD_BV_04_C_discoverAllCharacteristics() throws {
        let (server, _) = try makeServer()
        XCTAssertEqual(sent(server.receive([0x08] + le(8) + le(15) + le(0x2803))),
                       [0x09, 7] + le(10) + [0x30] + le(11) + le(0x2A37) + le(13) + [0x02] + le(14) + le(0x2A38))
        let custom = try XCTUnwrap(sent(server.receive([0x08] + le(16) + le(22) + le(0x2803))))
        XCTAssertEqual(custom[1], 21, "128-bit declarations: handle + properties + value handle + 16-byte UUID")
        XCTAssertEqual(Array(custom[2...5]), le(17) + [0x0E] + [18], "first: handle 17, read|writeWithoutResponse|write, value at 18")
    }

    /// GATT/SR/GAD/BV-05-C: Discover Characteristics by UUID (Read By Type 0x2803, filtered by the client).
    func testGATT_SR_GAD_BV_05_C_discoverCharacteristicsByUUID() throws {
        let (server, _) = try makeServer()
        XCTAssertEqual(sent(server.receive([0x08] + le(1) + le(0xFFFF) + le(0x2A38))), [0x09, 3] + le(14) + [2], "Read Using Characteristic UUID")
    }

    /// GATT/SR/GAD/BV-06-C: Discover All Characteristic Descriptors (Find Information).
    func testGATT_SR_GAD_BV_06_C_discoverAllDescriptors() throws {
        let (server, _) = try makeServer()
        XCTAssertEqual(sent(server.receive([0x04] + le(12) + le(12))), [0x05, 1] + le(12) + le(0x2902), "the CCCD added for notify")
        XCTAssertEqual(sent(server.receive([0x04] + le(15) + le(15))), [0x05, 1] + le(15) + le(0x2901))
        let mixed = try XCTUnwrap(sent(server.receive([0x04] + le(16) + le(18))))
        XCTAssertEqual(mixed[1], 1, "16-bit entries only until the UUID size changes")
        XCTAssertEqual(mixed.count, 2 + 4 * 2, "handles 16 and 17; 18 has a 128-bit type")
    }

    /// GATT/SR/GAD/BI-… : invalid handle ranges and group types.
    func testInvalidRangesAndUnsupportedGroupTypes() throws {
        let (server, _) = try makeServer()
        XCTAssertEqual(sent(server.receive([0x10] + le(0) + le(5) + le(0x2800))), [0x01, 0x10] + le(0) + [0x01])
        XCTAssertEqual(sent(server.receive([0x10] + le(9) + le(5) + le(0x2800))), [0x01, 0x10] + le(9) + [0x01])
        XCTAssertEqual(sent(server.receive([0x10] + le(1) + le(5) + le(0x2803))), [0x01, 0x10] + le(1) + [0x10])
        XCTAssertEqual(sent(server.receive([0x04] + le(30) + le(40))), [0x01, 0x04] + le(30) + [0x0A])
    }
}
