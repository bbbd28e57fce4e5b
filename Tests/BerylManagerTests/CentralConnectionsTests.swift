import BerylCore
import BerylManager
import XCTest

/// The central role's connection rules, on virtual time: what apps hear and what the controller is asked.
final class CentralConnectionsTests: XCTestCase {
    private let lock = DeviceAddress("C0:FF:EE:00:00:01/random")!
    private let app = ManagerKey(session: 1, manager: 1)
    private let other = ManagerKey(session: 2, manager: 1)

    private func poweredOn() -> CentralConnections {
        var connections = CentralConnections()
        XCTAssertEqual(connections.controller(poweredOn: true), [])
        return connections
    }

    func testNothingIsAskedOfAControllerThatIsNotPoweredOnAndThePendingSetIsAskedForWhenItIs() {
        var connections = CentralConnections()
        XCTAssertEqual(connections.connect(app, identifier: "L", address: lock), [], "the request waits, it does not fail")
        XCTAssertEqual(connections.controller(poweredOn: true), [.controller(.connect(lock))])
        XCTAssertEqual(connections.controller(poweredOn: false), [])
        XCTAssertEqual(connections.controller(poweredOn: true), [.controller(.connect(lock))], "a reset controller forgot the attempt")
    }

    func testASecondManagerAskingForALiveLinkIsConnectedAtOnce() {
        var connections = poweredOn()
        _ = connections.connect(app, identifier: "L", address: lock)
        XCTAssertEqual(connections.linkUp(handle: 0x40, identifier: "L", address: lock, isCentral: true), [.event(.connected(app, identifier: "L"))])
        XCTAssertEqual(connections.connect(other, identifier: "L", address: lock), [.event(.connected(other, identifier: "L"))])
    }

    /// Core Bluetooth: cancelPeripheralConnection is the app's own, reported as a disconnection whether or not the link stays.
    func testACancelIsReportedToTheAppThatAskedAndTheLinkStaysForOthers() throws {
        var connections = poweredOn()
        _ = connections.connect(app, identifier: "L", address: lock)
        _ = connections.connect(other, identifier: "L", address: lock)
        _ = connections.linkUp(handle: 0x40, identifier: "L", address: lock, isCentral: true)
        XCTAssertEqual(try connections.cancel(app, identifier: "L"), [.event(.disconnected(app, identifier: "L", reason: 0x16))], "the link stays up for the other")
        XCTAssertEqual(try connections.cancel(other, identifier: "L"),
                       [.controller(.disconnect(handle: 0x40)), .event(.disconnected(other, identifier: "L", reason: 0x16))])
        XCTAssertThrowsError(try connections.cancel(other, identifier: "L")) { XCTAssertEqual($0 as? CentralConnections.Refusal, .notHeld) }
        _ = connections.connect(app, identifier: "M", address: DeviceAddress("C0:FF:EE:00:00:02/random")!)
        XCTAssertEqual(try connections.cancel(app, identifier: "M").last, .event(.disconnected(app, identifier: "M", reason: 0)), "only waiting: no reason")
    }

    /// The guide's door lock: the preserved manager of an app that is not running keeps wanting the lock when its link
    /// drops; the running app hears the disconnection.
    func testALinkLostByAnAbsentPreservedManagerIsRequestedAgainWithoutAnEvent() throws {
        var connections = poweredOn()
        let preserved = ManagerKey(.preserved(7), manager: 1)
        _ = connections.connect(preserved, identifier: "L", address: lock)
        _ = connections.connect(app, identifier: "L", address: lock)
        _ = connections.linkUp(handle: 0x40, identifier: "L", address: lock, isCentral: true)
        let (identifier, outputs) = try XCTUnwrap(connections.linkDown(handle: 0x40, reason: 0x08) { $0 == .preserved(7) })
        XCTAssertEqual(identifier, "L")
        XCTAssertEqual(outputs, [
            .event(.disconnected(app, identifier: "L", reason: 0x08)),
            .event(.requestedAgain(preserved, identifier: "L", reason: 0x08)),
            .controller(.connect(lock)),
        ])
        XCTAssertEqual(connections.book.pendingIdentifiers, ["L"])
        XCTAssertEqual(connections.linkUp(handle: 0x41, identifier: "L", address: lock, isCentral: true), [.event(.connected(preserved, identifier: "L"))])
        XCTAssertNil(connections.linkDown(handle: 0x40, reason: 0x08) { _ in true }, "a link already gone")
    }

    func testARefusedAttemptIsMadeAgainAfterTheDelay() {
        var connections = poweredOn()
        XCTAssertEqual(connections.connect(app, identifier: "L", address: lock), [.controller(.connect(lock))])
        connections.attemptRefused(at: .seconds(10))
        XCTAssertEqual(connections.nextDeadline, .seconds(11))
        XCTAssertEqual(connections.tick(at: .milliseconds(10_999)), [], "a timer that fires early asks nothing")
        XCTAssertEqual(connections.tick(at: .seconds(11)), [.controller(.connect(lock))])
        XCTAssertNil(connections.nextDeadline)
        connections.attemptRefused(at: .seconds(20))
        XCTAssertEqual(connections.attemptEnded(), [.controller(.connect(lock))], "an attempt ended meanwhile replans at once")
        XCTAssertEqual(connections.tick(at: .seconds(21)), [], "and the retry is not made twice")
    }

    // Through the filter accept list too: a refused attempt to connect whichever shows up first is made again, else
    // the book waits for ever on an attempt the controller never made.
    func testARefusedAttemptThroughTheAcceptListIsMadeAgain() {
        var connections = poweredOn()
        let latch = DeviceAddress("C0:FF:EE:00:00:02/random")!
        _ = connections.connect(app, identifier: "L", address: lock)
        XCTAssertEqual(connections.connect(other, identifier: "M", address: latch), [.controller(.cancelConnect)], "the single attempt gives way")
        let both = connections.attemptEnded()
        guard case .controller(let any)? = both.last, case .connectAny = any else { return XCTFail("two peers: the accept list, got \(both)") }
        XCTAssertFalse(connections.answered(any, status: 0, at: .seconds(5)), "taken: nothing to retry")
        XCTAssertNil(connections.nextDeadline)
        XCTAssertTrue(connections.answered(any, status: 0x0C, at: .seconds(5)), "Command Disallowed")
        XCTAssertEqual(connections.tick(at: .seconds(6)), [.controller(any)])
        XCTAssertFalse(connections.answered(.disconnect(handle: 0x40), status: 0x02, at: .seconds(7)), "a refused disconnect is no attempt")
        XCTAssertFalse(connections.answered(.cancelConnect, status: 0x0C, at: .seconds(7)))
        XCTAssertNil(connections.nextDeadline)
    }

    func testAHolderThatGoesTakesItsLinksDownUnlessOthersHoldThem() {
        var connections = poweredOn()
        _ = connections.connect(app, identifier: "L", address: lock)
        _ = connections.linkUp(handle: 0x40, identifier: "L", address: lock, isCentral: true)
        XCTAssertEqual(connections.releaseAll(app.holder), [.controller(.disconnect(handle: 0x40))])
    }
}
