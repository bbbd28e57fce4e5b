import BerylATT
import BerylCore
import XCTest

final class ATTClientBearerTests: XCTestCase {
    func testOneRequestAtATimeAndTheThirtySecondTimeout() {
        let client = ATTClient()
        let first = client.submit(.readRequest(handle: 1), at: .zero)
        XCTAssertEqual(first.outputs, [.send([0x0A, 1, 0])])
        let second = client.submit(.readRequest(handle: 2), at: .zero)
        XCTAssertEqual(second.outputs, [], "queued behind the first")
        XCTAssertEqual(client.submit(.writeCommand(handle: 3, value: [1]), at: .zero).outputs, [.send([0x52, 3, 0, 1])], "commands do not wait")
        XCTAssertEqual(client.receive([0x0B, 9], at: .seconds(1)), [.response(id: first.id, .readResponse([9])), .send([0x0A, 2, 0])])
        XCTAssertEqual(client.tick(at: .seconds(30)), [], "30 s after the second was sent, not after the first")
        XCTAssertEqual(client.tick(at: .seconds(31)), [.timedOut(id: second.id)])
        XCTAssertFalse(client.isUsable, "Core Vol 3 Part F §3.3.3: no more PDUs on this bearer")
        let late = client.submit(.readRequest(handle: 4), at: .seconds(32))
        XCTAssertEqual(late.outputs, [.timedOut(id: late.id)])
    }

    /// The outstanding request's response, garbled past decoding (its opcode, or an Error Response): the request fails
    /// now with Invalid PDU and the next one goes, instead of the bearer ending at the 30 s timeout. A well-formed PDU
    /// of another opcode (perhaps a notification garbled into a response) is dropped, and the real answer still counts.
    func testAGarbledResponseFailsItsRequestAndTheBearerGoesOn() {
        let client = ATTClient()
        let byType = client.submit(.readByTypeRequest(start: 1, end: 0xFFFF, type: BluetoothUUID(0x2803)), at: .zero)
        let read = client.submit(.readRequest(handle: 3), at: .zero)
        let write = client.submit(.writeRequest(handle: 2, value: [1]), at: .zero)
        XCTAssertEqual(client.receive([0x09, 0x07, 0x01], at: .seconds(1)),
                       [.log("a malformed readByTypeResponse cannot answer readByTypeRequest; failing it"),
                        .response(id: byType.id, .errorResponse(request: 0x08, handle: 0, error: .invalidPDU)), .send([0x0A, 3, 0])],
                       "a Read By Type Response too short to decode")
        XCTAssertEqual(client.receive([0x13], at: .seconds(1)), [.log("writeResponse answers no outstanding request; dropped")],
                       "a Write Response cannot be the read's answer: dropped, and the read still waits")
        XCTAssertEqual(client.receive([0x0B, 7], at: .seconds(2)), [.response(id: read.id, .readResponse([7])), .send([0x12, 2, 0, 1])])
        XCTAssertEqual(client.receive([0x01, 0x12], at: .seconds(2)),
                       [.log("a malformed errorResponse cannot answer writeRequest; failing it"),
                        .response(id: write.id, .errorResponse(request: 0x12, handle: 0, error: .invalidPDU))])
        XCTAssertTrue(client.isUsable)
    }

    func testIndicationsAreConfirmedAndNotificationsPassedOn() {
        let client = ATTClient()
        XCTAssertEqual(client.receive([0x1D, 5, 0, 7], at: .zero), [.indication(handle: 5, value: [7]), .send([0x1E])])
        XCTAssertEqual(client.receive([0x1B, 5, 0, 8], at: .zero), [.notification(handle: 5, value: [8])])
        XCTAssertEqual(client.receive([0xFF], at: .zero), [.log("malformed PDU from the server dropped")])
    }
}
