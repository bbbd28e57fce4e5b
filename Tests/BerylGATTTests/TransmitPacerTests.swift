import BerylGATT
import XCTest

final class TransmitPacerTests: XCTestCase {
    private func sent(_ outputs: [TransmitPacer.Output]) -> [[UInt8]] {
        outputs.compactMap { if case .transmit(let transmission) = $0 { transmission.pdu } else { nil } }
    }

    private func grant(_ link: UInt16, _ credits: Int, fresh: Bool = false) -> [TransmitPacer.Grant] {
        [TransmitPacer.Grant(handle: link, credits: credits, fresh: fresh)]
    }

    func testNothingGoesBeforeCreditsAndNeverMoreThanThey() {
        var pacer = TransmitPacer()
        XCTAssertEqual(sent(pacer.enqueue([0], on: 1) + pacer.enqueue([1], on: 1) + pacer.enqueue([2], on: 1)), [])
        XCTAssertEqual(sent(pacer.credited(grant(1, 2, fresh: true), bufferSize: 27)), [[0], [1]])
        XCTAssertEqual(pacer.credits(on: 1), 0)
        XCTAssertEqual(sent(pacer.enqueue([3], on: 1)), [])
        XCTAssertEqual(sent(pacer.credited(grant(1, 5), bufferSize: 27)), [[2], [3]])
        XCTAssertEqual(pacer.credits(on: 1), 3)
        XCTAssertEqual(sent(pacer.enqueue([4], on: 2)), [], "credits are per link")
    }

    /// A PDU costs the controller buffers its fragments take: a 251-byte one is ten 27-byte buffers.
    func testAPDUCostsItsFragments() {
        var pacer = TransmitPacer()
        let long = [UInt8](repeating: 7, count: 251)
        _ = pacer.enqueue(long, on: 1)
        _ = pacer.enqueue(long, on: 1)
        XCTAssertEqual(sent(pacer.credited(grant(1, 15, fresh: true), bufferSize: 27)).count, 1)
        XCTAssertEqual(pacer.credits(on: 1), 5)
        XCTAssertEqual(sent(pacer.credited(grant(1, 4), bufferSize: 27)).count, 0, "nine buffers do not hold ten")
        XCTAssertEqual(sent(pacer.credited(grant(1, 1), bufferSize: 27)).count, 1)
        XCTAssertEqual(pacer.credits(on: 1), 0)
    }

    /// The order given is the order sent, whatever the credits do: no refusal puts a PDU back, nothing is retried.
    func testASequenceKeepsItsOrderUnderAnyCredits() {
        var pacer = TransmitPacer()
        var generator = SystemRandomNumberGenerator()
        var order: [[UInt8]] = []
        var next = 0
        order += sent(pacer.credited(grant(1, 3, fresh: true), bufferSize: 27))
        for _ in 0..<500 {
            if Bool.random(using: &generator), pacer.hasRoom(on: 1) {
                order += sent(pacer.enqueue([UInt8(next & 0xFF), UInt8(next >> 8)], on: 1))
                next += 1
            } else {
                order += sent(pacer.credited(grant(1, Int.random(in: 0...3, using: &generator)), bufferSize: 27))
            }
        }
        order += sent(pacer.credited(grant(1, 1000), bufferSize: 27))
        XCTAssertEqual(order, (0..<next).map { [UInt8($0 & 0xFF), UInt8($0 >> 8)] })
    }

    /// hcid restarted, or attd re-subscribed: a fresh grant replaces what was held; hcid gone leaves none.
    func testAFreshGrantReplacesAndHcidGoneLeavesNone() {
        var pacer = TransmitPacer()
        _ = pacer.credited(grant(1, 7, fresh: true), bufferSize: 27)
        pacer.hcidGone()
        XCTAssertEqual(sent(pacer.enqueue([1], on: 1)), [])
        XCTAssertEqual(sent(pacer.credited(grant(1, 2, fresh: true), bufferSize: 251)), [[1]])
        XCTAssertEqual(pacer.credits(on: 1), 1)
    }

    func testRoomForThirtyTwoWaitingAndWhoWasRefusedHearsOfRoomOnce() {
        var pacer = TransmitPacer()
        for index in 0..<TransmitPacer.capacity { _ = pacer.enqueue([UInt8(index)], on: 1) }
        _ = pacer.enqueue([0], on: 2)
        XCTAssertFalse(pacer.hasRoom(on: 1))
        XCTAssertTrue(pacer.hasRoom(on: 2), "links are paced apart")
        pacer.refuseWrite(from: 7, on: 1)
        pacer.refuseNotification(from: 9)
        pacer.refuseNotification(from: 4)
        let outputs = pacer.credited(grant(1, 1, fresh: true), bufferSize: 27)
        XCTAssertEqual(sent(outputs), [[0]])
        XCTAssertTrue(outputs.contains(.writeReady(link: 1, [.init(sender: 7, count: 1)])))
        XCTAssertTrue(outputs.contains(.readyToUpdate([.init(sender: 4, count: 1), .init(sender: 9, count: 1)])))
        XCTAssertEqual(pacer.credited(grant(1, 1), bufferSize: 27), [.transmit(.init(link: 1, pdu: [1]))], "once")
    }

    /// Writes without response are held back per sender and link after a refusal, and a write pipelined before the
    /// sender saw its GattWriteReady is told to go again, so a refused write cannot land behind a later one.
    func testAWriteRefusedHoldsBackItsSenderOnItsLinkUntilReadyAndCountsTheReadies() {
        var pacer = TransmitPacer()
        let app = UpdateSender(publisher: 1, onBehalfOf: 5), other = UpdateSender(publisher: 1, onBehalfOf: 6)
        for index in 0..<TransmitPacer.capacity { _ = pacer.enqueue([UInt8(index)], on: 1) }
        pacer.refuseWrite(from: app, on: 1)
        XCTAssertTrue(pacer.holdsBackWrites(from: app, on: 1))
        XCTAssertFalse(pacer.holdsBackWrites(from: other, on: 1), "another app on the link is not held back")
        XCTAssertFalse(pacer.holdsBackWrites(from: app, on: 2), "nor the app on another link")
        XCTAssertNil(pacer.writeSentBeforeReady(app, on: 1, readySeen: 0))
        let outputs = pacer.credited(grant(1, 1, fresh: true), bufferSize: 27)
        XCTAssertEqual(outputs.filter { if case .writeReady = $0 { true } else { false } }, [.writeReady(link: 1, [.init(sender: app, count: 1)])])
        XCTAssertFalse(pacer.holdsBackWrites(from: app, on: 1))
        XCTAssertEqual(pacer.writeSentBeforeReady(app, on: 1, readySeen: 0), 1, "sent before the ready it had not seen")
        XCTAssertNil(pacer.writeSentBeforeReady(app, on: 1, readySeen: 1))
        XCTAssertNil(pacer.writeSentBeforeReady(other, on: 1, readySeen: 0))
        pacer.senderGone(app)
        XCTAssertNil(pacer.writeSentBeforeReady(app, on: 1, readySeen: 0), "a session that ended counts afresh")
    }

    /// A publisher refused because one link was full is told when that link goes away.
    func testALinkThatClosesReleasesThePublishersItHeldBack() {
        var pacer = TransmitPacer()
        for index in 0..<TransmitPacer.capacity { _ = pacer.enqueue([UInt8(index)], on: 1) }
        pacer.refuseNotification(from: 3)
        XCTAssertEqual(pacer.linkClosed(1), [.readyToUpdate([.init(sender: 3, count: 1)])])
        XCTAssertTrue(pacer.hasRoom(on: 1))
    }

    func testAPublisherThatGoesIsNotToldOfRoom() {
        var pacer = TransmitPacer()
        for index in 0..<TransmitPacer.capacity { _ = pacer.enqueue([UInt8(index)], on: 1) }
        pacer.refuseNotification(from: 3)
        pacer.refuseNotification(from: 4)
        pacer.publisherGone(3)
        XCTAssertEqual(pacer.linkClosed(1), [.readyToUpdate([.init(sender: 4, count: 1)])])
    }

    /// An app whose data channel outlives its publisher keeps what it is owed, and its ready counts follow it to its
    /// new name, so that its next ReadyToUpdate continues the count it saw.
    func testAKeptSenderKeepsItsRefusalAndCountsUnderItsNewName() {
        var pacer = TransmitPacer()
        let kept = UpdateSender(publisher: 3, onBehalfOf: 7), dropped = UpdateSender(publisher: 3, onBehalfOf: 8)
        let renamed = UpdateSender(publisher: 5, onBehalfOf: 1)
        for index in 0..<TransmitPacer.capacity { _ = pacer.enqueue([UInt8(index)], on: 1) }
        pacer.refuseNotification(from: kept)
        _ = pacer.credited(grant(1, 1, fresh: true), bufferSize: 27)
        for index in 0..<2 { _ = pacer.enqueue([UInt8(index)], on: 1) }
        pacer.refuseNotification(from: kept)
        pacer.refuseNotification(from: dropped)
        pacer.publisherGone(3, keeping: [kept])
        pacer.rebind(kept, to: renamed)
        XCTAssertTrue(pacer.holdsBack(renamed))
        XCTAssertFalse(pacer.holdsBack(kept))
        XCTAssertEqual(pacer.linkClosed(1), [.readyToUpdate([.init(sender: renamed, count: 2)])], "the second ready it is sent; none for the app that went")
    }
}
