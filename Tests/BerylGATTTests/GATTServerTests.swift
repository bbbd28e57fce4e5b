import BerylATT
import BerylCore
import BerylCrypto
import BerylGATT
import XCTest

/// A server with GAP, a heart-rate-like service including Battery, and a 128-bit custom service.
private func makeServer(mtu: UInt16? = nil) throws -> (ATTServer, AttributeDatabase) {
    let database = AttributeDatabase()
    try database.add(ServiceDefinition(uuid: BluetoothUUID(0x1800), characteristics: [
        CharacteristicDefinition(uuid: BluetoothUUID(0x2A00), properties: .read, permissions: .readable, value: Array("Beryl".utf8)),
    ]))                                                                                    // 1-3
    let battery = try database.add(ServiceDefinition(uuid: BluetoothUUID(0x180F), isPrimary: false, characteristics: [
        CharacteristicDefinition(uuid: BluetoothUUID(0x2A19), properties: [.read, .notify], permissions: .readable, value: [87]),
    ]))                                                                                    // 4-7
    try database.add(ServiceDefinition(uuid: BluetoothUUID(0x180D), includes: [battery], characteristics: [
        CharacteristicDefinition(uuid: BluetoothUUID(0x2A37), properties: [.notify, .indicate], permissions: [], value: [0, 60]),
        CharacteristicDefinition(uuid: BluetoothUUID(0x2A38), properties: .read, permissions: .readable, value: [2],
                                 descriptors: [DescriptorDefinition(uuid: BluetoothUUID(0x2901), value: Array("Location".utf8))]),
    ]))                                                                                    // 8-15
    let custom = try XCTUnwrap(BluetoothUUID("6E400001-B5A3-F393-E0A9-E50E24DCCA9E"))
    let long = (0..<100).map { UInt8($0) }
    try database.add(ServiceDefinition(uuid: custom, characteristics: [
        CharacteristicDefinition(uuid: try XCTUnwrap(BluetoothUUID("6E400002-B5A3-F393-E0A9-E50E24DCCA9E")),
                                 properties: [.read, .write, .writeWithoutResponse], permissions: [.readable, .writeable], value: long),
        CharacteristicDefinition(uuid: try XCTUnwrap(BluetoothUUID("6E400003-B5A3-F393-E0A9-E50E24DCCA9E")),
                                 properties: [.read, .write], permissions: [.readEncryptionRequired, .writeEncryptionRequired], value: [0x42]),
        CharacteristicDefinition(uuid: try XCTUnwrap(BluetoothUUID("6E400004-B5A3-F393-E0A9-E50E24DCCA9E")),
                                 properties: [.read, .write], permissions: [.readable, .writeable]),
    ]))                                                                                    // 16-22
    let server = ATTServer(database: database)
    if let mtu { _ = server.receive([0x02, UInt8(mtu & 0xFF), UInt8(mtu >> 8)]) }
    return (server, database)
}

private func sent(_ outputs: [ATTServerOutput]) -> [UInt8]? {
    for output in outputs { if case .send(let bytes) = output { return bytes } }
    return nil
}

private func le(_ value: UInt16) -> [UInt8] { [UInt8(value & 0xFF), UInt8(value >> 8)] }

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

final class GATTServerReadWriteTests: XCTestCase {
    /// GATT/SR/GAC/BV-01-C: Exchange MTU; the effective MTU is the smaller of the two.
    func testGATT_SR_GAC_BV_01_C_exchangeMTU() throws {
        let (server, _) = try makeServer()
        XCTAssertEqual(sent(server.receive([0x02] + le(200))), [0x03] + le(517))
        XCTAssertEqual(server.mtu, 200)
        XCTAssertEqual(sent(server.receive([0x02] + le(10))), [0x03] + le(517))
        XCTAssertEqual(server.mtu, 23, "never below the LE default")
    }

    /// GATT/SR/GAR/BV-01-C, BI-01-C, BI-02-C: read a value; an invalid handle; a value that is not readable.
    func testGATT_SR_GAR_BV_01_C_readAndItsErrors() throws {
        let (server, _) = try makeServer()
        XCTAssertEqual(sent(server.receive([0x0A] + le(3))), [0x0B] + Array("Beryl".utf8))
        XCTAssertEqual(sent(server.receive([0x0A] + le(0x0099))), [0x01, 0x0A] + le(0x0099) + [0x01])
        XCTAssertEqual(sent(server.receive([0x0A] + le(11))), [0x01, 0x0A] + le(11) + [0x02], "notify-only value: Read Not Permitted")
    }

    /// GATT/SR/GAR/BI-04-C and BI-12-C: an encryption-required value over an unencrypted link.
    func testGATT_SR_GAR_BI_04_C_insufficientAuthenticationThenEncryption() throws {
        let (server, _) = try makeServer()
        XCTAssertEqual(sent(server.receive([0x0A] + le(20))), [0x01, 0x0A] + le(20) + [0x05], "no keys: pair first")
        server.security = LinkSecurity(encrypted: false, bonded: true)
        XCTAssertEqual(sent(server.receive([0x0A] + le(20))), [0x01, 0x0A] + le(20) + [0x0F], "keys exist: encrypt")
        server.security = LinkSecurity(encrypted: true, bonded: true)
        XCTAssertEqual(sent(server.receive([0x0A] + le(20))), [0x0B, 0x42])
        XCTAssertEqual(sent(server.receive([0x12] + le(20) + [1])), [0x13])
    }

    /// GATT/SR/GAR/BV-04-C and BI-13-C: Read Long Characteristic Value with Read Blob; an offset past the end.
    func testGATT_SR_GAR_BV_04_C_readLong() throws {
        let (server, _) = try makeServer()
        var value: [UInt8] = Array(try XCTUnwrap(sent(server.receive([0x0A] + le(18)))).dropFirst())
        XCTAssertEqual(value.count, 22, "ATT_MTU - 1")
        while true {
            let part = Array(try XCTUnwrap(sent(server.receive([0x0C] + le(18) + le(UInt16(value.count))))).dropFirst())
            value += part
            if part.count < 22 { break }
        }
        XCTAssertEqual(value, (0..<100).map { UInt8($0) })
        XCTAssertEqual(sent(server.receive([0x0C] + le(18) + le(101))), [0x01, 0x0C] + le(18) + [0x07])
    }

    /// GATT/SR/GAR/BV-05-C: Read Multiple Characteristic Values.
    func testGATT_SR_GAR_BV_05_C_readMultiple() throws {
        let (server, _) = try makeServer()
        XCTAssertEqual(sent(server.receive([0x0E] + le(6) + le(14))), [0x0F, 87, 2])
        XCTAssertEqual(sent(server.receive([0x0E] + le(6) + le(11))), [0x01, 0x0E] + le(11) + [0x02])
    }

    /// GATT/SR/GAW/BV-03-C, BI-02-C, BI-03-C: write; invalid handle; not writable. GATT/SR/GAW/BV-01-C: write without response.
    func testGATT_SR_GAW_BV_03_C_writeAndItsErrors() throws {
        let (server, database) = try makeServer()
        XCTAssertEqual(sent(server.receive([0x12] + le(18) + [9, 8, 7])), [0x13])
        XCTAssertEqual(database.attribute(at: 18)?.value, .fixed([9, 8, 7]))
        XCTAssertEqual(sent(server.receive([0x12] + le(0x0099) + [1])), [0x01, 0x12] + le(0x0099) + [0x01])
        XCTAssertEqual(sent(server.receive([0x12] + le(3) + [1])), [0x01, 0x12] + le(3) + [0x03])
        XCTAssertNil(sent(server.receive([0x52] + le(3) + [1])), "a command's error is not reported")
        XCTAssertNil(sent(server.receive([0x52] + le(18) + [5])))
        XCTAssertEqual(database.attribute(at: 18)?.value, .fixed([5]))
        _ = server.receive([0x02] + le(517))
        XCTAssertEqual(sent(server.receive([0x12] + le(18) + [UInt8](repeating: 1, count: 513))), [0x01, 0x12] + le(18) + [0x0D],
                       "values are at most 512 bytes even when the MTU would carry more")
    }

    /// GATT/SR/GAW/BV-05-C and BV-10-C: long and reliable writes (prepare + execute), all or nothing.
    func testGATT_SR_GAW_BV_05_C_longAndReliableWrites() throws {
        let (server, database) = try makeServer()
        let value = (0..<300).map { UInt8(truncatingIfNeeded: $0 * 7) }
        var offset = 0
        while offset < value.count {
            let part = Array(value[offset..<min(offset + 18, value.count)])
            XCTAssertEqual(sent(server.receive([0x16] + le(18) + le(UInt16(offset)) + part)), [0x17] + le(18) + le(UInt16(offset)) + part)
            offset += part.count
        }
        XCTAssertEqual(database.attribute(at: 18)?.value, .fixed((0..<100).map { UInt8($0) }), "nothing applied before execute")
        XCTAssertEqual(sent(server.receive([0x18, 0x01])), [0x19])
        XCTAssertEqual(database.attribute(at: 18)?.value, .fixed(value))

        // A batch with one bad part applies nothing.
        XCTAssertEqual(sent(server.receive([0x16] + le(18) + le(0) + [1, 1])), [0x17] + le(18) + le(0) + [1, 1])
        XCTAssertEqual(sent(server.receive([0x16] + le(2) + le(900) + [1])), [0x01, 0x16] + le(2) + [0x03], "not writable: refused at prepare")
        XCTAssertEqual(sent(server.receive([0x16] + le(18) + le(900) + [1])), [0x17] + le(18) + le(900) + [1])
        XCTAssertEqual(sent(server.receive([0x18, 0x01])), [0x01, 0x18] + le(18) + [0x07])
        XCTAssertEqual(database.attribute(at: 18)?.value, .fixed(value), "the valid part was not applied either")

        // Cancel empties the queue; a full queue is refused.
        for _ in 0..<ATTServer.prepareQueueLimit { _ = server.receive([0x16] + le(18) + le(0) + [0]) }
        XCTAssertEqual(sent(server.receive([0x16] + le(18) + le(0) + [0])), [0x01, 0x16] + le(18) + [0x09])
        XCTAssertEqual(sent(server.receive([0x18, 0x00])), [0x19])
        XCTAssertEqual(database.attribute(at: 18)?.value, .fixed(value))
    }

    /// Dynamic values go to their owner, answered exactly once; the client waits meanwhile.
    func testDynamicValuesAreAnsweredByTheirOwnerOnce() throws {
        let (server, _) = try makeServer()
        guard case .readRequested(let id, 22, 0)? = server.receive([0x0A] + le(22)).first else { return XCTFail("no read request") }
        XCTAssertEqual(server.receive([0x0A] + le(3)), [.log("readRequest while a request is still being answered: the client broke ATT's one-at-a-time rule; dropped")])
        XCTAssertEqual(sent(server.completeRead(id: id, with: .success(Array(0..<40)))), [0x0B] + Array(0..<22))
        XCTAssertEqual(server.completeRead(id: id, with: .success([1])).count, 1, "a second answer is ignored")
        XCTAssertNil(sent(server.completeRead(id: id, with: .success([1]))))
        guard case .writeRequested(let writeID, let writes, true)? = server.receive([0x12] + le(22) + [7]).first else { return XCTFail() }
        XCTAssertEqual(writes, [PreparedWrite(handle: 22, offset: 0, value: [7])])
        XCTAssertEqual(sent(server.completeWrite(id: writeID, error: .valueNotAllowed)), [0x01, 0x12] + le(22) + [0x13])
    }

    /// Found by the fuzzer: a request over ATT_MTU would have been echoed (Prepare Write Response) over ATT_MTU too.
    func testPDUsOverTheMTUAreRefused() throws {
        let (server, _) = try makeServer()
        let oversized: [UInt8] = [0x16] + le(18) + le(0) + [UInt8](repeating: 7, count: 30)
        XCTAssertEqual(sent(server.receive(oversized)), [0x01, 0x16] + le(0) + [0x04])
        XCTAssertNil(sent(server.receive([0x52] + le(18) + [UInt8](repeating: 7, count: 30))), "an oversized command is dropped")
        _ = server.receive([0x02] + le(100))
        XCTAssertEqual(sent(server.receive(oversized)), [0x17] + le(18) + le(0) + [UInt8](repeating: 7, count: 30), "fine once the MTU allows it")
    }

    /// Requests the server does not know get Request Not Supported; unknown commands are ignored; bad PDUs get Invalid PDU.
    func testUnknownAndMalformedPDUs() throws {
        let (server, _) = try makeServer()
        XCTAssertEqual(sent(server.receive([0x3F, 1, 2])), [0x01, 0x3F] + le(0) + [0x06])
        XCTAssertNil(sent(server.receive([0x7F, 1, 2])))
        XCTAssertEqual(sent(server.receive([0x0A, 1])), [0x01, 0x0A] + le(0) + [0x04])
        XCTAssertEqual(sent(server.receive([0x08] + le(1) + le(2) + [1, 2, 3])), [0x01, 0x08] + le(0) + [0x04], "a 3-byte UUID")
        XCTAssertEqual(server.receive([]), [.log("empty ATT PDU dropped")])
    }
}

final class GATTServerNotificationTests: XCTestCase {
    /// GATT/SR/GAN/BV-01-C and GATT/SR/GAI/BV-01-C: notifications and indications to a subscribed client.
    func testGATT_SR_GAN_BV_01_C_notificationsAndIndications() throws {
        let (server, _) = try makeServer()
        XCTAssertNil(server.notification(valueHandle: 11, value: [1]), "not subscribed")
        XCTAssertEqual(server.receive([0x12] + le(12) + [0x01, 0x00]), [.subscriptionChanged(valueHandle: 11, notify: true, indicate: false), .send([0x13])])
        XCTAssertEqual(server.notification(valueHandle: 11, value: [0, 72]), [0x1B] + le(11) + [0, 72])
        XCTAssertEqual(server.notification(valueHandle: 11, value: [UInt8](repeating: 1, count: 100))?.count, 23, "clipped to ATT_MTU - 3")
        XCTAssertEqual(sent(server.receive([0x0A] + le(12))), [0x0B, 0x01, 0x00], "the CCCD reads back")

        XCTAssertFalse(server.indicate(valueHandle: 11, value: [1]).subscribed)
        _ = server.receive([0x12] + le(12) + [0x02, 0x00])
        let first = server.indicate(valueHandle: 11, value: [1])
        XCTAssertEqual(first.outputs, [.send([0x1D] + le(11) + [1])])
        let second = server.indicate(valueHandle: 11, value: [2])
        XCTAssertEqual(second.outputs, [], "one indication outstanding at a time")
        XCTAssertEqual(server.receive([0x1E]), [.indicationConfirmed(handle: 11), .send([0x1D] + le(11) + [2])])
        XCTAssertEqual(server.receive([0x1E]), [.indicationConfirmed(handle: 11)])
        XCTAssertEqual(sent(server.receive([0x12] + le(12) + [1])), [0x01, 0x12] + le(12) + [0x0D], "a CCCD is two bytes")
    }

    /// Core Vol 3 Part F §3.3.3: an indication is a transaction; unconfirmed for 30 s it times out, once, and the bearer
    /// carries nothing more — queued indications, notifications and responses included.
    func testAnIndicationUnconfirmedFor30SecondsEndsTheBearersUse() throws {
        let (server, _) = try makeServer()
        _ = server.receive([0x12] + le(12) + [0x03, 0x00])
        XCTAssertEqual(server.indicate(valueHandle: 11, value: [1]).outputs, [.send([0x1D] + le(11) + [1])])
        XCTAssertEqual(server.tick(at: .seconds(100)), [], "first seen")
        XCTAssertEqual(server.receive([0x1E]), [.indicationConfirmed(handle: 11)])
        XCTAssertEqual(server.tick(at: .seconds(140)), [], "nothing outstanding")

        _ = server.indicate(valueHandle: 11, value: [2])
        XCTAssertTrue(server.indicate(valueHandle: 11, value: [3]).subscribed, "queued behind the outstanding one")
        XCTAssertEqual(server.tick(at: .seconds(200)), [])
        XCTAssertEqual(server.tick(at: .milliseconds(229_900)), [], "29.9 s")
        XCTAssertEqual(server.tick(at: .seconds(230)), [.indicationTimedOut(handle: 11)])
        XCTAssertEqual(server.tick(at: .seconds(300)), [], "said once")
        XCTAssertFalse(server.isUsable)
        XCTAssertEqual(server.receive([0x1E]), [.log("ATT PDU after a transaction timeout dropped")], "the queued indication is not sent")
        XCTAssertEqual(server.receive([0x0A] + le(12)), [.log("ATT PDU after a transaction timeout dropped")], "no response either")
        XCTAssertNil(server.notification(valueHandle: 11, value: [4]))
        XCTAssertEqual(server.indicate(valueHandle: 11, value: [5]).outputs, [])
    }

    func testSubscriptionsCarryOverForABondedPeer() throws {
        let (_, database) = try makeServer()
        let restored = ATTServer(database: database, clientConfigurations: [12: 0x0001])
        XCTAssertEqual(restored.notification(valueHandle: 11, value: [9]), [0x1B] + le(11) + [9])
        let later = ATTServer(database: database)
        let turnedOn = later.restore(clientConfigurations: [12: 0x0002, 11: 0x0001, 400: 1], clientFeatures: [0x01])
        XCTAssertEqual(turnedOn.map(\.valueHandle), [11], "the value its CCCD belongs to, for the owner to hear")
        XCTAssertTrue(later.restore(clientConfigurations: [12: 0x0002], clientFeatures: []).isEmpty, "unchanged: nothing to say again")
        XCTAssertEqual(later.clientConfigurations, [12: 0x0002], "only handles that are still CCCDs come back")
        XCTAssertTrue(later.indicate(valueHandle: 11, value: [1]).subscribed)
        XCTAssertEqual(later.clientFeatures, [0x01])
    }

    /// What a restarted managerd hears of the subscriptions to an adopted app's service.
    func testThePeersSubscriptionsInAServiceAreListedByValue() throws {
        let (_, database) = try makeServer()
        let server = ATTServer(database: database, clientConfigurations: [12: 0x0002])
        XCTAssertEqual(server.subscriptions(in: 1...20).map(\.valueHandle), [11])
        XCTAssertEqual(server.subscriptions(in: 1...20).map(\.value), [0x0002])
        XCTAssertTrue(server.subscriptions(in: 13...20).isEmpty, "another service's range")
        _ = server.restore(clientConfigurations: [12: 0x0000], clientFeatures: [])
        XCTAssertTrue(server.subscriptions(in: 1...20).isEmpty, "an unsubscribed CCCD is no subscription")
    }

    /// Read Multiple over dynamic values: each owner is asked in turn, and one refusal refuses the whole read.
    func testReadMultipleFetchesDynamicValuesFromTheirOwners() throws {
        let (server, _) = try makeServer()
        guard case .readRequested(let id, 22, 0)? = server.receive([0x0E] + le(6) + le(22) + le(14)).first else { return XCTFail("owner not asked") }
        XCTAssertEqual(sent(server.completeRead(id: id, with: .success([0xAA, 0xBB]))), [0x0F, 87, 0xAA, 0xBB, 2])
        guard case .readRequested(let second, 22, 0)? = server.receive([0x0E] + le(22) + le(6)).first else { return XCTFail() }
        XCTAssertEqual(sent(server.completeRead(id: second, with: .failure(.insufficientAuthorization))), [0x01, 0x0E] + le(22) + [0x08])
        XCTAssertEqual(sent(server.receive([0x0E] + le(6) + le(14))), [0x0F, 87, 2], "the bearer is free again")
        XCTAssertEqual(sent(server.receive([0x0E] + le(22) + le(300))), [0x01, 0x0E] + le(300) + [0x01], "handles are checked before any owner is asked")
    }
}

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

/// Signed writes (Core Vol 3 Part F §3.4.5.4, Part C §10.4.2) and Core Bluetooth's encryption-required notify and
/// indicate (the Client Characteristic Configuration needs an encrypted link).
final class SignedWriteServerTests: XCTestCase {
    let csrk: [UInt8] = (1...16).map { UInt8($0) }

    private func makeServer() throws -> (ATTServer, AttributeDatabase) {
        let database = AttributeDatabase()
        try database.add(ServiceDefinition(uuid: BluetoothUUID(0xFFF0), characteristics: [
            CharacteristicDefinition(uuid: BluetoothUUID(0xFFF1), properties: .authenticatedSignedWrites, permissions: .writeable, value: [0]),  // 2-3
            CharacteristicDefinition(uuid: BluetoothUUID(0xFFF2), properties: .writeWithoutResponse, permissions: .writeable, value: [0]),       // 4-5
            CharacteristicDefinition(uuid: BluetoothUUID(0xFFF3), properties: [.read, .notifyEncryptionRequired], permissions: .readable, value: [7]),  // 6-8
            CharacteristicDefinition(uuid: BluetoothUUID(0xFFF4), properties: [.read, .write, .extendedProperties], permissions: [.readable, .writeable],
                                     value: [9]),                                                                                            // 9-11
        ]))
        return (ATTServer(database: database), database)
    }

    private func signedWrite(_ handle: UInt16, _ value: [UInt8], counter: UInt32, key: [UInt8]? = nil) throws -> [UInt8] {
        let message = [0xD2] + le(handle) + value
        return message + (try DataSigning.signature(csrk: key ?? csrk, message: message, counter: counter))
    }

    private func value(_ database: AttributeDatabase, _ handle: UInt16) -> [UInt8]? {
        if case .fixed(let bytes)? = database.attribute(at: handle)?.value { return bytes }
        return nil
    }

    func testAVerifiedSignedWriteIsCarriedOutOnceAndForgeriesAndReplaysAreIgnored() throws {
        let (server, database) = try makeServer()
        XCTAssertTrue(server.receive(try signedWrite(3, [1], counter: 0)).isEmpty == false)
        XCTAssertEqual(value(database, 3), [0], "no CSRK from this peer: ignored")

        server.peerSigning = PeerSigning(csrk: csrk, lastCounter: 4, authenticated: false)
        XCTAssertEqual(server.receive(try signedWrite(3, [0x11], counter: 5)).filter { if case .signCounterAccepted = $0 { true } else { false } },
                       [.signCounterAccepted(5)])
        XCTAssertEqual(value(database, 3), [0x11])
        XCTAssertNil(sent(server.receive(try signedWrite(3, [0x22], counter: 5))), "a command is never answered")
        XCTAssertEqual(value(database, 3), [0x11], "SignCounter 5 again: a replay")
        _ = server.receive(try signedWrite(3, [0x33], counter: 6, key: Array(csrk.reversed())))
        XCTAssertEqual(value(database, 3), [0x11], "another key: a forgery")
        var tampered = try signedWrite(3, [0x44], counter: 7)
        tampered[3] = 0x45
        _ = server.receive(tampered)
        XCTAssertEqual(value(database, 3), [0x11], "the value changed after signing")
        _ = server.receive(try signedWrite(5, [0x55], counter: 8))
        XCTAssertEqual(value(database, 5), [0], "a characteristic without the signed-writes property")
        _ = server.receive(try signedWrite(3, [0x66], counter: 9))
        XCTAssertEqual(value(database, 3), [0x66])
        XCTAssertEqual(server.peerSigning?.lastCounter, 9)
    }

    func testEncryptionRequiredNotificationsAndExtendedProperties() throws {
        let (server, database) = try makeServer()
        // The declaration says notify; Core Bluetooth's bit stays off the air.
        XCTAssertEqual(value(database, 6), [0x12, 7, 0, 0xF3, 0xFF])
        XCTAssertEqual(database.attribute(at: 8)?.type, GATTType.clientConfiguration)
        XCTAssertEqual(sent(server.receive([0x12] + le(8) + [1, 0])), [0x01, 0x12] + le(8) + [0x05], "not encrypted, no bond: Insufficient Authentication")
        server.security = LinkSecurity(encrypted: true, authenticated: false, bonded: true)
        XCTAssertEqual(sent(server.receive([0x12] + le(8) + [1, 0])), [0x13])
        // The extended properties bit brings its descriptor, offering Reliable Write for a writable value.
        XCTAssertEqual(database.attribute(at: 11)?.type, GATTType.extendedProperties)
        XCTAssertEqual(value(database, 11), [0x01, 0x00])
    }
}
