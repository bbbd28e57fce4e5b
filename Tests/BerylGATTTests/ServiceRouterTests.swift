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
                                  isLive: { $0.publisher != 2 }, at: .seconds(1)), "a publisher whose session is gone")
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

    /// managerd restarted: the services of apps whose data channels outlive it stay, with the answers they owe, and
    /// go by the apps' new names once adopted; one app's services go alone when its orphan is not adopted.
    func testAPublisherThatGoesLeavesItsOrphanedAppsServicesForItsSuccessor() throws {
        var router = ServiceRouter(answerTimeout: .seconds(5))
        let kept = UpdateSender(publisher: 1, onBehalfOf: 7), renamed = UpdateSender(publisher: 2, onBehalfOf: 1)
        router.published(10...20, by: 1, for: 7)
        router.published(21...30, by: 1, for: 8)
        router.published(31...40, by: 1, for: 7)
        let owed = try XCTUnwrap(router.route(handles: [12], link: 0x40, serverID: 3, isRead: true, offset: 0, expectsAnswer: true,
                                              isLive: { _ in true }, at: .zero))
        let gone = router.publisherGone(1, keeping: [7])
        XCTAssertEqual(gone.ranges, [21...30], "only the app without a channel loses its service")
        XCTAssertTrue(gone.unanswered.isEmpty, "the kept app can still answer on its channel")
        XCTAssertEqual(router.ranges(of: kept), [10...20, 31...40])
        router.rebind(kept, to: renamed)
        XCTAssertEqual(router.ranges(of: renamed), [10...20, 31...40])
        XCTAssertTrue(router.owns(15, for: renamed))
        XCTAssertFalse(router.owns(15, for: kept))
        XCTAssertEqual(try router.answer(owed.answerID, isRead: true, by: renamed).app, 1, "the owed answer follows the app")
        XCTAssertEqual(router.appGone(renamed).ranges, [10...20, 31...40])
        XCTAssertTrue(router.owners.isEmpty)
    }
}
