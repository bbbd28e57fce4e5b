import BerylWire
import XCTest

final class PendingRequestsTests: XCTestCase {
    private func response(to id: UInt64, _ build: (inout Response) -> Void = { $0.ack = .init() }) -> Envelope {
        var response = Response()
        build(&response)
        return .response(response, to: id)
    }

    func testEachAnswerGoesOnceToTheRequestWaitingOnItsID() throws {
        var pending = PendingRequests<String>()
        let first = pending.add("first")
        let second = pending.add("second")
        XCTAssertEqual([first, second], [1, 2], "ids count from 1 per session")
        let answered = try XCTUnwrap(pending.answer(response(to: second)))
        XCTAssertEqual(answered.waiter, "second", "answers may come in any order")
        XCTAssertNil(pending.answer(response(to: second)), "a second answer to the same id finds nobody")
        XCTAssertNil(pending.answer(response(to: 99)), "nor does an answer to an id never asked")
        XCTAssertNil(pending.answer(.event(Event())), "an event answers nothing")
        XCTAssertEqual(pending.count, 1)
    }

    func testAnErrorResponseIsTheTypedRemoteError() throws {
        var pending = PendingRequests<Int>()
        let id = pending.add(7)
        let answered = try XCTUnwrap(pending.answer(response(to: id) {
            $0.error = .with { $0.code = .notFound; $0.message = "no such service"; $0.field = "start_handle"; $0.attError = 0x0A }
        }))
        guard case .failure(.remote(let code, let message, let field, let detail)) = answered.outcome else { return XCTFail("\(answered.outcome)") }
        XCTAssertEqual(code, .notFound)
        XCTAssertEqual(message, "no such service")
        XCTAssertEqual(field, "start_handle")
        XCTAssertEqual(detail.attError, 0x0A)
    }

    func testWhatStillWaitsWhenTheSessionEndsIsHandedBackOldestFirst() {
        var pending = PendingRequests<Int>()
        for waiter in 1...20 { _ = pending.add(waiter) }
        XCTAssertEqual(pending.cancel(5), 5, "a request that could not be sent waits no more")
        XCTAssertEqual(pending.removeAll(), Array(1...20).filter { $0 != 5 })
        XCTAssertEqual(pending.count, 0)
        XCTAssertEqual(pending.add(21), 21, "ids are never reused within a session")
    }
}
