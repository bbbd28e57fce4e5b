import BerylCore
import BerylManager
import XCTest

/// managerd attaches to an attd that kept its links (managerd restarted under it).
final class ManagerCoreDaemonsTests: XCTestCase {
    private typealias Core = ManagerCore<String>
    private let lock = DeviceAddress("C0:FF:EE:00:00:01/random")!
    private let stranger = DeviceAddress("C0:FF:EE:00:00:09/random")!

    /// An app's link to the lock as its central (`central`), and a remote central's link to this stack (`peripheral`).
    private func coreWithTwoLinks(central: UInt16, peripheral: UInt16) -> Core {
        var core = Core()
        _ = core.controllerChanged(.poweredOn, isRunning: { _ in true })
        _ = core.connect(ManagerKey(session: 5, manager: 1), to: "L", at: lock, options: .init())
        _ = core.linkUp(handle: central, identifier: "L", address: lock, isCentral: true)
        _ = core.linkUp(handle: peripheral, identifier: "C", address: stranger, isCentral: false)
        return core
    }

    // Fault suite, kill -9 of managerd alone: attd and hcid keep the links. The one managerd knows (a preserved
    // manager's, resumed from its record) is not taken again; the one it does not is given back to be taken as if it
    // had just come up; every link's holders count their writes afresh; a request that waited goes on.
    func testAnAttdThatKeptItsLinksGivesBackTheUnknownOnesAndResetsWriteCounts() throws {
        var core = Core()
        _ = core.controllerChanged(.poweredOn, isRunning: { _ in true })
        let app = ManagerKey(session: 5, manager: 1)
        _ = core.connect(app, to: "L", at: lock, options: .init())
        _ = core.linkUp(handle: 0x40, identifier: "L", address: lock, isCentral: true)
        guard case .waitForBearer(let token) = core.gattAsked(.other, on: 0x40, identifier: "L", by: app.holder) else {
            return XCTFail("no bearer yet: the request waits")
        }
        let (outputs, unknown, ended) = core.attdBearers([
            OpenBearer(link: 0x40, mtu: 247, peer: lock, isCentral: true),
            OpenBearer(link: 0x41, mtu: 23, peer: stranger, isCentral: false),
            OpenBearer(link: 0x42, mtu: 23, peer: nil, isCentral: false),
        ], complete: true)
        XCTAssertEqual(outputs, [.gattResumed(token: token), .writesReadyAfresh(link: 0x40), .writesReadyAfresh(link: 0x41), .writesReadyAfresh(link: 0x42)])
        XCTAssertEqual(unknown.map(\.link), [0x41], "known links are not taken twice; a peer that is no address cannot be taken")
        XCTAssertEqual(ended, [], "every link managerd knows is listed")
        XCTAssertEqual(core.maximumUpdateLength(on: 0x40), 244, "the kept bearer's MTU")
    }

    // Fault suite, kill -9 of attd: a link that ended while attd was away was heard ending by no one. The new attd's
    // whole list lacks it (and the lab's link too), so it ended; a list made before attd had hcid's links proves
    // nothing.
    func testALinkMissingFromANewAttdsWholeListEndedWhileItWasAway() {
        var core = coreWithTwoLinks(central: 0x40, peripheral: 0x41)
        XCTAssertEqual(core.attdBearers([], complete: false, alsoKnown: [0x45]).endedLinks, [], "attd has not taken hcid's links yet")
        let kept = OpenBearer(link: 0x41, mtu: 23, peer: stranger, isCentral: false)
        XCTAssertEqual(core.attdBearers([kept], complete: true, alsoKnown: [0x45]).endedLinks, [0x40, 0x45])
    }

    // attd tells of each link as its bearer opens: new, one managerd has (a new attd took it over), or a handle that
    // a new peer has now (the link managerd knew ended while attd was away).
    func testABearerOpeningIsANewLinkOnlyWhenManagerdLacksIt() {
        var core = Core()
        _ = core.controllerChanged(.poweredOn, isRunning: { _ in true })
        XCTAssertEqual(core.news(of: OpenBearer(link: 0x40, mtu: 23, peer: stranger, isCentral: false)), .linkUp)
        _ = core.linkUp(handle: 0x40, identifier: "C", address: stranger, isCentral: false)
        XCTAssertEqual(core.news(of: OpenBearer(link: 0x40, mtu: 23, peer: stranger, isCentral: false)), .bearerOnly)
        XCTAssertEqual(core.news(of: OpenBearer(link: 0x40, mtu: 23, peer: lock, isCentral: false)), .replacesEndedLink)
    }

    // hcid's successor resets the controller: every link ends, the apps' and the lab's, once each.
    func testEveryLinkEndsWithHcid() {
        let core = coreWithTwoLinks(central: 0x41, peripheral: 0x40)
        XCTAssertEqual(core.linksEndingWithHcid(alsoEnding: [0x41, 0x45]), [0x40, 0x41, 0x45])
    }

    // UpdateValueTests: an app whose updateValue returned false waits for ReadyToUpdate; below poweredOn its library
    // empties its queue and counts from zero, and attd must forget what it counted for every welcomed session too.
    func testLeavingPoweredOnMakesAttdForgetEveryWelcomedSessionsUpdates() {
        var core = Core()
        let running: (ManagerHolder) -> Bool = { _ in true }
        core.sessions[3, default: .init()].saidHello = true
        core.sessions[4, default: .init()].saidHello = true
        core.sessions[9] = .init()  // connected, no Hello yet: it hears no state and counted nothing
        _ = core.controllerChanged(.poweredOn, isRunning: running)
        XCTAssertEqual(core.attd(attached: true, isRunning: running), [.stateChanged(.poweredOn)], "reaching poweredOn forgets nothing")
        let lost = core.attd(attached: false, isRunning: running)
        XCTAssertEqual(Array(lost.suffix(3)), [.stateChanged(.resetting), .forgetUpdates(session: 3), .forgetUpdates(session: 4)])
        XCTAssertEqual(core.controllerChanged(.poweredOff, isRunning: running), [.stateChanged(.poweredOff), .forgetUpdates(session: 3), .forgetUpdates(session: 4)])
    }
}
