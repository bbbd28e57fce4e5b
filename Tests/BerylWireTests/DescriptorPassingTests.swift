import BerylWire
import Foundation
import Glibc
import XCTest

/// A descriptor passed with a datagram (SCM_RIGHTS), as managerd passes an app its data channel: it arrives with its
/// datagram only, works on the other side, and the sender keeps its own.
final class DescriptorPassingTests: XCTestCase {
    private func openDescriptors() -> Int { (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? -1 }

    func testADescriptorArrivesWithItsDatagramAndWorksThere() throws {
        let (kept, passed) = try SeqPacketSocket.pair()
        defer { close(kept); close(passed) }
        var pipeEnds: [Int32] = [-1, -1]
        XCTAssertEqual(pipe(&pipeEnds), 0)
        defer { close(pipeEnds[0]); close(pipeEnds[1]) }

        XCTAssertEqual(SeqPacketSocket.send(kept, [1, 2, 3], passing: pipeEnds[1]), .sent)
        XCTAssertEqual(SeqPacketSocket.send(kept, [4]), .sent)
        var buffer: [UInt8] = []
        var descriptor: Int32?
        XCTAssertEqual(SeqPacketSocket.receive(passed, cap: 64, buffer: &buffer, passed: &descriptor), .message([1, 2, 3]))
        let received = try XCTUnwrap(descriptor, "the first datagram carried the pipe's write end")
        XCTAssertNotEqual(received, pipeEnds[1], "a descriptor of the receiver's own")
        XCTAssertEqual(fcntl(received, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC, "close-on-exec, so that an app's children do not inherit it")
        XCTAssertEqual(SeqPacketSocket.receive(passed, cap: 64, buffer: &buffer, passed: &descriptor), .message([4]))
        XCTAssertNil(descriptor, "the second datagram carried none")

        XCTAssertEqual(write(received, "hi", 2), 2, "the passed end writes into the sender's pipe")
        close(received)
        var read = [UInt8](repeating: 0, count: 2)
        XCTAssertEqual(Glibc.read(pipeEnds[0], &read, 2), 2)
        XCTAssertEqual(read, Array("hi".utf8))
    }

    /// A reader that takes no descriptor (a client that does not expect one) closes what came: nothing piles up.
    func testADescriptorNobodyTakesIsClosed() throws {
        let (kept, passed) = try SeqPacketSocket.pair()
        defer { close(kept) }
        let before = openDescriptors()
        for _ in 0..<20 { XCTAssertEqual(SeqPacketSocket.send(kept, Envelope.event(Event()).encoded(), passing: kept), .sent) }
        shutdown(kept, Int32(SHUT_WR))
        var datagrams = 0
        SeqPacketSocket.readDatagrams(passed) { _ in datagrams += 1 }
        close(passed)
        XCTAssertEqual(datagrams, 20)
        XCTAssertEqual(openDescriptors(), before - 1, "the 20 passed copies were closed as they came (and the read end now too)")
    }

    func testAClientTakesTheDescriptorOfTheLastDatagramItReceived() throws {
        let (kept, passed) = try SeqPacketSocket.pair()
        defer { close(kept) }
        let client = IPCClient(descriptor: passed, name: "test pair")
        XCTAssertEqual(SeqPacketSocket.send(kept, Envelope.event(Event()).encoded(), passing: kept), .sent)
        _ = try client.receive(timeout: .seconds(1))
        let descriptor = try XCTUnwrap(client.takePassedDescriptor())
        XCTAssertNil(client.takePassedDescriptor(), "taken once")
        close(descriptor)
    }
}
