import BerylCore
import BerylGAP
import BerylHCI
import BerylManager
import BerylStore
import Foundation
import XCTest

final class ConnectionBookTests: XCTestCase {
    let one = DeviceAddress("C0:00:00:00:00:01")!
    let two = DeviceAddress("C0:00:00:00:00:02/random")!

    /// A connection request never times out; several pending go through the filter accept list; a cancel is app-local.
    func testConnectionsAreSharedAndCancelsAreAppLocal() {
        var book = ConnectionBook()
        let app1 = ManagerKey(session: 1, manager: 1)
        let app2 = ManagerKey(session: 2, manager: 1)
        XCTAssertEqual(book.connect(app1, identifier: "P1", address: one).actions, [.connect(one)])
        XCTAssertEqual(book.connect(app2, identifier: "P1", address: one).actions, [], "the same attempt serves both")
        XCTAssertEqual(book.connect(app1, identifier: "P2", address: two).actions, [.cancelConnect], "a second peer: replan")
        XCTAssertEqual(book.connect(app1, identifier: "P2", address: two).actions, [], "one cancel at a time")
        XCTAssertEqual(book.attemptEnded(), [.connectAny([one, two])])
        let (holders, actions) = book.connected(identifier: "P1", handle: 0x40, address: one, isCentral: true)
        XCTAssertEqual(holders, [app1, app2])
        XCTAssertEqual(actions, [.connect(two)])
        XCTAssertEqual(book.cancel(app1, identifier: "P1").actions, [], "app 2 still holds the link")
        XCTAssertEqual(book.cancel(app2, identifier: "P1").actions, [.disconnect(handle: 0x40)])
        XCTAssertFalse(book.cancel(app2, identifier: "P1").wasHeld)
        XCTAssertEqual(book.cancel(app1, identifier: "P2").actions, [.cancelConnect])
        XCTAssertEqual(book.attemptEnded(), [], "nobody waits any more")
    }

    func testASessionThatGoesReleasesWhatItHeld() {
        var book = ConnectionBook()
        let app = ManagerKey(session: 7, manager: 3)
        _ = book.connect(app, identifier: "P1", address: one)
        _ = book.connected(identifier: "P1", handle: 0x41, address: one, isCentral: true)
        _ = book.connect(app, identifier: "P2", address: two)
        XCTAssertEqual(book.releaseAll(.session(7)), [.disconnect(handle: 0x41), .cancelConnect])
        XCTAssertEqual(book.disconnected(handle: 0x41)?.identifier, "P1")
        XCTAssertNil(book.disconnected(handle: 0x41))
    }

    /// A preserved manager's work is held by managerd under the manager's own id while its app is away, and handed
    /// back whole; a session with the same number is another holder (no session id doubles as a placeholder).
    func testAPreservedManagersLinksChangeHandsAndNeverMixWithASessionOfTheSameNumber() {
        var book = ConnectionBook()
        var scans = ScanCoordinator()
        let app = ManagerKey(session: 5, manager: 1)
        let stranger = ManagerKey(session: 9, manager: 1)
        _ = book.connect(app, identifier: "P1", address: one)
        _ = book.connected(identifier: "P1", handle: 0x42, address: one, isCentral: true)
        _ = book.connect(app, identifier: "P2", address: two)
        scans.start(app, ScanRequest(services: [], allowDuplicates: false, solicited: []))

        book.rebind(.session(5), to: .preserved(5))
        scans.rebind(.session(5), to: .preserved(5))
        XCTAssertEqual(book.held(by: ManagerKey(.preserved(5), manager: 1)).connected, ["P1"])
        XCTAssertEqual(book.releaseAll(.session(5)), [], "a new session 5 holds nothing of the preserved manager's")
        scans.stopAll(.session(5))
        XCTAssertEqual(scans.scanners, [ManagerKey(.preserved(5), manager: 1)])

        book.rebind(.preserved(5), to: .session(9))
        scans.rebind(.preserved(5), to: .session(9))
        XCTAssertEqual(book.held(by: stranger).connected, ["P1"])
        XCTAssertEqual(book.held(by: stranger).pending, ["P2"])
        XCTAssertEqual(scans.scanners, [stranger])
        XCTAssertEqual(book.releaseAll(.preserved(5)), [], "handed back, nothing left with managerd")
    }

    /// An app cancels and connects again before the link is down (found by SignedWriteTests): it is not handed the
    /// dying link, and the connection is made again once the old one has ended.
    func testAConnectWhileTheLinkGoesDownWaitsForANewLink() {
        var book = ConnectionBook()
        let app = ManagerKey(session: 1, manager: 1)
        _ = book.connect(app, identifier: "P1", address: one)
        _ = book.connected(identifier: "P1", handle: 0x40, address: one, isCentral: true)
        XCTAssertEqual(book.cancel(app, identifier: "P1").actions, [.disconnect(handle: 0x40)])
        let again = book.connect(app, identifier: "P1", address: one)
        XCTAssertFalse(again.alreadyConnected)
        XCTAssertEqual(again.actions, [], "no attempt while the peer is still linked")
        let ended = book.disconnected(handle: 0x40)
        XCTAssertEqual(ended?.holders, [])
        XCTAssertEqual(ended?.actions, [.connect(one)])
        XCTAssertEqual(book.connected(identifier: "P1", handle: 0x41, address: one, isCentral: true).holders, [app])
    }

    func testARemoteCentralsLinkIsNotDisconnectedByCancels() {
        var book = ConnectionBook()
        let (holders, _) = book.connected(identifier: "C1", handle: 0x42, address: one, isCentral: false)
        XCTAssertTrue(holders.isEmpty)
        XCTAssertEqual(book.releaseAll(.session(1)), [])
        XCTAssertEqual(book.link(for: "C1")?.isCentral, false)
    }

    /// Each action as the controller takes it; the own address type goes with every connection (LE Create Connection's
    /// Own_Address_Type, the 13th parameter octet, Core Vol 4 Part E §7.8.12), through the accept list too.
    func testActionsBecomeTheirHCICommands() {
        let single = ConnectionBook.Action.connect(one).commands(ownAddressType: 1)
        XCTAssertEqual(single.map(\.opcode), [0x200D])
        XCTAssertEqual(single[0].parameters[12], 1)
        XCTAssertEqual(single[0].parameters[4], 0, "no accept list for one peer")

        let any = ConnectionBook.Action.connectAny([one, two]).commands(ownAddressType: 1)
        XCTAssertEqual(any.map(\.opcode), [0x2010, 0x2011, 0x2011, 0x200D], "clear, add each, connect")
        XCTAssertEqual(any[2].parameters.first, 1, "the second peer's address is random")
        XCTAssertEqual(any[3].parameters[4], 1, "through the accept list")
        XCTAssertEqual(any[3].parameters[12], 1, "as the stack's identity, not 00:00:00:00:00:00")

        XCTAssertEqual(ConnectionBook.Action.cancelConnect.commands(ownAddressType: 0).map(\.opcode), [0x200E])
        XCTAssertEqual(ConnectionBook.Action.disconnect(handle: 0x41).commands(ownAddressType: 0).map(\.parameters), [[0x41, 0x00, 0x13]])
    }
}
