import BerylGATT
import XCTest

final class ServiceRouterTests: XCTestCase {
    func testHandlesRouteToTheirPublisherAndGoWithIt() {
        var router = ServiceRouter(answerTimeout: .seconds(5))
        router.published(10...20, by: 1)
        router.published(21...30, by: 2)
        router.published(31...40, by: 1)
        XCTAssertEqual(router.owner(of: 25), 2)
        XCTAssertNil(router.owner(of: 9))
        XCTAssertTrue(router.owns(1, 35))
        XCTAssertFalse(router.owns(2, 35), "a publisher cannot notify another's value")
        XCTAssertNil(router.unpublish(startingAt: 21, by: 1), "nor remove another's service")
        XCTAssertEqual(router.unpublish(startingAt: 21, by: 2), 21...30)
        XCTAssertEqual(router.publisherGone(1).ranges, [10...20, 31...40])
        XCTAssertTrue(router.owners.isEmpty)
    }

    /// A data channel sends only the values of the services its publisher added for its own app.
    func testAValueIsAnAppsOwnOnlyWhenPublishedForIt() {
        var router = ServiceRouter(answerTimeout: .seconds(5))
        router.published(10...20, by: 1, for: 7)
        router.published(21...30, by: 1, for: 8)
        XCTAssertTrue(router.owns(15, for: UpdateSender(publisher: 1, onBehalfOf: 7)))
        XCTAssertFalse(router.owns(25, for: UpdateSender(publisher: 1, onBehalfOf: 7)), "another app's value of the same publisher")
        XCTAssertFalse(router.owns(15, for: UpdateSender(publisher: 2, onBehalfOf: 7)), "the same app id from another publisher")
        XCTAssertTrue(router.owns(1, 25), "the publisher itself still owns all it published")
    }

    /// A request for an app's values is owed by that app: only its data channel answers it, besides the publisher.
    func testAnAppsRequestIsAnsweredOnlyByThatApp() throws {
        var router = ServiceRouter(answerTimeout: .seconds(5))
        router.published(10...20, by: 1, for: 7)
        let read = try XCTUnwrap(router.route(handles: [12], link: 0x40, serverID: 7, isRead: true, offset: 0, expectsAnswer: true,
                                              isLive: { _ in true }, at: .zero))
        XCTAssertEqual(read.owner, UpdateSender(publisher: 1, onBehalfOf: 7))
        XCTAssertThrowsError(try router.answer(read.answerID, isRead: true, by: UpdateSender(publisher: 1, onBehalfOf: 8)), "another app's channel")
        XCTAssertEqual(try router.answer(read.answerID, isRead: true, by: UpdateSender(publisher: 1, onBehalfOf: 7)).app, 7)
        XCTAssertThrowsError(try router.answer(read.answerID, isRead: true), "answered once")
    }

    /// A peer's request reaches its handle's live publisher, owing an answer only when the peer waits for one;
    /// a handle nobody live holds is answered Unlikely Error by the shell (GATTProcessTests' unknown handle).
    func testARequestGoesToTheLivePublisherAndOwesAnAnswerOnlyWhenOneIsAwaited() throws {
        var router = ServiceRouter(answerTimeout: .seconds(5))
        router.published(10...20, by: 1)
        router.published(21...30, by: 2)
        let read = try XCTUnwrap(router.route(handles: [12], link: 0x40, serverID: 7, isRead: true, offset: 3, expectsAnswer: true,
                                              isLive: { _ in true }, at: .seconds(1)))
        XCTAssertEqual(read.owner, UpdateSender(publisher: 1))
        XCTAssertEqual(try router.answer(read.answerID, isRead: true),
                       .init(link: 0x40, serverID: 7, isRead: true, offset: 3, publisher: 1, deadline: .seconds(6)))
        let command = try XCTUnwrap(router.route(handles: [22], link: 0x40, serverID: 8, isRead: false, offset: 0, expectsAnswer: false,
                                                 isLive: { _ in true }, at: .seconds(1)))
        XCTAssertEqual(command.answerID, 0, "a write command owes nothing")
        XCTAssertNil(router.nextDeadline)
        XCTAssertNil(router.route(handles: [22], link: 0x40, serverID: 9, isRead: true, offset: 0, expectsAnswer: true,
                                  isLive: { $0 != 2 }, at: .seconds(1)), "a publisher whose session is gone")
        XCTAssertNil(router.route(handles: [31], link: 0x40, serverID: 10, isRead: true, offset: 0, expectsAnswer: true,
                                  isLive: { _ in true }, at: .seconds(1)), "a handle nobody published")
        XCTAssertNil(router.route(handles: [12, 22], link: 0x40, serverID: 11, isRead: false, offset: 0, expectsAnswer: true,
                                  isLive: { _ in true }, at: .seconds(1)), "an Execute Write across two publishers' values")
        XCTAssertNil(router.nextDeadline, "nothing is owed for a request that went nowhere")
    }

    /// A publisher that goes owes nothing more: its peers are failed at once, others' answers stay owed.
    func testAPublisherThatGoesLeavesItsUnansweredRequestsToBeFailedAtOnce() throws {
        var router = ServiceRouter(answerTimeout: .seconds(5))
        router.published(10...20, by: 1)
        router.published(21...30, by: 2)
        let mine = router.owe(link: 0x40, serverID: 1, isRead: true, offset: 0, by: 1, at: .zero)
        let theirs = router.owe(link: 0x40, serverID: 2, isRead: true, offset: 0, by: 2, at: .zero)
        let alsoMine = router.owe(link: 0x41, serverID: 3, isRead: false, offset: 0, by: 1, at: .seconds(1))
        let gone = router.publisherGone(1)
        XCTAssertEqual(gone.unanswered.map(\.serverID), [1, 3], "oldest first")
        XCTAssertThrowsError(try router.answer(mine, isRead: true))
        XCTAssertThrowsError(try router.answer(alsoMine, isRead: false))
        XCTAssertEqual(try router.answer(theirs, isRead: true).publisher, 2)
    }

    func testAnAnswerIsTakenOnceAndOnlyAsTheKindOwed() throws {
        var router = ServiceRouter(answerTimeout: .seconds(5))
        let read = router.owe(link: 0x40, serverID: 7, isRead: true, offset: 22, by: 3, at: .zero)
        XCTAssertThrowsError(try router.answer(read, isRead: false)) { XCTAssertEqual($0 as? ServiceRouter.AnswerError, .notPending) }
        let owed = try router.answer(read, isRead: true)
        XCTAssertEqual(owed, ServiceRouter.OwedAnswer(link: 0x40, serverID: 7, isRead: true, offset: 22, publisher: 3, deadline: .seconds(5)))
        XCTAssertThrowsError(try router.answer(read, isRead: true), "answered already")
    }

    /// An app that never answers: the peer hears Unlikely Error at the deadline, not silence until its ATT timeout.
    func testUnansweredRequestsExpireOldestFirstAndAClosedLinkOwesNothing() {
        var router = ServiceRouter(answerTimeout: .seconds(5))
        let first = router.owe(link: 0x40, serverID: 1, isRead: true, offset: 0, by: 1, at: .zero)
        let second = router.owe(link: 0x40, serverID: 2, isRead: false, offset: 0, by: 1, at: .seconds(1))
        _ = router.owe(link: 0x41, serverID: 3, isRead: true, offset: 0, by: 1, at: .seconds(2))
        XCTAssertEqual(router.nextDeadline, .seconds(5))
        XCTAssertTrue(router.expired(at: .milliseconds(4999)).isEmpty)
        XCTAssertEqual(router.expired(at: .seconds(6)).map(\.id), [first, second])
        router.linkClosed(0x41)
        XCTAssertNil(router.nextDeadline)
        XCTAssertTrue(router.expired(at: .seconds(60)).isEmpty)
    }
}

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
}
