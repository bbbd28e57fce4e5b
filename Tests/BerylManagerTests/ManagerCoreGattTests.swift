import BerylCore
import BerylManager
import XCTest

/// An app's GATT requests as ManagerCore takes them: the wait for the link's bearer (hcid tells managerd and attd of a
/// link in either order), and a subscription another manager holds answered without asking the peripheral.
final class ManagerCoreGattTests: XCTestCase {
    private typealias Core = ManagerCore<String>
    private let lock = DeviceAddress("C0:FF:EE:00:00:01/random")!
    private let app = ManagerKey(session: 5, manager: 1)
    private let other = ManagerKey(session: 6, manager: 1)

    /// Two apps hold the link to "L" (handle 0x40); attd has reported no bearer yet.
    private func twoHolders() -> Core {
        var core = Core()
        _ = core.controllerChanged(.poweredOn, isRunning: { _ in true })
        _ = core.attd(attached: true, isRunning: { _ in true })
        _ = core.connect(app, to: "L", at: lock, options: .init())
        _ = core.connect(other, to: "L", at: lock, options: .init())
        _ = core.linkUp(handle: 0x40, identifier: "L", address: lock, isCentral: true)
        return core
    }

    private func token(_ step: Core.GattStep) -> UInt64? {
        if case .waitForBearer(let token) = step { token } else { nil }
    }

    // An app that reads in didConnect, before attd has the link: the request waits and goes on, in order, when the
    // bearer opens — not refused "no link".
    func testARequestBeforeTheBearerWaitsAndGoesOnWhenItOpens() throws {
        var core = twoHolders()
        let first = try XCTUnwrap(token(core.gattAsked(.other, on: 0x40, identifier: "L", by: app.holder)))
        let second = try XCTUnwrap(token(core.gattAsked(.other, on: 0x40, identifier: "L", by: other.holder)))
        XCTAssertNotEqual(first, second)
        XCTAssertEqual(core.bearer(0x41, mtu: 23), [], "another link's bearer releases nothing")
        XCTAssertEqual(core.bearer(0x40, mtu: 247), [.gattResumed(token: first), .gattResumed(token: second)])
        XCTAssertEqual(core.bearer(0x40, mtu: 185), [], "an MTU change after it: nothing waits any more")
        guard case .forward = core.gattAsked(.other, on: 0x40, identifier: "L", by: app.holder) else { return XCTFail("the bearer is open") }
    }

    // The link goes before its bearer opened: what waited is asked again at once (and fails, the link gone) rather
    // than waiting for a bearer that never comes — or for the next link that gets the same handle.
    func testALinkThatGoesReleasesWhatWaitedForItsBearer() throws {
        var core = twoHolders()
        let waiting = try XCTUnwrap(token(core.gattAsked(.other, on: 0x40, identifier: "L", by: app.holder)))
        let down = core.linkDown(handle: 0x40, reason: 0x08)
        XCTAssertEqual(down.last, .gattResumed(token: waiting), "after the holders hear the link go: \(down)")
        XCTAssertTrue(down.contains(.connections(.event(.disconnected(app, identifier: "L", reason: 0x08)))))
        XCTAssertNil(core.link(to: "L", heldBy: app.holder), "asked again, the request finds no link")
        XCTAssertEqual(core.linkDown(handle: 0x40, reason: 0x08), [], "nothing waits, and no link is known")
    }

    // attd restarts with requests waiting: they are asked again when it goes (and fail, attd unreachable), not left
    // for the new attd's bearer.
    func testAttdLostReleasesEveryWaitingRequest() throws {
        var core = twoHolders()
        let onL = try XCTUnwrap(token(core.gattAsked(.other, on: 0x40, identifier: "L", by: app.holder)))
        let onM = try XCTUnwrap(token(core.gattAsked(.other, on: 0x41, identifier: "M", by: app.holder)))
        let lost = core.attd(attached: false, isRunning: { _ in true })
        XCTAssertEqual(Array(lost.prefix(2)), [.gattResumed(token: onL), .gattResumed(token: onM)])
        XCTAssertTrue(lost.contains(.stateChanged(.resetting)), "and the apps hear attd go as resetting")
        XCTAssertEqual(core.bearer(0x40, mtu: 23), [], "the new attd's bearer finds nothing waiting")
    }

    // Two apps subscribe to one value: the peripheral's descriptor is written for the first; the second is answered
    // at once, and a failed write leaves only its asker out.
    func testASecondSubscriberIsAnsweredWithoutWritingTheDescriptor() {
        var core = twoHolders()
        _ = core.bearer(0x40, mtu: 23)
        let subscribe = GattAsk.setNotify(enable: true, valueHandle: 3, cccdHandle: 4)
        guard case .forward = core.gattAsked(subscribe, on: 0x40, identifier: "L", by: app.holder) else { return XCTFail("the first writes the descriptor") }
        XCTAssertEqual(core.gattAnswered(subscribe, succeeded: true, on: 0x40, identifier: "L", by: app.holder), [])
        guard case .answered = core.gattAsked(subscribe, on: 0x40, identifier: "L", by: other.holder) else { return XCTFail("the second is answered at once") }
        XCTAssertEqual(core.audience(ofNotification: 3, onLink: 0x40)?.holders, [app.holder, other.holder])
        XCTAssertEqual(core.gattAnswered(.other, succeeded: true, on: 0x40, identifier: "L", by: app.holder), [], "a read changes nothing kept")
    }

    // A descriptor handle ATT cannot name goes to attd, which refuses it; the refusal leaves the asker out of a
    // subscription it held, as any failed descriptor write does.
    func testASubscriptionWithNoNameableDescriptorIsAskedOfAttd() {
        var core = twoHolders()
        _ = core.bearer(0x40, mtu: 23)
        let subscribe = GattAsk.setNotify(enable: true, valueHandle: 3, cccdHandle: 4)
        _ = core.gattAsked(subscribe, on: 0x40, identifier: "L", by: app.holder)
        _ = core.gattAnswered(subscribe, succeeded: true, on: 0x40, identifier: "L", by: app.holder)
        let malformed = GattAsk.setNotify(enable: true, valueHandle: 3, cccdHandle: nil)
        guard case .forward = core.gattAsked(malformed, on: 0x40, identifier: "L", by: other.holder) else { return XCTFail("attd answers it") }
        _ = core.gattAnswered(malformed, succeeded: false, on: 0x40, identifier: "L", by: other.holder)
        XCTAssertEqual(core.audience(ofNotification: 3, onLink: 0x40)?.holders, [app.holder])
    }

    func testAFailedDescriptorWriteLeavesTheAskerOut() {
        var core = twoHolders()
        _ = core.bearer(0x40, mtu: 23)
        let subscribe = GattAsk.setNotify(enable: true, valueHandle: 3, cccdHandle: 4)
        guard case .forward = core.gattAsked(subscribe, on: 0x40, identifier: "L", by: app.holder) else { return XCTFail("writes the descriptor") }
        _ = core.gattAnswered(subscribe, succeeded: false, on: 0x40, identifier: "L", by: app.holder)
        guard case .forward = core.gattAsked(subscribe, on: 0x40, identifier: "L", by: other.holder) else {
            return XCTFail("no subscription stands after the failed write: the next asker writes the descriptor")
        }
    }
}
