import BerylATT
import BerylCore
import BerylCrypto
import BerylGATT
import XCTest

final class GATTCoreServiceTests: XCTestCase {
    /// Core Vol 3 Part G §7.3: the hash follows the database's shape, not its values.
    func testDatabaseHashTracksTheDatabaseShape() throws {
        let database = AttributeDatabase()
        try database.addCoreServices(deviceName: "Beryl")
        let hashHandle = try XCTUnwrap(database.databaseHashHandle)
        guard case .fixed(let initial) = database.attribute(at: hashHandle)?.value else { return XCTFail() }
        XCTAssertEqual(initial.count, 16)
        XCTAssertEqual(initial, database.computeHash())
        let added = try database.add(ServiceDefinition(uuid: BluetoothUUID(0x180F), characteristics: [
            CharacteristicDefinition(uuid: BluetoothUUID(0x2A19), properties: [.read, .notify], permissions: .readable, value: [50]),
        ]))
        guard case .fixed(let grown) = database.attribute(at: hashHandle)?.value else { return XCTFail() }
        XCTAssertNotEqual(grown, initial)
        database.setValue([10], at: added + 2)
        XCTAssertEqual(database.computeHash(), grown, "a value change is not a database change")
        XCTAssertTrue(database.removeService(at: added))
        guard case .fixed(let shrunk) = database.attribute(at: hashHandle)?.value else { return XCTFail() }
        XCTAssertEqual(shrunk, initial, "the same attributes at the same handles hash the same")
    }

    /// The example database of Core Vol 3 Part G Appendix B hashes to F1CA2D48 ECF58BAC 8A8830BB B9FBA990, which the
    /// characteristic holds least significant octet first (as Zephyr, Android and PTS GATT/SR/GAS/BV-02-C expect).
    func testDatabaseHashOfTheSpecsExampleDatabase() throws {
        func declaration(_ properties: UInt8, _ valueHandle: UInt16, _ uuid: UInt16) -> AttributeValue {
            .fixed([properties] + le(valueHandle) + le(uuid))
        }
        let table: [(UInt16, UInt16, AttributeValue)] = [
            (0x01, 0x2800, .fixed(le(0x1800))), (0x02, 0x2803, declaration(0x0A, 0x03, 0x2A00)), (0x03, 0x2A00, .fixed(Array("Beryl".utf8))),
            (0x04, 0x2803, declaration(0x02, 0x05, 0x2A01)), (0x05, 0x2A01, .fixed([0, 0])),
            (0x06, 0x2800, .fixed(le(0x1801))), (0x07, 0x2803, declaration(0x20, 0x08, 0x2A05)), (0x08, 0x2A05, .fixed([1, 0, 0xFF, 0xFF])),
            (0x09, 0x2902, .clientConfiguration), (0x0A, 0x2803, declaration(0x0A, 0x0B, 0x2B29)), (0x0B, 0x2B29, .clientSupportedFeatures),
            (0x0C, 0x2803, declaration(0x02, 0x0D, 0x2B2A)), (0x0D, 0x2B2A, .fixed([UInt8](repeating: 0, count: 16))),
            (0x0E, 0x2800, .fixed(le(0x1808))), (0x0F, 0x2802, .fixed(le(0x14) + le(0x16) + le(0x180F))),
            (0x10, 0x2803, declaration(0xA2, 0x11, 0x2A18)), (0x11, 0x2A18, .dynamic), (0x12, 0x2902, .clientConfiguration),
            (0x13, 0x2900, .fixed([0, 0])), (0x14, 0x2801, .fixed(le(0x180F))), (0x15, 0x2803, declaration(0x02, 0x16, 0x2A19)),
            (0x16, 0x2A19, .fixed([100])),
        ]
        let database = AttributeDatabase(attributes: table.map { Attribute(handle: $0.0, type: BluetoothUUID($0.1), value: $0.2) })
        XCTAssertEqual(database.databaseHashHandle, 0x0D)
        XCTAssertEqual(Hex.encode(database.computeHash().reversed()), "f1ca2d48ecf58bac8a8830bbb9fba990")
    }

    /// Core Vol 3 Part G §7.2: a client may set Client Supported Features bits but never clear them.
    func testClientSupportedFeaturesCanOnlyGrow() throws {
        let database = AttributeDatabase()
        try database.addCoreServices(deviceName: "Beryl")
        let handle = try XCTUnwrap(database.attributes.first { $0.type == GATTType.clientSupportedFeatures }).handle
        let server = ATTServer(database: database)
        XCTAssertEqual(sent(server.receive([0x0A] + le(handle))), [0x0B, 0x00])
        XCTAssertEqual(server.receive([0x12] + le(handle) + [0x01]), [.clientFeaturesChanged([0x01]), .send([0x13])],
                       "a bonded peer's features are kept with its bond, so the shell hears of each change")
        XCTAssertEqual(server.receive([0x12] + le(handle) + [0x01]), [.send([0x13])], "the same bits again change nothing")
        XCTAssertEqual(sent(server.receive([0x0A] + le(handle))), [0x0B, 0x01])
        XCTAssertEqual(sent(server.receive([0x12] + le(handle) + [0x02])), [0x01, 0x12] + le(handle) + [0x13], "clearing bit 0 is Value Not Allowed")
        XCTAssertEqual(sent(server.receive([0x12] + le(handle) + [0x03])), [0x13])
        XCTAssertEqual(sent(server.receive([0x12] + le(handle) + [])), [0x01, 0x12] + le(handle) + [0x0D])
        XCTAssertEqual(ATTServer(database: database).clientFeatures, [0], "per peer: a new bearer starts clear")
    }

    func testServiceChangedIndicatesToASubscribedPeer() throws {
        let database = AttributeDatabase()
        try database.addCoreServices(deviceName: "Beryl")
        let changed = try XCTUnwrap(database.serviceChangedHandle)
        XCTAssertEqual(database.attribute(at: changed + 1)?.type, GATTType.clientConfiguration)
        let server = ATTServer(database: database)
        XCTAssertEqual(sent(server.receive([0x0A] + le(changed))), [0x01, 0x0A] + le(changed) + [0x02], "Service Changed is not readable")
        XCTAssertEqual(sent(server.receive([0x12] + le(changed + 1) + [0x02, 0x00])), [0x13])
        XCTAssertEqual(server.indicateServiceChanged(20...30).outputs, [.send([0x1D] + le(changed) + le(20) + le(30))])
        XCTAssertEqual(ServiceChangedValue.decode(le(30) + le(20)), 20...30, "a reversed range is put in order")
        XCTAssertNil(ServiceChangedValue.decode([1, 2, 3]))
    }
}
