import BerylCore
import BerylManager
import XCTest

/// The peripheral role's answers that depend on the managers' state: a remote central's subscription as its value's
/// owner hears and keeps it, whose pairing an app may answer, and which link is a central's.
final class ManagerCorePeripheralTests: XCTestCase {
    private typealias Core = ManagerCore<String>
    private let centralAddress = DeviceAddress("C0:FF:EE:00:00:02/random")!
    private let lockAddress = DeviceAddress("C0:FF:EE:00:00:01/random")!
    private let thermo = ManagerKey(session: 7, manager: 1)

    /// Session 7 publishes 10...12 and restores as "t"; a remote central "C" is connected on 0x41 with ATT_MTU 185.
    private func publisherWithACentral() -> (Core, PreservedManager?) {
        var core = Core()
        let made: PreservedManager? = if case .made(let made) = core.restoration.bind(appID: "thermo", restoreID: "t", role: .peripheral, session: 7) {
            made
        } else { nil }
        core.sessions[7, default: .init()].appID = "thermo"
        core.router.publish(10...12, owner: thermo)
        _ = core.bearer(0x41, mtu: 185)
        _ = core.linkUp(handle: 0x41, identifier: "C", address: centralAddress, isCentral: false)
        return (core, made)
    }

    func testASubscriptionGoesToTheValuesOwnerWithTheCentralAndIsRecorded() throws {
        var (core, made) = publisherWithACentral()
        let preserved = try XCTUnwrap(made)
        let routed = try XCTUnwrap(core.subscriptionRouted(ReportedSubscription(link: 0x41, valueHandle: 12, notify: true, indicate: false)))
        XCTAssertEqual(routed.owner, thermo)
        XCTAssertEqual(routed.subscription, PreservedState.Subscription(central: "C", valueHandle: 12, notify: true, indicate: false, maximumUpdateLength: 182))
        XCTAssertEqual(routed.outputs, [.persist(preservedID: preserved.id)], "willRestoreState lists the subscribed central")
        XCTAssertEqual(core.snapshot(preserved, name: { _ in "" }).peripheral?.subscriptions, [routed.subscription])

        let off = try XCTUnwrap(core.subscriptionRouted(ReportedSubscription(link: 0x41, valueHandle: 12, notify: false, indicate: false)))
        XCTAssertEqual(off.outputs, [.persist(preservedID: preserved.id)])
        XCTAssertEqual(core.snapshot(preserved, name: { _ in "" }).peripheral?.subscriptions, [], "unsubscribed: out of the record")
        XCTAssertNil(core.subscriptionRouted(ReportedSubscription(link: 0x41, valueHandle: 30, notify: true, indicate: false)), "no one owns handle 30")
    }

    // attd tells of a link before any subscription on it, so a report on a link managerd does not have is one it
    // ended itself when hcid went (attd's report crossed that): stale, not held for the handle's next link.
    func testASubscriptionOnALinkManagerdEndedIsStale() throws {
        var (core, _) = publisherWithACentral()
        _ = core.bearer(0x42, mtu: 23)
        _ = core.linkUp(handle: 0x42, identifier: "D", address: lockAddress, isCentral: false)
        let report = ReportedSubscription(link: 0x42, valueHandle: 11, notify: false, indicate: true)
        XCTAssertEqual(core.subscriptionRouted(report)?.subscription.central, "D")
        _ = core.linkDown(handle: 0x42, reason: 0x16, stackFailed: true)
        XCTAssertNil(core.subscriptionRouted(report), "the link is gone: stale")
        let next = core.linkUp(handle: 0x42, identifier: "E", address: lockAddress, isCentral: false)
        XCTAssertEqual(next, [.advertisingChanged], "nothing of the ended link's is given to the handle's next one")
    }

    // A remote central's read reaches its owner's app named as the app knows the central, with the link's longest
    // update; one no app can answer is refused with Unlikely Error, and a write without response no app takes is dropped.
    func testARemoteRequestReachesItsOwnerWithTheCentralOrIsRefused() {
        var (core, _) = publisherWithACentral()
        XCTAssertEqual(core.remoteRequestRouted(1, .read, onLink: 0x41, handles: [12], expectsAnswer: true, isLive: { $0 == 7 }),
                       .toApp(thermo, central: "C", maximumUpdateLength: 182))
        XCTAssertEqual(core.remoteRequestRouted(2, .write, onLink: 0x41, handles: [11, 12], expectsAnswer: true, isLive: { $0 == 7 }),
                       .toApp(thermo, central: "C", maximumUpdateLength: 182), "an Execute Write of one owner's values")
        XCTAssertEqual(core.remoteRequestRouted(3, .read, onLink: 0x41, handles: [30], expectsAnswer: true, isLive: { $0 == 7 }),
                       .refuse(attError: 0x0E), "no one owns handle 30")
        XCTAssertEqual(core.remoteRequestRouted(4, .write, onLink: 0x41, handles: [30], expectsAnswer: false, isLive: { $0 == 7 }), .drop)
        XCTAssertEqual(core.remoteRequestRouted(5, .read, onLink: 0x41, handles: [12], expectsAnswer: true, isLive: { _ in false }),
                       .refuse(attError: 0x0E), "the session is gone and the preserved manager's app is not away")
        _ = core.bearer(0x43, mtu: 23)
        XCTAssertEqual(core.remoteRequestRouted(6, .read, onLink: 0x43, handles: [12], expectsAnswer: true, isLive: { $0 == 7 }),
                       .toApp(thermo, central: "", maximumUpdateLength: 20), "a link managerd has not heard of yet names no central")
        XCTAssertNoThrow(try core.router.answer(1, from: .session(7), attError: 0))
        XCTAssertThrowsError(try core.router.answer(3, from: .session(7), attError: 0), "a refused request is owed no answer")
    }

    // Only an app that hears a link's pairing answers it: not another app, nor anyone on a lab's link.
    func testOnlyTheAppThatHeardThePromptAnswersIt() {
        let (core, _) = publisherWithACentral()
        XCTAssertEqual(core.pairingLink(with: "C", answeredBy: 7, isLabLink: { _ in false }), 0x41, "a publisher hears a remote central's pairing")
        XCTAssertNil(core.pairingLink(with: "C", answeredBy: 8, isLabLink: { _ in false }), "another session")
        XCTAssertNil(core.pairingLink(with: "C", answeredBy: 7, isLabLink: { $0 == 0x41 }), "the lab's link")
        XCTAssertNil(core.pairingLink(with: "X", answeredBy: 7, isLabLink: { _ in false }), "no link with X")
    }

    // setDesiredConnectionLatency(_:for:) names a central: a link where this stack is central is not one.
    func testOnlyALinkWhereThisStackIsPeripheralIsACentrals() {
        var (core, _) = publisherWithACentral()
        _ = core.connections.controller(poweredOn: true)
        _ = core.connect(ManagerKey(session: 5, manager: 1), to: "L", at: lockAddress, options: .init())
        _ = core.linkUp(handle: 0x40, identifier: "L", address: lockAddress, isCentral: true)
        XCTAssertEqual(core.link(toCentral: "C")?.handle, 0x41)
        XCTAssertNil(core.link(toCentral: "L"), "a peripheral this stack connected to")
        XCTAssertNil(core.link(toCentral: "X"))
    }
}
