import BerylCore
import BerylManager
import XCTest

/// Apps on one stack share a link to a peripheral, and the peripheral keeps one Client Characteristic Configuration
/// for it (Core Vol 3 Part G §3.3.3.3): the descriptor is written by the first app to subscribe and cleared when the
/// last lets go. Before, one app's setNotifyValue(false) silenced every other app, and an app that went left the
/// peripheral notifying a stack nobody listened on.
final class RemoteSubscriptionsTests: XCTestCase {
    private typealias Core = ManagerCore<String>
    private let lock = DeviceAddress("C0:FF:EE:00:00:01/random")!
    private let value = RemoteSubscriptions.Value(link: 0x40, valueHandle: 12)

    /// Sessions 3 and 4, neither preserved, both connected to the lock over one link.
    private func twoAppsOnOneLink() -> Core {
        var core = Core()
        _ = core.connections.controller(poweredOn: true)
        for session: UInt64 in [3, 4] { _ = core.connections.connect(ManagerKey(session: session, manager: 1), identifier: "L", address: lock) }
        _ = core.linkUp(handle: 0x40, identifier: "L", address: lock, isCentral: true)
        return core
    }

    private struct BindFailed: Error {}

    /// Session 5's central manager, which opted into restoration, connecting to the lock.
    private func restorableCentralConnecting() throws -> (Core, PreservedManager) {
        var core = Core()
        guard case .made(let made) = core.restoration.bind(appID: "lock", restoreID: "door", role: .central, session: 5) else {
            XCTFail("a first Hello with a restore identifier makes the manager")
            throw BindFailed()
        }
        _ = core.connections.controller(poweredOn: true)
        _ = core.connections.connect(made.key, identifier: "L", address: lock)
        return (core, made)
    }

    func testTheFirstSubscriberWritesTheDescriptorAndTheLastToLetGoClearsIt() {
        var core = twoAppsOnOneLink()
        XCTAssertTrue(core.remoteSubscriptions.request(true, value, cccdHandle: 13, by: .session(3)), "the first writes")
        XCTAssertTrue(core.remoteSubscriptions.request(true, value, cccdHandle: 13, by: .session(4)),
                      "one asking before the first write was answered writes too (that write may fail)")
        core.remoteSubscriptions.subscribed(value)
        XCTAssertEqual(core.remoteSubscriptions.listeners(of: value), [.session(3), .session(4)])
        XCTAssertFalse(core.remoteSubscriptions.request(true, value, cccdHandle: 13, by: .session(4)), "once written, the others are answered at once")
        XCTAssertFalse(core.remoteSubscriptions.request(false, value, cccdHandle: 13, by: .session(3)), "one letting go leaves the other's")
        XCTAssertEqual(core.remoteSubscriptions.holders(of: value), [.session(4)])
        XCTAssertFalse(core.remoteSubscriptions.request(false, value, cccdHandle: 13, by: .session(3)), "not subscribed: still nothing to clear")
        XCTAssertTrue(core.remoteSubscriptions.request(false, value, cccdHandle: 13, by: .session(4)), "the last clears")
        XCTAssertTrue(core.remoteSubscriptions.request(false, value, cccdHandle: 13, by: .session(4)),
                      "nobody known to be subscribed (managerd restarted under the link): the descriptor is written as asked")
    }

    /// managerd restarted under a link hcid and attd kept: a resumed record's subscriptions on it stand, so another
    /// app letting go does not clear the descriptor, and the preserved manager keeps hearing the values.
    func testAResumedRecordsSubscriptionsStandOnTheLinkItTakesBack() throws {
        var (core, _) = try restorableCentralConnecting()
        _ = core.connections.connect(ManagerKey(session: 6, manager: 1), identifier: "L", address: lock)
        _ = core.notifyChanged(12, enabled: true, on: "L", by: .session(5))
        XCTAssertNil(core.remoteSubscriptions.listeners(of: value), "no link yet")
        _ = core.linkUp(handle: 0x40, identifier: "L", address: lock, isCentral: true)
        XCTAssertEqual(core.remoteSubscriptions.listeners(of: value), [.session(5)])
        XCTAssertFalse(core.remoteSubscriptions.request(false, value, cccdHandle: 13, by: .session(6)), "the other app was never subscribed")
        XCTAssertFalse(core.remoteSubscriptions.request(true, value, cccdHandle: 13, by: .session(6)), "written already")
    }

    /// What managerd asks of the core for setNotifyValue and a notified value: the write or the answer at once, and who
    /// hears the values.
    func testSetNotifyValueAsManagerdAsksAndWhoHearsTheValues() {
        var core = twoAppsOnOneLink()
        XCTAssertEqual(core.audience(ofNotification: 12, onLink: 0x40)?.holders, [.session(3), .session(4)], "nobody known subscribed: every holder")
        XCTAssertNil(core.notifyRequested(true, valueHandle: 12, cccdHandle: 13, on: 0x40, identifier: "L", by: .session(3)), "the first writes")
        XCTAssertEqual(core.notifyWritten(true, succeeded: true, valueHandle: 12, on: 0x40, identifier: "L", by: .session(3)), [])
        XCTAssertEqual(core.audience(ofNotification: 12, onLink: 0x40)?.holders, [.session(3)], "only the subscribed app hears the values")
        XCTAssertEqual(core.notifyRequested(true, valueHandle: 12, cccdHandle: 13, on: 0x40, identifier: "L", by: .session(4)), [], "answered at once")
        XCTAssertEqual(core.notifyRequested(false, valueHandle: 12, cccdHandle: 13, on: 0x40, identifier: "L", by: .session(3)), [])
        XCTAssertEqual(core.audience(ofNotification: 12, onLink: 0x40)?.holders, [.session(4)])
        XCTAssertNil(core.notifyRequested(true, valueHandle: 20, cccdHandle: 21, on: 0x40, identifier: "L", by: .session(3)))
        _ = core.notifyWritten(true, succeeded: false, valueHandle: 20, on: 0x40, identifier: "L", by: .session(3))
        XCTAssertNil(core.remoteSubscriptions.listeners(of: .init(link: 0x40, valueHandle: 20)), "a failed write leaves nobody subscribed")
    }

    func testAFailedDescriptorWriteLeavesTheAppUnsubscribed() {
        var core = twoAppsOnOneLink()
        XCTAssertTrue(core.remoteSubscriptions.request(true, value, cccdHandle: 13, by: .session(3)))
        core.remoteSubscriptions.subscribeFailed(value, by: .session(3))
        XCTAssertTrue(core.remoteSubscriptions.request(true, value, cccdHandle: 13, by: .session(4)), "the next asks the peripheral again")
    }

    func testAnAppThatGoesClearsWhatOnlyItWantedAndTheLinkStaysForTheOther() {
        var core = twoAppsOnOneLink()
        let other = RemoteSubscriptions.Value(link: 0x40, valueHandle: 20)
        _ = core.remoteSubscriptions.request(true, value, cccdHandle: 13, by: .session(3))
        _ = core.remoteSubscriptions.request(true, value, cccdHandle: 13, by: .session(4))
        _ = core.remoteSubscriptions.request(true, other, cccdHandle: 21, by: .session(4))
        let outputs = core.sessionClosed(4, poweredOn: true, at: .zero)
        XCTAssertEqual(outputs.first, .unsubscribe(.init(value: other, cccdHandle: 21)), "before the link is let go of: \(outputs)")
        XCTAssertFalse(outputs.contains(.unsubscribe(.init(value: value, cccdHandle: 13))), "session 3 still wants it")
        XCTAssertFalse(outputs.contains(.connections(.controller(.disconnect(handle: 0x40)))), "session 3 keeps the link")
        XCTAssertEqual(core.remoteSubscriptions.holders(of: value), [.session(3)])
    }

    func testCancellingAConnectionEndsThatAppsSubscriptionsOnIt() throws {
        var core = twoAppsOnOneLink()
        _ = core.remoteSubscriptions.request(true, value, cccdHandle: 13, by: .session(4))
        let outputs = try core.cancelConnection(ManagerKey(session: 4, manager: 1), to: "L")
        XCTAssertTrue(outputs.contains(.unsubscribe(.init(value: value, cccdHandle: 13))), "\(outputs)")
        XCTAssertEqual(core.remoteSubscriptions.holders(of: value), [])
    }

    func testAPreservedManagerKeepsItsSubscriptionsAndItsAppGetsThemBack() throws {
        var (core, made) = try restorableCentralConnecting()
        _ = core.linkUp(handle: 0x40, identifier: "L", address: lock, isCentral: true)
        _ = core.remoteSubscriptions.request(true, value, cccdHandle: 13, by: .session(5))
        let outputs = core.sessionClosed(5, poweredOn: true, at: .zero)
        XCTAssertFalse(outputs.contains { if case .unsubscribe = $0 { true } else { false } }, "the peripheral keeps notifying the preserved manager: \(outputs)")
        let preserved = try XCTUnwrap(core.restoration.manager(id: made.id))
        XCTAssertEqual(core.remoteSubscriptions.holders(of: value), [preserved.holder])
        _ = core.restore(made.id, into: 9) { _ in "" }
        XCTAssertEqual(core.remoteSubscriptions.holders(of: value), [.session(9)])
    }

    /// The peripheral side: a subscribed remote central that disconnects unsubscribes, as Core Bluetooth tells a
    /// peripheral manager (before, the app never heard, and its record kept the central subscribed).
    func testARemoteCentralThatDisconnectsUnsubscribesFromTheOwnersValues() {
        var core = Core()
        let owner = ManagerKey(session: 7, manager: 1)
        core.router.publish(10...12, owner: owner)
        let central = DeviceAddress("C0:FF:EE:00:00:02/random")!
        _ = core.linkUp(handle: 0x41, identifier: "C", address: central, isCentral: false)
        _ = core.subscriptionChanged(.init(central: "C", valueHandle: 12, notify: true, indicate: false, maximumUpdateLength: 20))
        _ = core.subscriptionChanged(.init(central: "D", valueHandle: 12, notify: true, indicate: false, maximumUpdateLength: 20))
        let outputs = core.linkDown(handle: 0x41, reason: 0x13)
        XCTAssertTrue(outputs.contains(.subscriberGone(owner: owner, .init(central: "C", valueHandle: 12, notify: false, indicate: false,
                                                                             maximumUpdateLength: 20))), "\(outputs)")
        XCTAssertEqual(core.subscribers.map(\.central), ["D"], "another central's subscription stays")
    }

    func testALinkThatEndsTakesItsSubscriptionsWithIt() {
        var core = twoAppsOnOneLink()
        _ = core.remoteSubscriptions.request(true, value, cccdHandle: 13, by: .session(3))
        _ = core.linkDown(handle: 0x40, reason: 0x13)
        XCTAssertEqual(core.remoteSubscriptions.holders(of: value), [])
        XCTAssertEqual(core.sessionClosed(3, poweredOn: true, at: .zero).filter { if case .unsubscribe = $0 { true } else { false } }, [])
    }
}
