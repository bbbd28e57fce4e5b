import BerylManager
import XCTest

/// The peripheral role's routing without processes: a remote central's read or write reaches the app that owns the
/// handle, is answered once, and is answered for the app when it goes.
final class PeripheralRouterTests: XCTestCase {
    private let thermostat = ManagerKey(.session(4), manager: 1)
    private let lock = ManagerKey(.session(5), manager: 1)

    private func router() -> PeripheralRouter {
        var router = PeripheralRouter()
        router.publish(10...14, owner: thermostat)
        router.publish(20...22, owner: lock)
        return router
    }

    func testARequestGoesToTheOwnerAndIsAnsweredOnce() throws {
        var router = router()
        XCTAssertEqual(router.route(1, .read, handles: [12], expectsAnswer: true) { _ in true }, .app(thermostat))
        XCTAssertThrowsError(try router.answer(1, from: lock.holder, attError: 0)) { XCTAssertEqual($0 as? PeripheralRouter.AnswerRefusal, .notPending, "not the lock's") }
        XCTAssertThrowsError(try router.answer(1, from: thermostat.holder, attError: 0x100)) {
            XCTAssertEqual($0 as? PeripheralRouter.AnswerRefusal, .notAnATTError)
        }
        XCTAssertEqual(try router.answer(1, from: thermostat.holder, attError: 0x80), .read, "an application error is an answer")
        XCTAssertThrowsError(try router.answer(1, from: thermostat.holder, attError: 0)) {
            XCTAssertEqual($0 as? PeripheralRouter.AnswerRefusal, .notPending, "Core Bluetooth's rule: one answer per request")
        }
    }

    func testWhatNoAppCanAnswerIsUnlikelyErrorAndAWriteCommandIsDropped() {
        var router = router()
        XCTAssertEqual(router.route(2, .read, handles: [30], expectsAnswer: true) { _ in true }, .unlikelyError, "no service there")
        XCTAssertEqual(router.route(3, .read, handles: [21], expectsAnswer: true) { $0 != self.lock.holder }, .unlikelyError, "a suspended app")
        XCTAssertEqual(router.route(4, .write, handles: [21], expectsAnswer: false) { _ in false }, .dropped)
        XCTAssertEqual(router.route(5, .write, handles: [21], expectsAnswer: false) { _ in true }, .app(lock))
        XCTAssertEqual(router.route(11, .write, handles: [21, 22], expectsAnswer: true) { _ in true }, .app(lock), "an Execute Write of one app's values")
        XCTAssertEqual(router.route(12, .write, handles: [21, 12], expectsAnswer: true) { _ in true }, .unlikelyError,
                       "an Execute Write across two apps' values: neither is handed the other's, nor settles them")
        XCTAssertEqual(router.route(13, .write, handles: [], expectsAnswer: true) { _ in true }, .unlikelyError, "a write of nothing")
        XCTAssertThrowsError(try router.answer(5, from: lock.holder, attError: 0), "a write without response awaits no answer")
    }

    func testAnAppThatGoesHasItsRequestsAnsweredForIt() throws {
        var router = router()
        _ = router.route(7, .write, handles: [11], expectsAnswer: true) { _ in true }
        _ = router.route(6, .read, handles: [13], expectsAnswer: true) { _ in true }
        _ = router.route(8, .read, handles: [21], expectsAnswer: true) { _ in true }
        let abandoned = router.abandon(thermostat.holder)
        XCTAssertEqual(abandoned.map(\.id), [6, 7])
        XCTAssertEqual(abandoned.map(\.request), [.read, .write])
        XCTAssertEqual(try router.answer(8, from: lock.holder, attError: 0), .read, "the other app's request stands")
    }

    func testAPreservedManagerTakesItsServicesAndRequestsAlong() throws {
        var router = router()
        _ = router.route(9, .read, handles: [10], expectsAnswer: true) { _ in true }
        router.rebind(thermostat.holder, to: .preserved(1))
        XCTAssertEqual(router.owner(of: 14), ManagerKey(.preserved(1), manager: 1))
        XCTAssertThrowsError(try router.answer(9, from: thermostat.holder, attError: 0))
        XCTAssertEqual(try router.answer(9, from: .preserved(1), attError: 0), .read)
    }

    func testServicesComeAndGoByOwner() {
        var router = router()
        XCTAssertTrue(router.owns(lock, handle: 22))
        XCTAssertFalse(router.owns(lock, handle: 12), "an app updates only its own values")
        XCTAssertNil(router.remove(start: 20, owner: thermostat), "not the thermostat's")
        XCTAssertEqual(router.remove(start: 20, owner: lock)?.range, 20...22)
        XCTAssertEqual(router.publishers, [thermostat.holder])
        XCTAssertEqual(router.removeAll { $0.owner == self.thermostat }.map(\.range), [10...14])
        XCTAssertTrue(router.services.isEmpty)
        router.publish(30...31, owner: lock)
        _ = router.route(10, .read, handles: [30], expectsAnswer: true) { _ in true }
        router.attdLost()
        XCTAssertNil(router.owner(of: 30))
        XCTAssertThrowsError(try router.answer(10, from: lock.holder, attError: 0), "attd's requests went with it")
    }
}
