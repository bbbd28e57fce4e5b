import BerylATT
import BerylCore
import BerylCrypto
import BerylGATT
import XCTest

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
