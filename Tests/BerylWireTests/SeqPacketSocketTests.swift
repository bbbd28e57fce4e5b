import BerylWire
import Foundation
import Glibc
import XCTest

private struct SocketPairFailed: Error {}

final class SeqPacketSocketTests: XCTestCase {
    private var fds: [Int32] = []

    override func tearDown() {
        for fd in fds { close(fd) }
    }

    private func pair() throws -> (Int32, Int32) {
        var ends: [Int32] = [0, 0]
        XCTAssertEqual(socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue), 0, &ends), 0, "socketpair: errno \(errno)")
        guard ends.allSatisfy({ $0 > 0 }) else { throw SocketPairFailed() }
        fds += ends
        return (ends[0], ends[1])
    }

    func testDatagramsKeepTheirBoundariesAndAnOversizedOneIsReportedNotTruncated() throws {
        let (a, b) = try pair()
        XCTAssertEqual(SeqPacketSocket.send(a, [1, 2, 3]), .sent)
        XCTAssertEqual(SeqPacketSocket.send(a, [4]), .sent)
        XCTAssertEqual(SeqPacketSocket.send(a, [UInt8](repeating: 7, count: 100)), .sent)
        XCTAssertEqual(SeqPacketSocket.send(a, []), .sent)
        XCTAssertEqual(SeqPacketSocket.send(a, [5]), .sent)
        var buffer: [UInt8] = []
        XCTAssertEqual(SeqPacketSocket.receive(b, cap: 64, buffer: &buffer), .message([1, 2, 3]))
        XCTAssertEqual(SeqPacketSocket.receive(b, cap: 64, buffer: &buffer), .message([4]))
        XCTAssertEqual(SeqPacketSocket.receive(b, cap: 64, buffer: &buffer), .tooLarge(length: 100), "over the cap: its length, not its head")
        XCTAssertEqual(SeqPacketSocket.receive(b, cap: 64, buffer: &buffer), .message([]), "an empty datagram is not the end of the stream")
        XCTAssertEqual(SeqPacketSocket.receive(b, cap: 64, buffer: &buffer), .message([5]), "what follows an oversized datagram still arrives")
        XCTAssertEqual(SeqPacketSocket.receive(b, cap: 64, buffer: &buffer), .wouldBlock)
        close(a)
        fds.removeAll { $0 == a }
        XCTAssertEqual(SeqPacketSocket.receive(b, cap: 64, buffer: &buffer), .closed)
        XCTAssertEqual(SeqPacketSocket.send(b, [1]), .closed, "no SIGPIPE: the peer is gone")
    }

    func testTheKernelNamesThePeer() throws {
        let (a, _) = try pair()
        XCTAssertEqual(SeqPacketSocket.peerCredentials(a), PeerCredentials(pid: getpid(), uid: getuid(), gid: getgid()))
    }

    func testAListenerRefusesToReplaceWhatIsNotAStaleSocket() throws {
        let directory = NSTemporaryDirectory() + "beryl-wire-\(getpid())-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let file = directory + "/plain"
        XCTAssertTrue(FileManager.default.createFile(atPath: file, contents: Data([1])))
        XCTAssertThrowsError(try SeqPacketSocket.listen(path: file)) { XCTAssertEqual($0 as? IPCSocketError, .notASocket(file)) }
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: file)), Data([1]), "the file is left as it was")

        let path = directory + "/served.sock"
        let listener = try SeqPacketSocket.listen(path: path)
        fds.append(listener)
        XCTAssertThrowsError(try SeqPacketSocket.listen(path: path)) { XCTAssertEqual($0 as? IPCSocketError, .alreadyRunning(path)) }
        close(listener)
        fds.removeAll { $0 == listener }
        // A crashed server's socket file is stale: nobody accepts there, so a new server takes the path.
        let successor = try SeqPacketSocket.listen(path: path)
        fds.append(successor)

        let long = directory + "/" + String(repeating: "x", count: 120)
        XCTAssertThrowsError(try SeqPacketSocket.listen(path: long)) { XCTAssertEqual($0 as? IPCSocketError, .pathTooLong(long)) }
    }
}
