import BerylATT
import BerylCore
import XCTest

/// The PDU codec against the formats of Core Vol 3 Part F §3.4, and the malformed PDUs a remote device may send.
final class ATTPDUTests: XCTestCase {
    private func decoded(_ bytes: [UInt8], file: StaticString = #filePath, line: UInt = #line) -> ATTPDU? {
        switch ATTPDU.decode(bytes) {
        case .success(let pdu): return pdu
        case .failure(let error):
            XCTFail("\(bytes) did not decode: \(error)", file: file, line: line)
            return nil
        }
    }

    func testEachPDUDecodesToWhatEncodesToTheSameBytes() {
        let pdus: [ATTPDU] = [
            .errorResponse(request: 0x0A, handle: 0x0102, error: .readNotPermitted),
            .exchangeMTURequest(mtu: 517), .exchangeMTUResponse(mtu: 247),
            .findInformationRequest(start: 1, end: 0xFFFF),
            .findInformationResponse([(handle: 3, type: BluetoothUUID(0x2902)), (handle: 4, type: BluetoothUUID(0x2901))]),
            .findByTypeValueRequest(start: 1, end: 0xFFFF, type: 0x2800, value: [0x0D, 0x18]),
            .findByTypeValueResponse([(found: 1, groupEnd: 5)]),
            .readByTypeRequest(start: 1, end: 9, type: BluetoothUUID(0x2803)),
            .readByTypeResponse([(handle: 2, value: [0x10, 3, 0, 0x37, 0x2A]), (handle: 5, value: [0x02, 6, 0, 0x38, 0x2A])]),
            .readRequest(handle: 3), .readResponse([1, 2, 3]),
            .readBlobRequest(handle: 3, offset: 22), .readBlobResponse([4]),
            .readMultipleRequest([3, 6]), .readMultipleResponse([1, 2]),
            .readByGroupTypeRequest(start: 1, end: 0xFFFF, type: BluetoothUUID(0x2800)),
            .readByGroupTypeResponse([(handle: 1, groupEnd: 5, value: [0x0D, 0x18])]),
            .writeRequest(handle: 7, value: [1]), .writeResponse,
            .prepareWriteRequest(handle: 7, offset: 0, value: [1, 2]), .prepareWriteResponse(handle: 7, offset: 0, value: [1, 2]),
            .executeWriteRequest(commit: true), .executeWriteRequest(commit: false), .executeWriteResponse,
            .handleValueNotification(handle: 3, value: [72]), .handleValueIndication(handle: 9, value: [1, 0]), .handleValueConfirmation,
            .writeCommand(handle: 7, value: []),
            .signedWriteCommand(handle: 7, value: [1], signature: [UInt8](repeating: 0xAB, count: 12)),
        ]
        for pdu in pdus {
            XCTAssertEqual(decoded(pdu.encoded), pdu, "\(pdu)")
            XCTAssertEqual(decoded(pdu.encoded)?.opcode, pdu.opcode)
        }
    }

    func testFieldsAreLittleEndianAfterTheOpcode() {
        // Core Vol 3 Part F §3.4.2.1: Exchange MTU Request is 0x02 then Client Rx MTU, least significant octet first.
        XCTAssertEqual(ATTPDU.exchangeMTURequest(mtu: 0x0205).encoded, [0x02, 0x05, 0x02])
        // §3.4.1.1: Error Response is 0x01, the request's opcode, the handle, the error code.
        XCTAssertEqual(ATTPDU.errorResponse(request: 0x12, handle: 0x0A0B, error: .insufficientEncryption).encoded, [0x01, 0x12, 0x0B, 0x0A, 0x0F])
        // §3.4.7.1: a notification carries the handle, then the value to the end of the PDU.
        XCTAssertEqual(ATTPDU.handleValueNotification(handle: 0x0003, value: [0x06, 0x48]).encoded, [0x1B, 0x03, 0x00, 0x06, 0x48])
    }

    func testMalformedPDUsAreTypedErrorsNamingTheirOpcode() {
        XCTAssertEqual(ATTPDU.decode([]), .failure(.empty))
        XCTAssertEqual(ATTPDU.decode([0x7F]), .failure(.unknownOpcode(0x7F)))
        let malformed: [([UInt8], ATTOpcode, String)] = [
            ([0x0A, 0x03], .readRequest, "a handle of one octet"),
            ([0x0A, 0x03, 0x00, 0x00], .readRequest, "an octet past the handle"),
            ([0x02, 0x17], .exchangeMTURequest, "an MTU of one octet"),
            ([0x08, 1, 0, 0xFF, 0xFF, 0x03, 0x28, 0x00], .readByTypeRequest, "a three-octet attribute type"),
            ([0x10, 1, 0, 0xFF, 0xFF], .readByGroupTypeRequest, "no attribute type"),
            ([0x0E, 0x03, 0x00], .readMultipleRequest, "one handle: Read Multiple names two or more (§3.4.4.7)"),
            ([0x18, 0x02], .executeWriteRequest, "flags other than 0x00 and 0x01 (§3.4.6.3)"),
            ([0xD2, 0x07, 0x00, 1, 2, 3], .signedWriteCommand, "shorter than its 12-octet signature"),
            ([0x05, 0x03, 0x03, 0x00, 0x02, 0x29], .findInformationResponse, "format 3"),
            ([0x09, 0x01, 0x02, 0x00], .readByTypeResponse, "a length below the handle's two octets"),
            ([0x09, 0x07, 0x02, 0x00, 0x10], .readByTypeResponse, "an entry cut short"),
            ([0x11, 0x03, 0x01, 0x00, 0x05, 0x00], .readByGroupTypeResponse, "a length below the two handles' four octets"),
            ([0x01, 0x0A, 0x03], .errorResponse, "no error code"),
        ]
        for (bytes, opcode, why) in malformed {
            XCTAssertEqual(ATTPDU.decode(bytes), .failure(.malformed(opcode)), why)
        }
    }

    func testOnlyServerPDUsBelongToTheClientRole() {
        // One fixed channel carries both roles (Core Vol 3 Part F §3.2.11): the opcode says which side a PDU is for.
        XCTAssertTrue(ATTOpcode.handleValueNotification.isSentByServer)
        XCTAssertTrue(ATTOpcode.errorResponse.isSentByServer)
        XCTAssertFalse(ATTOpcode.handleValueConfirmation.isSentByServer)
        XCTAssertFalse(ATTOpcode.writeCommand.isSentByServer)
        XCTAssertTrue(ATTOpcode.readRequest.isRequest)
        XCTAssertFalse(ATTOpcode.writeCommand.isRequest, "a command is answered by nothing")
    }
}
