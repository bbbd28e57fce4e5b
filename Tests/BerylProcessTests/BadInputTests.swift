import BerylDaemonKit
import BerylIPC
import BerylSupervisor
import BerylTestSupport
import Foundation
import XCTest

/// Bad input on a daemon socket gets a typed Error and the session stays usable.
final class BadInputTests: XCTestCase {
    var scratch: Scratch!
    var client: IPCClient!

    override func setUpWithError() throws {
        scratch = try Scratch()
        try scratch.startDaemon("managerd")
        client = try IPCClient(path: scratch.paths.socket("managerd"))
    }

    override func tearDown() {
        client = nil
        scratch.stopAll()
    }

    private func sendRawExpectingError(_ bytes: [UInt8]) throws -> (UInt64, IPCErrorMessage) {
        try client.sendRaw(bytes)
        let envelope = try client.receive()
        guard case .error(let error)? = envelope.response.kind else {
            XCTFail("expected an Error response, got \(envelope)")
            return (envelope.requestID, IPCErrorMessage())
        }
        return (envelope.requestID, error)
    }

    private func assertSessionStillUsable(file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(Array((try? client.call(pingRequest([42])))?.pong.payload ?? Data()), [42], file: file, line: line)
    }

    func testMalformedBytesGetMalformedMessage() throws {
        let (id, error) = try sendRawExpectingError([0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 0x01])
        XCTAssertEqual(id, 0)
        XCTAssertEqual(error.code, .malformedMessage)
        assertSessionStillUsable()
    }

    func testUnknownRequestTypeGetsUnknownMessageWithItsRequestID() throws {
        // Envelope { request_id: 7, request: { field 99 (varint) = 1 } }: a request from a newer schema.
        let (id, error) = try sendRawExpectingError([0x08, 0x07, 0x12, 0x03, 0x98, 0x06, 0x01])
        XCTAssertEqual(id, 7)
        XCTAssertEqual(error.code, .unknownMessage)
        assertSessionStillUsable()
    }

    func testEmptyRequestAndMisdirectedResponseAreUnknownMessages() throws {
        let empty = try sendRawExpectingError(Envelope.request(Request(), id: 9).encoded())
        XCTAssertEqual(empty.0, 9)
        XCTAssertEqual(empty.1.code, .unknownMessage)
        let response = try sendRawExpectingError(Envelope.response(.error(.internal, "x"), to: 10).encoded())
        XCTAssertEqual(response.0, 10)
        XCTAssertEqual(response.1.code, .unknownMessage)
        let nothing = try sendRawExpectingError([])
        XCTAssertEqual(nothing.1.code, .unknownMessage)
        assertSessionStillUsable()
    }

    func testOversizedDatagramGetsMessageTooLarge() throws {
        let (_, error) = try sendRawExpectingError([UInt8](repeating: 0x08, count: 100_000))
        XCTAssertEqual(error.code, .messageTooLarge)
        XCTAssertTrue(error.message.contains("100000"), error.message)
        assertSessionStillUsable()
    }

    func testMissingFieldsAreNamed() throws {
        var request = Request()
        request.setLogLevel = Beryl_Ipc_V1_SetLogLevel()
        XCTAssertThrowsError(try client.call(request)) { error in
            XCTAssertEqual(error as? IPCClientError, .remote(code: .missingField, message: "SetLogLevel needs a level", field: "level"))
        }
        let (id, noID) = try sendRawExpectingError(Envelope.request(pingRequest(), id: 0).encoded())
        XCTAssertEqual(id, 0)
        XCTAssertEqual(noID.code, .missingField)
        XCTAssertEqual(noID.field, "request_id")
        request.setLogLevel.level = .debug
        XCTAssertNoThrow(try client.call(request))
        assertSessionStillUsable()
    }

    func testAFlooderThatDoesNotReadIsDroppedAndOthersAreServed() throws {
        let bystander = try IPCClient(path: scratch.paths.socket("managerd"))
        let flooder = try SeqPacketSocket.connect(path: scratch.paths.socket("managerd"))
        defer { close(flooder) }
        let ping = Envelope.request(pingRequest(), id: 1).encoded()
        var sent = 0
        var dropped = false
        while sent < 200_000 {
            let result = ping.withUnsafeBytes { send(flooder, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if result < 0 { dropped = true; break }
            sent += 1
        }
        XCTAssertTrue(dropped, "the daemon kept a peer that never read \(sent) answers")
        XCTAssertGreaterThan(sent, IPCLimits.standard.maxQueuedMessages, "dropped before its queue was full")
        XCTAssertNoThrow(try bystander.call(pingRequest()))
        XCTAssertTrue(ProcessStats.isAlive(pid: try XCTUnwrap(scratch.pid(of: "managerd"))))
        assertSessionStillUsable()
    }
}
