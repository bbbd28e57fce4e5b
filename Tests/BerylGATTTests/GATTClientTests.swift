import BerylATT
import BerylCore
import BerylGATT
import XCTest

/// A client bearer wired to a server bearer in memory: each procedure's requests cross as bytes.
final class Loopback {
    let client = ATTClient()
    let server: ATTServer
    let database: AttributeDatabase
    var notifications: [(UInt16, [UInt8])] = []
    var serverSaw: [[UInt8]] = []
    /// Rewrites the server's answers in flight (nil drops one), for peers that misbehave.
    var tamper: (([UInt8]) -> [UInt8]?)?

    /// A bare database, for tests that build their own.
    init(database: AttributeDatabase) {
        self.database = database
        server = ATTServer(database: database)
    }

    init() throws {
        database = AttributeDatabase()
        try database.add(ServiceDefinition(uuid: BluetoothUUID(0x1800), characteristics: [
            CharacteristicDefinition(uuid: BluetoothUUID(0x2A00), properties: .read, permissions: .readable, value: Array("Beryl HR".utf8)),
        ]))
        for index in 0..<6 {
            try database.add(ServiceDefinition(uuid: BluetoothUUID(UInt16(0x1810 + index)), characteristics: [
                CharacteristicDefinition(uuid: BluetoothUUID(0x2A37), properties: [.read, .notify], permissions: .readable, value: [UInt8(index)]),
            ]))
        }
        try database.add(ServiceDefinition(uuid: BluetoothUUID("6E400001-B5A3-F393-E0A9-E50E24DCCA9E")!, characteristics: [
            CharacteristicDefinition(uuid: BluetoothUUID("6E400002-B5A3-F393-E0A9-E50E24DCCA9E")!, properties: [.read, .write],
                                     permissions: [.readable, .writeable], value: Array(repeating: 0, count: 10),
                                     descriptors: [DescriptorDefinition(uuid: BluetoothUUID(0x2901), value: Array("Data".utf8))]),
        ]))
        // A service that includes the 128-bit one (its UUID is not in the include declaration) and a 16-bit one.
        let custom = try XCTUnwrap(database.attributes.last { $0.type == GATTType.primaryService }).handle
        try database.add(ServiceDefinition(uuid: BluetoothUUID(0x18FF), includes: [custom, 4], characteristics: []))
        server = ATTServer(database: database)
    }

    /// Runs a procedure to its end through the client bearer and the server.
    func run<R>(_ first: GATTStep<R>, _ handle: (ATTPDU) -> GATTStep<R>) -> GATTStep<R> {
        var step = first
        while case .request(let pdu) = step {
            let (id, outputs) = client.submit(pdu, at: .zero)
            guard let response = deliver(outputs, waitingFor: id) else { return .failed(.unlikelyError) }
            step = handle(response)
        }
        return step
    }

    private func deliver(_ outputs: [ATTClientOutput], waitingFor id: UInt64) -> ATTPDU? {
        var pending = outputs
        while !pending.isEmpty {
            let output = pending.removeFirst()
            switch output {
            case .send(let bytes):
                serverSaw.append(bytes)
                for reply in server.receive(bytes) {
                    guard case .send(let answer) = reply, let delivered = tamper.map({ $0(answer) }) ?? answer else { continue }
                    pending += client.receive(delivered, at: .zero)
                }
            case .response(id, let pdu):
                return pdu
            case .notification(let handle, let value):
                notifications.append((handle, value))
            default:
                continue
            }
        }
        return nil
    }
}

final class GATTClientProcedureTests: XCTestCase {
    /// GATT/CL/GAD/BV-01-C: Discover All Primary Services across several responses.
    func testGATT_CL_GAD_BV_01_C_discoverAllPrimaryServices() throws {
        let link = try Loopback()
        var procedure = DiscoverPrimaryServices()
        let result = link.run(procedure.start()) { procedure.handle($0) }
        guard case .done(let services) = result else { return XCTFail("\(result)") }
        XCTAssertEqual(services.map(\.uuid.description), ["1800", "1810", "1811", "1812", "1813", "1814", "1815", "6E400001-B5A3-F393-E0A9-E50E24DCCA9E", "18FF"])
        XCTAssertEqual(services.first?.start, 1)
        XCTAssertEqual(services.last?.end, UInt16(link.database.attributes.last!.handle))
        XCTAssertGreaterThan(link.serverSaw.count, 2, "took more than one request at the default MTU")
    }

    /// GATT/CL/GAD/BV-02-C: Discover Primary Service by UUID.
    func testGATT_CL_GAD_BV_02_C_discoverPrimaryServiceByUUID() throws {
        let link = try Loopback()
        var procedure = DiscoverPrimaryServices(uuid: BluetoothUUID(0x1813))
        let result = link.run(procedure.start()) { procedure.handle($0) }
        guard case .done(let services) = result else { return XCTFail("\(result)") }
        XCTAssertEqual(services.count, 1)
        XCTAssertEqual(services[0].uuid, BluetoothUUID(0x1813))
    }

    /// GATT/CL/GAD/BV-04-C and BV-06-C: characteristics and their descriptors.
    func testGATT_CL_GAD_BV_04_C_discoverCharacteristicsAndDescriptors() throws {
        let link = try Loopback()
        var services = DiscoverPrimaryServices(uuid: BluetoothUUID("6E400001-B5A3-F393-E0A9-E50E24DCCA9E")!)
        guard case .done(let found) = link.run(services.start(), { services.handle($0) }), let service = found.first else { return XCTFail() }
        var characteristics = DiscoverCharacteristics(in: service.start...service.end)
        guard case .done(let list) = link.run(characteristics.start(), { characteristics.handle($0) }), let characteristic = list.first else {
            return XCTFail()
        }
        XCTAssertEqual(characteristic.uuid, BluetoothUUID("6E400002-B5A3-F393-E0A9-E50E24DCCA9E"))
        XCTAssertEqual(characteristic.properties, [.read, .write])
        var descriptors = DiscoverDescriptors(in: (characteristic.valueHandle + 1)...service.end)
        guard case .done(let found2) = link.run(descriptors.start(), { descriptors.handle($0) }) else { return XCTFail() }
        XCTAssertEqual(found2.map(\.uuid), [BluetoothUUID(0x2901)])
    }

    /// GATT/CL/GAR/BV-04-C and GATT/CL/GAW/BV-05-C: a long write then a long read of the same 300-byte value.
    func testGATT_CL_GAW_BV_05_C_longWriteThenLongRead() throws {
        let link = try Loopback()
        let value = (0..<300).map { UInt8(truncatingIfNeeded: $0 &* 13) }
        let handle = try XCTUnwrap(link.database.attributes.first { $0.type == BluetoothUUID("6E400002-B5A3-F393-E0A9-E50E24DCCA9E") }).handle
        var write = WriteLongValue(handle: handle, value: value, mtu: link.client.mtu)
        XCTAssertEqual(link.run(write.start()) { write.handle($0) }, .done(true))
        var read = ReadLongValue(handle: handle, mtu: link.client.mtu)
        XCTAssertEqual(link.run(read.start()) { read.handle($0) }, .done(value))
    }

    /// GATT/CL/GAC/BV-01-C: after exchanging the MTU, reads come back in bigger pieces.
    func testGATT_CL_GAC_BV_01_C_mtuExchangeWidensTheBearer() throws {
        let link = try Loopback()
        let (id, outputs) = link.client.submit(.exchangeMTURequest(mtu: 247), at: .zero)
        guard case .send(let bytes)? = outputs.first, case .send(let answer)? = link.server.receive(bytes).first else { return XCTFail() }
        XCTAssertEqual(link.client.receive(answer, at: .zero), [.response(id: id, .exchangeMTUResponse(mtu: 517))])
        XCTAssertEqual(link.client.mtu, 247)
        XCTAssertEqual(link.server.mtu, 247)
    }
}

final class GATTClientMoreProcedureTests: XCTestCase {
    /// GATT/CL/GAD/BV-03-C: Find Included Services, reading the 128-bit UUID the declaration leaves out.
    func testGATT_CL_GAD_BV_03_C_findIncludedServices() throws {
        let link = try Loopback()
        let includer = try XCTUnwrap(link.database.attributes.last { $0.type == GATTType.primaryService })
        var procedure = FindIncludedServices(in: includer.handle...includer.groupEnd)
        guard case .done(let found) = link.run(procedure.start(), { procedure.handle($0) }) else { return XCTFail() }
        XCTAssertEqual(found.map(\.uuid.description), ["6E400001-B5A3-F393-E0A9-E50E24DCCA9E", "1810"])
        XCTAssertEqual(found.last?.start, 4)
        XCTAssertTrue(link.serverSaw.contains { $0.first == 0x0A }, "the 128-bit UUID came from a Read of the included declaration")
    }

    /// GATT/CL/GAD/BV-05-C: Discover Characteristics by UUID.
    func testGATT_CL_GAD_BV_05_C_discoverCharacteristicsByUUID() throws {
        let link = try Loopback()
        var procedure = DiscoverCharacteristics(in: 1...0xFFFF, uuid: BluetoothUUID(0x2A37))
        guard case .done(let found) = link.run(procedure.start(), { procedure.handle($0) }) else { return XCTFail() }
        XCTAssertEqual(found.count, 6)
        XCTAssertTrue(found.allSatisfy { $0.uuid == BluetoothUUID(0x2A37) })
    }

    /// GATT/CL/GAR/BV-03-C: Read Using Characteristic UUID, across several responses.
    func testGATT_CL_GAR_BV_03_C_readUsingCharacteristicUUID() throws {
        let link = try Loopback()
        var procedure = ReadByCharacteristicUUID(uuid: BluetoothUUID(0x2A37))
        guard case .done(let values) = link.run(procedure.start(), { procedure.handle($0) }) else { return XCTFail() }
        XCTAssertEqual(values.map(\.value), (0..<6).map { [UInt8($0)] })
        XCTAssertEqual(Set(values.map(\.handle)).count, 6)
        var none = ReadByCharacteristicUUID(uuid: BluetoothUUID(0x2A99))
        XCTAssertEqual(link.run(none.start(), { none.handle($0) }), .done([]))
    }

    /// GATT/CL/GAR/BV-05-C: Read Multiple; a bad handle fails the whole read with the server's error.
    func testGATT_CL_GAR_BV_05_C_readMultiple() throws {
        let link = try Loopback()
        var values = ReadByCharacteristicUUID(uuid: BluetoothUUID(0x2A37))
        guard case .done(let found) = link.run(values.start(), { values.handle($0) }) else { return XCTFail() }
        let procedure = ReadMultipleValues(handles: [found[4].handle, found[1].handle])
        XCTAssertEqual(link.run(procedure.start(), { procedure.handle($0) }), .done([4, 1]))
        let bad = ReadMultipleValues(handles: [found[0].handle, 0xFFF0])
        XCTAssertEqual(link.run(bad.start(), { bad.handle($0) }), .failed(.invalidHandle))
        XCTAssertEqual(ReadMultipleValues(handles: [1]).start(), .failed(.invalidPDU), "Read Multiple needs two handles")
    }

    /// GATT/CL/GAW/BV-06-C: a reliable write of two values lands whole.
    func testGATT_CL_GAW_BV_06_C_reliableWriteOfTwoValues() throws {
        let link = try Loopback()
        let handle = try XCTUnwrap(link.database.attributes.first { $0.type == BluetoothUUID("6E400002-B5A3-F393-E0A9-E50E24DCCA9E") }).handle
        let descriptor = handle + 1
        XCTAssertEqual(link.database.attribute(at: descriptor)?.type, BluetoothUUID(0x2901))
        var write = WriteLongValue(writes: [(handle, [1, 2, 3]), (handle, [9])], mtu: link.client.mtu)
        XCTAssertEqual(link.run(write.start()) { write.handle($0) }, .done(true))
        XCTAssertEqual(link.database.attribute(at: handle)?.value, .fixed([9, 2, 3] + [UInt8](repeating: 0, count: 7)), "parts apply in order")
    }
}

/// A remote server's malformed discovery answers (a rogue device, or bytes corrupted on the way) fail the
/// procedure with Invalid PDU rather than yielding impossible handle ranges, which attd would then build on.
final class GATTClientMalformedResponseTests: XCTestCase {
    func testAServiceEndingBeforeItStartsIsRefused() {
        var all = DiscoverPrimaryServices()
        _ = all.start()
        XCTAssertEqual(all.handle(.readByGroupTypeResponse([(handle: 0x20, groupEnd: 0x10, value: [0x0D, 0x18])])), .failed(.invalidPDU))
        var byUUID = DiscoverPrimaryServices(uuid: BluetoothUUID(0x180D))
        _ = byUUID.start()
        XCTAssertEqual(byUUID.handle(.findByTypeValueResponse([(found: 0x20, groupEnd: 0x1F)])), .failed(.invalidPDU))
    }

    func testServicesOutOfOrderOrAtHandleZeroAreRefused() {
        var zero = DiscoverPrimaryServices()
        _ = zero.start()
        XCTAssertEqual(zero.handle(.readByGroupTypeResponse([(handle: 0, groupEnd: 5, value: [0x00, 0x18])])), .failed(.invalidPDU))
        var backwards = DiscoverPrimaryServices()
        _ = backwards.start()
        XCTAssertEqual(backwards.handle(.readByGroupTypeResponse([(handle: 0x10, groupEnd: 0x12, value: [0x0D, 0x18]),
                                                                 (handle: 0x08, groupEnd: 0x09, value: [0x0F, 0x18])])), .failed(.invalidPDU))
        // Well-formed, the same shape is taken and paging goes on past the last group.
        var good = DiscoverPrimaryServices()
        _ = good.start()
        XCTAssertEqual(good.handle(.readByGroupTypeResponse([(handle: 0x08, groupEnd: 0x09, value: [0x0F, 0x18]),
                                                            (handle: 0x10, groupEnd: 0x12, value: [0x0D, 0x18])])),
                       .request(.readByGroupTypeRequest(start: 0x13, end: 0xFFFF, type: GATTType.primaryService)))
    }

    func testACharacteristicOutsideItsServiceOrValueBeforeItsDeclarationIsRefused() {
        // A characteristic declaration (read, Heart Rate Measurement) at `handle` whose value is at `value`.
        func declaration(_ handle: UInt16, value: UInt16) -> (handle: UInt16, value: [UInt8]) {
            (handle, [0x02, UInt8(value & 0xFF), UInt8(value >> 8), 0x37, 0x2A])
        }
        var outside = DiscoverCharacteristics(in: 0x10...0x20)
        _ = outside.start()
        XCTAssertEqual(outside.handle(.readByTypeResponse([declaration(0x30, value: 0x31)])), .failed(.invalidPDU))
        var valueFirst = DiscoverCharacteristics(in: 0x10...0x20)
        _ = valueFirst.start()
        XCTAssertEqual(valueFirst.handle(.readByTypeResponse([declaration(0x12, value: 0x12)])), .failed(.invalidPDU))
        var valueOutside = DiscoverCharacteristics(in: 0x10...0x20)
        _ = valueOutside.start()
        XCTAssertEqual(valueOutside.handle(.readByTypeResponse([declaration(0x12, value: 0x21)])), .failed(.invalidPDU))
        var good = DiscoverCharacteristics(in: 0x10...0x20)
        _ = good.start()
        XCTAssertEqual(good.handle(.readByTypeResponse([declaration(0x11, value: 0x12), declaration(0x14, value: 0x15)])),
                       .request(.readByTypeRequest(start: 0x15, end: 0x20, type: GATTType.characteristic)))
    }

    /// An app's descriptor discovery runs to its service's end; what follows the next declaration is another
    /// characteristic's, including a declaration of another service.
    func testOneCharacteristicsDescriptorsEndAtTheNextDeclaration() {
        let found = [DiscoveredDescriptor(handle: 0x13, uuid: BluetoothUUID(0x2902)), DiscoveredDescriptor(handle: 0x14, uuid: BluetoothUUID(0x2901)),
                     DiscoveredDescriptor(handle: 0x15, uuid: GATTType.characteristic), DiscoveredDescriptor(handle: 0x17, uuid: BluetoothUUID(0x2902))]
        XCTAssertEqual(DiscoverDescriptors.ofOneCharacteristic(found).map(\.handle), [0x13, 0x14])
        XCTAssertEqual(DiscoverDescriptors.ofOneCharacteristic([DiscoveredDescriptor(handle: 0x20, uuid: GATTType.primaryService)]), [])
        XCTAssertEqual(DiscoverDescriptors.ofOneCharacteristic(Array(found.prefix(2))).count, 2, "no declaration: all of them")
    }

    func testDescriptorsAndIncludesOutsideTheirRangeAreRefused() {
        var descriptors = DiscoverDescriptors(in: 0x13...0x15)
        _ = descriptors.start()
        XCTAssertEqual(descriptors.handle(.findInformationResponse([(handle: 0x13, type: BluetoothUUID(0x2902)), (handle: 0x40, type: BluetoothUUID(0x2901))])),
                       .failed(.invalidPDU))
        var includes = FindIncludedServices(in: 0x10...0x20)
        _ = includes.start()
        XCTAssertEqual(includes.handle(.readByTypeResponse([(handle: 0x11, value: [0x30, 0x00, 0x2F, 0x00, 0x0F, 0x18])])), .failed(.invalidPDU),
                       "an included service ending before it starts")
    }
}
