import BerylL2CAP
import XCTest

/// One channel's K-frames and credits (Core Vol 3 Part A §3.4, §10.1).
final class CreditBasedChannelTests: XCTestCase {
    private func channel(localMTU: UInt16 = 100, localMPS: UInt16 = 30, window: Int = 10, remoteMTU: UInt16 = 100, remoteMPS: UInt16 = 30,
                         sendCredits: Int = 10, sendQueueLimit: Int = 1024) -> CreditBasedChannel {
        CreditBasedChannel(local: .init(cid: 0x40, mtu: localMTU, mps: localMPS), remote: .init(cid: 0x50, mtu: remoteMTU, mps: remoteMPS),
                           window: window, sendCredits: sendCredits, sendQueueLimit: sendQueueLimit)
    }

    /// §3.4.2: the first K-frame of an SDU starts with its 2-octet SDU Length, within the MPS; the rest fill the MPS.
    func testAnSDUIsCutIntoKFramesAtThePeersMPS() {
        var channel = channel()
        let sdu = (0..<70).map { UInt8($0) }
        XCTAssertNoThrow(try channel.send(sdu))
        let frames = channel.takeFrames()
        XCTAssertEqual(frames.map(\.count), [30, 30, 12], "the SDU Length and 28 octets, then 30, then the last 12")
        XCTAssertEqual(frames[0], [70, 0] + Array(sdu[0..<28]))
        XCTAssertEqual(frames[1], Array(sdu[28..<58]))
        XCTAssertEqual(frames[2], Array(sdu[58..<70]))
        XCTAssertEqual(channel.sendCredits, 7, "one credit per K-frame")
        XCTAssertTrue(channel.isSendQueueEmpty)
    }

    /// A K-frame goes only with a credit; frames wait, and credits release them (§10.1).
    func testFramesWaitForCreditsAndGoWhenTheyCome() {
        var channel = channel(sendCredits: 1)
        XCTAssertNoThrow(try channel.send(Array(repeating: 1, count: 50)))
        XCTAssertEqual(channel.takeFrames().count, 1)
        XCTAssertEqual(channel.takeFrames(), [], "no credit left")
        XCTAssertFalse(channel.isSendQueueEmpty)
        XCTAssertNoThrow(try channel.addSendCredits(1))
        XCTAssertEqual(channel.takeFrames(), [Array(repeating: 1, count: 22)])
        XCTAssertTrue(channel.isSendQueueEmpty)
    }

    /// §4.24: credits that would take the grant above 65,535 end the channel.
    func testCreditsBeyond65535AreAViolation() {
        var channel = channel(sendCredits: 65_000)
        XCTAssertNoThrow(try channel.addSendCredits(535))
        XCTAssertEqual(channel.sendCredits, 65_535)
        XCTAssertThrowsError(try channel.addSendCredits(1)) { XCTAssertEqual($0 as? CreditBasedChannel.Violation, .creditOverflow) }
    }

    /// The app's SDU is refused above the peer's MTU; the queue is bounded, but always takes one SDU when empty.
    func testSendIsBoundedByThePeersMTUAndTheQueue() {
        var channel = channel(remoteMTU: 40, sendCredits: 0, sendQueueLimit: 60)
        XCTAssertThrowsError(try channel.send(Array(repeating: 0, count: 41))) {
            XCTAssertEqual($0 as? CreditBasedChannel.SendRefusal, .sduOverMTU(41, mtu: 40))
        }
        XCTAssertNoThrow(try channel.send(Array(repeating: 0, count: 40)))
        XCTAssertNoThrow(try channel.send(Array(repeating: 0, count: 20)))
        XCTAssertFalse(channel.hasSpace)
        XCTAssertThrowsError(try channel.send([1])) { XCTAssertEqual($0 as? CreditBasedChannel.SendRefusal, .queueFull) }
        XCTAssertEqual(channel.queuedBytes, 60)
        var empty = self.channel(remoteMTU: 500, sendCredits: 0, sendQueueLimit: 60)
        XCTAssertNoThrow(try empty.send(Array(repeating: 0, count: 400)), "an SDU above the limit still goes alone")
    }

    /// §3.4.2: K-frames are put back together by the SDU Length; an empty SDU is one K-frame of its length alone.
    func testKFramesReassembleIntoSDUs() {
        var channel = channel()
        XCTAssertEqual(channel.receive([5, 0, 1, 2]), .success(nil))
        XCTAssertEqual(channel.receive([3, 4, 5]), .success(.init(bytes: [1, 2, 3, 4, 5], frames: 2)))
        XCTAssertEqual(channel.receive([0, 0]), .success(.init(bytes: [], frames: 1)))
        XCTAssertEqual(channel.framesHeld, 3, "held until the app takes them")
    }

    /// §3.4.3 and §10.1: each rule that ends the channel.
    func testWhatAPeerMustNotSendEndsTheChannel() {
        var overMPS = channel(localMPS: 30)
        XCTAssertEqual(overMPS.receive(Array(repeating: 0, count: 31)), .failure(.frameOverMPS(31)))
        var overMTU = channel(localMTU: 100)
        XCTAssertEqual(overMTU.receive([101, 0]), .failure(.sduOverMTU(101)))
        var overrun = channel()
        XCTAssertEqual(overrun.receive([3, 0, 1, 2]), .success(nil))
        XCTAssertEqual(overrun.receive([3, 4]), .failure(.sduOverrun(4)))
        var short = channel()
        XCTAssertEqual(short.receive([3]), .failure(.missingSDULength))
        // The window is raised to one whole SDU of the MTU: 100 + 2 octets in K-frames of 30 take 4.
        var noCredit = channel(localMTU: 100, localMPS: 30, window: 1)
        XCTAssertEqual(noCredit.window, 4)
        for _ in 0..<4 { _ = noCredit.receive([1, 0, 9]) }
        XCTAssertEqual(noCredit.receive([1, 0, 9]), .failure(.frameWithoutCredit))
    }

    /// Credits go back as the app takes SDUs, batched by half the window, or at once when the peer has none left:
    /// what the app has not read holds the peer back.
    func testCreditsGoBackAsTheAppTakesSDUs() {
        var channel = channel(localMTU: 23, localMPS: 25, window: 4)
        var received: [CreditBasedChannel.ReceivedSDU] = []
        for value in 0..<4 {
            guard case .success(let sdu?) = channel.receive([1, 0, UInt8(value)]) else { return XCTFail("SDU \(value)") }
            received.append(sdu)
        }
        XCTAssertEqual(channel.peerCredits, 0)
        XCTAssertEqual(channel.receive([1, 0, 9]), .failure(.frameWithoutCredit), "the app read nothing: the peer may send nothing")
        var fresh = self.channel(localMTU: 23, localMPS: 25, window: 4)
        for value in 0..<3 { _ = fresh.receive([1, 0, UInt8(value)]) }
        XCTAssertNil(fresh.consumed(received[0]), "one of four owed: not yet")
        XCTAssertEqual(fresh.consumed(received[1]), 2, "half the window owed")
        XCTAssertEqual(fresh.peerCredits, 3)
        XCTAssertEqual(channel.consumed(received[0]), 1, "a peer with no credit gets one back at once")
    }
}
