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

    /// A peer's request reaches its handle's live publisher, owing an answer only when the peer waits for one;
    /// a handle nobody live holds is answered Unlikely Error by the shell (GATTProcessTests' unknown handle).
    func testARequestGoesToTheLivePublisherAndOwesAnAnswerOnlyWhenOneIsAwaited() throws {
        var router = ServiceRouter(answerTimeout: .seconds(5))
        router.published(10...20, by: 1)
        router.published(21...30, by: 2)
        let read = try XCTUnwrap(router.route(handles: [12], link: 0x40, serverID: 7, isRead: true, offset: 3, expectsAnswer: true,
                                              isLive: { _ in true }, at: .seconds(1)))
        XCTAssertEqual(read.publisher, 1)
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
    private func transmissions(_ outputs: [TransmitPacer.Output]) -> [TransmitPacer.Transmission] {
        outputs.compactMap { if case .transmit(let transmission) = $0 { transmission } else { nil } }
    }

    func testAtMostEightInFlightAndRoomForThirtyTwo() {
        var pacer = TransmitPacer()
        var sent: [TransmitPacer.Transmission] = []
        for index in 0..<31 { sent += transmissions(pacer.enqueue([UInt8(index)], on: 1)) }
        XCTAssertEqual(sent.map(\.pdu), (0..<8).map { [UInt8($0)] })
        XCTAssertTrue(pacer.hasRoom(on: 1))
        _ = pacer.enqueue([31], on: 1)
        XCTAssertFalse(pacer.hasRoom(on: 1))
        XCTAssertTrue(pacer.hasRoom(on: 2), "links are paced apart")
        XCTAssertEqual(transmissions(pacer.transmitted(sent[0], busy: false, at: .zero)).map(\.pdu), [[8]])
    }

    /// hcid refusing as busy: the PDU goes back at the head and everything waits out the retry delay.
    func testABusyRefusalRetriesTheSamePDUFirstAfterTheDelay() {
        var pacer = TransmitPacer()
        let sent = transmissions(pacer.enqueue([1], on: 1) + pacer.enqueue([2], on: 1))
        XCTAssertTrue(pacer.transmitted(sent[0], busy: true, at: .seconds(1)).isEmpty)
        XCTAssertEqual(pacer.nextDeadline, .seconds(1) + TransmitPacer.retryDelay)
        XCTAssertTrue(transmissions(pacer.transmitted(sent[1], busy: false, at: .seconds(1))).isEmpty, "nothing goes before the retry")
        XCTAssertTrue(pacer.tick(at: .seconds(1)).isEmpty)
        XCTAssertEqual(transmissions(pacer.tick(at: .seconds(1) + TransmitPacer.retryDelay)).map(\.pdu), [[1]])
        XCTAssertNil(pacer.nextDeadline)
    }

    func testAnUrgentPDUGoesBeforeThePacedOnes() {
        var pacer = TransmitPacer()
        var sent: [TransmitPacer.Transmission] = []
        for index in 0..<10 { sent += transmissions(pacer.enqueue([UInt8(index)], on: 1)) }
        _ = pacer.retryUrgent([0xAA], on: 1)
        let next = transmissions(pacer.transmitted(sent[0], busy: false, at: .zero))
        XCTAssertEqual(next.map(\.pdu), [[0xAA]])
        XCTAssertEqual(next.map(\.urgent), [true])
    }

    /// hcid's queue full: every PDU in flight is refused, one after another. They go again in the order they were
    /// given, before what was queued behind them; a notification stream keeps its sequence (it was reversed: each
    /// refused PDU went back at the head, ahead of the one refused before it).
    func testPDUsRefusedInARowGoAgainInTheirOrder() {
        var pacer = TransmitPacer()
        var sent: [TransmitPacer.Transmission] = []
        for index in 0..<12 { sent += transmissions(pacer.enqueue([UInt8(index)], on: 1)) }
        XCTAssertEqual(sent.count, TransmitPacer.inFlightLimit)
        for transmission in sent { XCTAssertTrue(pacer.transmitted(transmission, busy: true, at: .seconds(1)).isEmpty) }
        let retried = transmissions(pacer.tick(at: .seconds(1) + TransmitPacer.retryDelay))
        var order = retried
        for transmission in retried { order += transmissions(pacer.transmitted(transmission, busy: false, at: .seconds(2))) }
        XCTAssertEqual(order.map(\.pdu), (0..<12).map { [UInt8($0)] })
    }

    func testRefusedWritersAndPublishersHearOfRoomOnce() {
        var pacer = TransmitPacer()
        var sent: [TransmitPacer.Transmission] = []
        for index in 0..<32 { sent += transmissions(pacer.enqueue([UInt8(index)], on: 1)) }
        _ = pacer.enqueue([0], on: 2)
        pacer.refuseWrite(on: 1)
        pacer.refuseNotification(from: 9)
        pacer.refuseNotification(from: 4)
        let outputs = pacer.transmitted(sent[0], busy: false, at: .zero)
        XCTAssertTrue(outputs.contains(.writeReady(link: 1)))
        XCTAssertTrue(outputs.contains(.readyToUpdate([4, 9])))
        XCTAssertFalse(pacer.transmitted(sent[1], busy: false, at: .zero).contains { if case .transmit = $0 { false } else { true } }, "once")
    }

    /// A publisher refused because one link was full is told when that link goes away.
    func testALinkThatClosesReleasesThePublishersItHeldBack() {
        var pacer = TransmitPacer()
        for index in 0..<32 { _ = pacer.enqueue([UInt8(index)], on: 1) }
        pacer.refuseNotification(from: 3)
        XCTAssertEqual(pacer.linkClosed(1), [.readyToUpdate([3])])
        XCTAssertTrue(pacer.hasRoom(on: 1))
    }

    func testAPublisherThatGoesIsNotToldOfRoom() {
        var pacer = TransmitPacer()
        for index in 0..<32 { _ = pacer.enqueue([UInt8(index)], on: 1) }
        pacer.refuseNotification(from: 3)
        pacer.refuseNotification(from: 4)
        pacer.publisherGone(3)
        XCTAssertEqual(pacer.linkClosed(1), [.readyToUpdate([4])])
    }
}
