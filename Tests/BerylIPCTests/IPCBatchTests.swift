import BerylCore
import BerylEventLoop
import BerylIPC
import BerylWire
import Foundation
import XCTest

/// What one side sends the other during one loop wake-up leaves as one datagram (a Batch), to a peer that said it
/// takes batches; everything arrives in order; a batch never nests; a peer that did not opt in sees single envelopes.
final class IPCBatchTests: XCTestCase {
    private var directory = ""

    override func setUpWithError() throws {
        directory = NSTemporaryDirectory() + "beryl-ipc-batch-\(getpid())-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    }

    private var cleanUp: [() -> Void] = []

    override func tearDown() {
        for step in cleanUp.reversed() { step() }
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// An echo server on `loop`, and a bare client socket connected to it.
    private func serverAndPeer(_ loop: EventLoop) throws -> (fd: Int32, asked: () -> [UInt64]) {
        let (server, asked) = try echoServer(loop)
        cleanUp.append { server.shutdown() }
        let fd = try SeqPacketSocket.connect(path: server.path, nonBlocking: true)
        cleanUp.append { close(fd) }
        return (fd, asked)
    }

    /// Pings with these ids, in one datagram.
    private func sendPings(_ ids: ClosedRange<UInt64>, acceptsBatches: Bool, to fd: Int32) {
        var batch = EnvelopeBatch(capacity: 65536)
        for id in ids { batch.append(ping(id, acceptsBatches: acceptsBatches)) }
        XCTAssertEqual(SeqPacketSocket.send(fd, batch.take()), .sent)
    }

    private func ping(_ id: UInt64, acceptsBatches: Bool) -> [UInt8] {
        var envelope = Envelope.request(.with { $0.ping = .init() }, id: id)
        envelope.acceptsBatches = acceptsBatches
        return envelope.encoded()
    }

    /// A server that answers each request with an Ack, and records the ids it was asked.
    private func echoServer(_ loop: EventLoop) throws -> (IPCServer, () -> [UInt64]) {
        let server = try IPCServer(loop: loop, path: directory + "/echo.sock", logger: Logger(component: "test", level: .error))
        var asked: [UInt64] = []
        server.onRequest = { incoming in
            asked.append(incoming.id)
            incoming.respond(.with { $0.ack = .init() })
        }
        return (server, { asked })
    }

    private func receiveDatagram(_ fd: Int32, loop: EventLoop) -> Envelope? {
        var buffer: [UInt8] = []
        for _ in 0..<200 {
            loop.runOnce()
            if case .message(let bytes) = SeqPacketSocket.receive(fd, cap: 65536, buffer: &buffer) { return try? Envelope(serializedBytes: bytes) }
            usleep(1000)
        }
        return nil
    }

    func testAServerBatchesWhatAWakeUpSendsAPeerThatTakesBatches() throws {
        let loop = try EventLoop()
        let (fd, asked) = try serverAndPeer(loop)
        // Five requests in one datagram, the peer taking batches: five answers in one datagram, in order.
        sendPings(1...5, acceptsBatches: true, to: fd)
        let answers = try XCTUnwrap(receiveDatagram(fd, loop: loop))
        XCTAssertEqual(answers.batch.envelopes.map(\.requestID), [1, 2, 3, 4, 5])
        XCTAssertTrue(answers.batch.envelopes.allSatisfy { $0.response.ack == .init() })
        XCTAssertEqual(asked(), [1, 2, 3, 4, 5])
        // A batch inside a batch is refused, typed, and what follows it is still handled.
        var nested = Envelope()
        nested.requestID = 6
        nested.batch.envelopes = [Envelope.request(.with { $0.ping = .init() }, id: 7)]
        var batch = EnvelopeBatch(capacity: 65536)
        batch.append(nested.encoded())
        batch.append(ping(8, acceptsBatches: true))
        XCTAssertEqual(SeqPacketSocket.send(fd, batch.take()), .sent)
        let refusal = try XCTUnwrap(receiveDatagram(fd, loop: loop))
        XCTAssertEqual(refusal.batch.envelopes.map(\.requestID), [6, 8])
        XCTAssertEqual(refusal.batch.envelopes.first?.response.error.code, .malformedMessage)
        XCTAssertEqual(asked(), [1, 2, 3, 4, 5, 8], "request 7 inside the nested batch was never handled")
    }

    /// A broadcast goes to the sessions it picks, once each, and to no other; a batching peer gets it in its wake-up's
    /// datagram, one that did not opt in as a lone envelope.
    func testABroadcastReachesTheSessionsItPicksOnceEach() throws {
        let loop = try EventLoop()
        let (server, _) = try echoServer(loop)
        cleanUp.append { server.shutdown() }
        var peers: [Int32] = []
        for index in 0..<3 {
            let fd = try SeqPacketSocket.connect(path: server.path, nonBlocking: true)
            cleanUp.append { close(fd) }
            peers.append(fd)
            // A ping makes the server hear the peer (and whether it takes batches) before the broadcast.
            XCTAssertEqual(SeqPacketSocket.send(fd, ping(UInt64(index + 1), acceptsBatches: index == 0)), .sent)
            XCTAssertNotNil(receiveDatagram(fd, loop: loop), "peer \(index) was not answered")
        }
        XCTAssertEqual(server.sessions.count, 3)
        let skipped = try XCTUnwrap(server.sessions.keys.max())
        var event = Event()
        event.hci.controllerChanged.address = "C0:FF:EE:00:00:01"
        _ = try loop.after(.zero) { server.broadcast(event) { $0.id != skipped } }
        loop.runOnce()
        var heard: [Int] = []
        for (index, fd) in peers.enumerated() {
            var buffer: [UInt8] = []
            guard case .message(let bytes) = SeqPacketSocket.receive(fd, cap: 65536, buffer: &buffer) else { continue }
            let envelope = try Envelope(serializedBytes: bytes)
            XCTAssertEqual(envelope.unbatched.map(\.event), [event], "peer \(index): the event, once")
            heard.append(index)
            if case .message = SeqPacketSocket.receive(fd, cap: 65536, buffer: &buffer) { XCTFail("peer \(index) heard it twice") }
        }
        XCTAssertEqual(heard.count, 2, "every session but the one left out, and only those")
    }

    func testAPeerThatDidNotOptInGetsOneEnvelopePerDatagram() throws {
        let loop = try EventLoop()
        let (fd, _) = try serverAndPeer(loop)
        sendPings(1...3, acceptsBatches: false, to: fd)
        var ids: [UInt64] = []
        for _ in 0..<3 {
            let answer = try XCTUnwrap(receiveDatagram(fd, loop: loop))
            XCTAssertNil(answer.body.flatMap { if case .batch = $0 { $0 } else { nil } }, "not a batch")
            ids.append(answer.requestID)
        }
        XCTAssertEqual(ids, [1, 2, 3])
    }

    /// Daemon to daemon: an IPCConnection's requests of one wake-up leave as one datagram (read here off a bare
    /// socket), and a batch of answers completes each request once, in order.
    func testAConnectionsRequestsOfOneWakeUpGoAsOneDatagramAndAreAnsweredInOrder() throws {
        let loop = try EventLoop()
        let path = directory + "/bare.sock"
        let listener = try SeqPacketSocket.listen(path: path, mode: 0o600)
        defer { close(listener) }
        let connection = try IPCConnection(loop: loop, path: path)
        var answered: [Int] = []
        _ = try loop.after(.zero) {
            for index in 0..<40 { connection.request(.with { $0.ping = .init() }) { if case .success = $0 { answered.append(index) } } }
        }
        loop.runOnce()
        loop.runOnce()
        var peer: Int32?
        for _ in 0..<100 where peer == nil {
            peer = SeqPacketSocket.accept(listener: listener)
            if peer == nil { usleep(1000) }
        }
        let fd = try XCTUnwrap(peer)
        defer { close(fd) }
        let requests = try XCTUnwrap(receiveDatagram(fd, loop: loop), "nothing arrived")
        XCTAssertEqual(requests.batch.envelopes.count, 40, "the 40 requests of one wake-up in one datagram")
        XCTAssertTrue(requests.batch.envelopes.allSatisfy(\.acceptsBatches), "each says its sender takes batches")
        // Answered out of the order asked, in one batch: each completion runs once, in the order of the answers.
        var answers = EnvelopeBatch(capacity: 65536)
        for envelope in requests.batch.envelopes.reversed() { answers.append(Envelope.response(.with { $0.ack = .init() }, to: envelope.requestID).encoded()) }
        XCTAssertEqual(SeqPacketSocket.send(fd, answers.take()), .sent)
        for _ in 0..<200 where answered.count < 40 {
            loop.runOnce()
            usleep(1000)
        }
        XCTAssertEqual(answered, Array((0..<40).reversed()))
        connection.shut("done")
    }

    /// A batch is checked as a lone envelope is: fields the schema does not know, a request id of its own, or more
    /// envelopes than a batch may hold are refused, typed, and none of its requests is handled.
    func testABatchThatALoneEnvelopeCouldNotBeIsRefused() throws {
        let loop = try EventLoop()
        let (fd, asked) = try serverAndPeer(loop)
        var withID = Envelope()
        withID.requestID = 3
        withID.batch.envelopes = [Envelope.request(.with { $0.ping = .init() }, id: 4)]
        XCTAssertEqual(SeqPacketSocket.send(fd, withID.encoded()), .sent)
        XCTAssertEqual(try XCTUnwrap(receiveDatagram(fd, loop: loop)).response.error.code, .unknownMessage)
        var unknown = withID
        unknown.requestID = 0
        var bytes = unknown.encoded()
        bytes += [0xF8, 0x06, 0x01]  // field 111, varint 1: not in the schema
        XCTAssertEqual(SeqPacketSocket.send(fd, bytes), .sent)
        XCTAssertEqual(try XCTUnwrap(receiveDatagram(fd, loop: loop)).response.error.code, .unknownMessage)
        var many = Envelope()
        many.batch.envelopes = (1...UInt64(EnvelopeBatch.maxEnvelopes + 1)).map { Envelope.request(.with { $0.ping = .init() }, id: $0) }
        XCTAssertEqual(SeqPacketSocket.send(fd, many.encoded()), .sent)
        XCTAssertEqual(try XCTUnwrap(receiveDatagram(fd, loop: loop)).response.error.code, .messageTooLarge)
        XCTAssertEqual(asked(), [], "no request of a refused batch was handled")
    }
}
