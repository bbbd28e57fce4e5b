import BerylATT
import BerylCore
import BerylCrypto
import BerylGATT
import XCTest

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
