import BerylATT
import BerylCore
import BerylGATT
import BerylHCI
import BerylLink
import XCTest

/// What the fault suite and the rogue remote device found, pinned down at the layer where each rule lives.
final class ATTRobustnessTests: XCTestCase {
    /// Core Vol 3 Part F §3.4.1.1: application errors (0x80–0x9F) and common profile errors (0xE0–0xFF) are errors
    /// like any other; a client that dropped them as malformed waited out its 30 s transaction timeout.
    func testErrorResponsesCarryApplicationAndProfileCodes() throws {
        for code: UInt8 in [0x80, 0x9F, 0xFD, 0x01] {
            guard case .success(.errorResponse(let request, let handle, let error)) = ATTPDU.decode([0x01, 0x12, 0x2A, 0x00, code]) else {
                return XCTFail("error 0x\(String(code, radix: 16)) did not decode")
            }
            XCTAssertEqual(request, 0x12)
            XCTAssertEqual(handle, 0x2A)
            XCTAssertEqual(error.rawValue, code)
            XCTAssertEqual(ATTPDU.errorResponse(request: request, handle: handle, error: error).encoded, [0x01, 0x12, 0x2A, 0x00, code])
        }
        XCTAssertEqual(ATTError(rawValue: 0x80).description, "application error")
        XCTAssertEqual(ATTError.invalidHandle.description, "invalidHandle")
    }

    /// A client's second Exchange MTU (which it shall not send, §3.4.2.1) lowering the MTU lowers it for both roles of
    /// the bearer: a later server-only PDU must not put the old, larger value back, or attd answers over the MTU.
    func testASecondExchangeLowersTheMTUForGood() throws {
        let database = AttributeDatabase()
        try database.add(ServiceDefinition(uuid: BluetoothUUID(0x180F), characteristics: [
            CharacteristicDefinition(uuid: BluetoothUUID(0x2A19), properties: [.read, .write], permissions: [.readable, .writeable], value: [UInt8](repeating: 7, count: 40)),
        ]))
        let link = LinkSession(handle: 0x40, isCentral: false, database: database)
        func att(_ payload: [UInt8]) -> [UInt8] { [UInt8(payload.count & 0xFF), UInt8(payload.count >> 8), 0x04, 0x00] + payload }
        _ = link.receive(boundary: .firstFlushable, data: att([0x02, 0x00, 0x01]))  // MTU 256
        XCTAssertEqual(link.server.mtu, 256)
        _ = link.receive(boundary: .firstFlushable, data: att([0x02, 0x17, 0x00]))  // again, 23
        XCTAssertEqual(link.server.mtu, 23)
        XCTAssertEqual(link.client.mtu, 23)
        _ = link.receive(boundary: .firstFlushable, data: att([0x1B, 0x03, 0x00, 0xAA]))  // a notification to our client
        XCTAssertEqual(link.server.mtu, 23, "a server-only PDU does not widen it again")
        let read = link.receive(boundary: .firstFlushable, data: att([0x0A, 0x03, 0x00]))
        let sent = read.compactMap { output -> [UInt8]? in if case .send(let bytes) = output { return bytes } else { return nil } }
        XCTAssertEqual(sent.first.map { $0.count - 4 }, 23, "a Read Response of ATT_MTU bytes, not 41")
    }
}
