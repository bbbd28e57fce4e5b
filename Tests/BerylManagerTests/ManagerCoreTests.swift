import BerylCore
import BerylManager
import Foundation
import XCTest

/// managerd's managers as one value, scripted without processes: how a manager's work (scans, links, services,
/// advertising) moves when its app goes, comes back, quits, or is read back from its record, and what is asked of
/// the shell. Each test names the fault-suite or process-test failure it stands for.
final class ManagerCoreTests: XCTestCase {
    private typealias Core = ManagerCore<String>
    private struct BindFailed: Error {}
    private let lock = DeviceAddress("C0:FF:EE:00:00:01/random")!
    private let thermo = PreservedState.PublishedService(definition: ServiceDefinition(uuid: BluetoothUUID(0x181A), primary: true),
                                                         handles: 10...12, valueHandles: [12])
    private func name(_ identifier: String) -> String { identifier == "L" ? "Lock" : "" }

    /// The user quit the app of this session (`beryl app quit`), and the session closed.
    private func quit(_ session: UInt64, in core: inout Core) -> [Core.Output] {
        core.sessions[session, default: .init()].quitting = true
        return core.sessionClosed(session, poweredOn: true, at: .zero)
    }

    /// A central app (session 5) that opted into restoration, holds a link to the lock (0x40) and scans.
    private func centralWithALink() throws -> (Core, PreservedManager) {
        var core = Core()
        guard case .made(let made) = core.restoration.bind(appID: "lock", restoreID: "door", role: .central, session: 5) else {
            XCTFail("a first Hello with a restore identifier makes the manager")
            throw BindFailed()
        }
        _ = core.connections.controller(poweredOn: true)
        _ = core.connections.connect(made.key, identifier: "L", address: lock)
        _ = core.connections.linkUp(handle: 0x40, identifier: "L", address: lock, isCentral: true)
        core.scans.start(made.key, ScanRequest(services: [BluetoothUUID(0xD00D)]))
        return (core, made)
    }

    /// A peripheral app (session 7) that opted into restoration and published a service at 10...12 and advertises.
    private func peripheralWithAService() throws -> (Core, PreservedManager) {
        var core = Core()
        guard case .made(let made) = core.restoration.bind(appID: "thermo", restoreID: "t", role: .peripheral, session: 7) else {
            XCTFail("a first Hello with a restore identifier makes the manager")
            throw BindFailed()
        }
        core.router.publish(10...12, owner: made.key)
        core.serviceSpecs[10] = thermo
        core.advertisers[made.key] = Advertiser(localName: "Thermo", serviceUUIDs: [BluetoothUUID(0x181A)])
        return (core, made)
    }

    func testAnAppThatGoesLeavesItsWorkHeldUnderThePreservedManagersOwnId() throws {
        var (core, made) = try centralWithALink()
        XCTAssertEqual(core.sessionClosed(5, poweredOn: true, at: .zero), [.persist(preservedID: made.id)],
                       "nothing is released: no disconnect, no scan change; the record is written once the work has moved")
        let held = ManagerKey(.preserved(made.id), manager: 1)
        XCTAssertEqual(core.book.link(for: "L")?.holders, [held])
        XCTAssertNotNil(core.scans.request(for: held))
        XCTAssertNil(core.scans.request(for: made.key))
        let preserved = try XCTUnwrap(core.restoration.manager(id: made.id))
        XCTAssertEqual(core.snapshot(preserved, name: name).central?.links.map(\.identifier), ["L"], "the record has the link it held")
    }

    func testAUserQuitForgetsTheRecordAndReleasesEverything() throws {
        var (core, made) = try centralWithALink()
        let outputs = quit(5, in: &core)
        XCTAssertEqual(outputs.first, .forget(appID: "lock", restoreID: "door", role: .central))
        XCTAssertTrue(outputs.contains(.connections(.controller(.disconnect(handle: 0x40)))), "the link it alone held ends: \(outputs)")
        XCTAssertTrue(outputs.contains(.scanningChanged))
        XCTAssertFalse(outputs.contains(.persist(preservedID: made.id)), "a quit app's record is not written again")
        XCTAssertTrue(core.restoration.managers.isEmpty)
        XCTAssertFalse(core.scans.isScanning)
    }

    func testDiscardingAManagerWhoseAppIsAwayReleasesItsWork() throws {
        var (core, made) = try centralWithALink()
        _ = core.sessionClosed(5, poweredOn: true, at: .zero)
        let outputs = core.discard(made.id)
        XCTAssertEqual(outputs.first, .forget(appID: "lock", restoreID: "door", role: .central))
        XCTAssertTrue(outputs.contains(.connections(.controller(.disconnect(handle: 0x40)))), "\(outputs)")
        XCTAssertEqual(core.discard(made.id), [], "discarded once")
    }

    func testTheAppBackGetsItsWorkAndWhatWasHeldInOrder() throws {
        var (core, made) = try centralWithALink()
        _ = core.sessionClosed(5, poweredOn: true, at: .zero)
        _ = core.restoration.hold("disconnected L", replacing: nil, for: made.id)
        _ = core.restoration.hold("connected L", replacing: nil, for: made.id)
        let restored = try XCTUnwrap(core.restore(made.id, into: 9, name: name))
        XCTAssertEqual(restored.queued, ["disconnected L", "connected L"])
        XCTAssertEqual(restored.state.central?.links, [PreservedState.Link(identifier: "L", pending: false, name: "Lock")],
                       "willRestoreState carries the link and its name")
        XCTAssertEqual(core.book.link(for: "L")?.holders, [ManagerKey(session: 9, manager: 1)])
        XCTAssertNotNil(core.scans.request(for: ManagerKey(session: 9, manager: 1)))
    }

    /// The fault suite's `kill-all × connecting` (seed 18001): a manager read back from its record must hold its
    /// request in the connection book before anything writes its record again, or the record loses the link and the
    /// relaunched door lock never connects.
    func testAResumedCentralWantsItsLinksAgainAndItsRecordKeepsThem() throws {
        var core = Core()
        let record = PreservedState(central: .init(scan: ScanRequest(), links: [.init(identifier: "L", pending: false), .init(identifier: "gone", pending: true)]))
        let preserved = core.resume(appID: "lock", restoreID: "door", role: .central, from: record) { $0 == "L" ? self.lock : nil }
        XCTAssertEqual(core.snapshot(preserved, name: name).central?.links.map { "\($0.identifier) pending \($0.pending)" }, ["L pending true"],
                       "the link it had is awaited; a peripheral the store forgot is not")
        XCTAssertNotNil(core.scans.request(for: preserved.key), "its scan runs again")
        XCTAssertEqual(core.connections.controller(poweredOn: true), [.controller(.connect(lock))], "the controller is asked once it is on")
    }

    /// The door lock: the link of a manager whose app is away drops, and it is asked for again instead of told.
    func testALinkOfAnAwayAppDropsAndIsAskedForAgain() throws {
        var (core, made) = try centralWithALink()
        _ = core.sessionClosed(5, poweredOn: true, at: .zero)
        let down = core.linkDown(handle: 0x40, reason: 0x08)
        XCTAssertEqual(down.first, .connections(.event(.requestedAgain(ManagerKey(.preserved(made.id), manager: 1), identifier: "L", reason: 0x08))))
        let restoredApp = try XCTUnwrap(core.restore(made.id, into: 9, name: name))
        XCTAssertEqual(restoredApp.state.central?.links.map(\.pending), [true], "still wanted")
    }

    func testALiveAppHearsItsLinkDrop() throws {
        var (core, made) = try centralWithALink()
        let down = core.linkDown(handle: 0x40, reason: 0x08)
        XCTAssertEqual(down, [.connections(.event(.disconnected(made.key, identifier: "L", reason: 0x08))), .persist(preservedID: made.id),
                                      .advertisingChanged], "the record no longer lists the link: the app asks again, or not")
    }

    /// The fault suite's `kill-attd`: services of a manager whose app is away are published again for it when attd
    /// is back; a running app's are its own to add again.
    func testAttdLostKeepsAwayManagersServicesForRepublication() throws {
        var (core, made) = try peripheralWithAService()
        _ = core.sessionClosed(7, poweredOn: true, at: .zero)
        let away = ManagerKey(.preserved(made.id), manager: 1)
        core.subscribers = [.init(central: "C", valueHandle: 12, notify: true, indicate: false, maximumUpdateLength: 20)]
        _ = core.attdLost()
        XCTAssertEqual(core.pendingRepublish, [away: [thermo]])
        XCTAssertTrue(core.router.services.isEmpty)
        XCTAssertTrue(core.serviceSpecs.isEmpty)
        XCTAssertTrue(core.subscribers.isEmpty, "the subscriptions went with attd's database")
        let preserved = try XCTUnwrap(core.restoration.manager(id: made.id))
        XCTAssertEqual(core.snapshot(preserved, name: name).peripheral?.services, [thermo], "a record written meanwhile keeps the service")
    }

    /// The fault suite's "a peripheral app killed after the controller reset and before it added its services again
    /// came back with nothing published": the stash becomes managerd's to publish, advertising included.
    func testAnAppGoneBeforeItPublishedAgainHasItsServicesPublishedForIt() throws {
        var (core, made) = try peripheralWithAService()
        let cleared = core.controllerLost { $0 == .session(7) }
        XCTAssertEqual(cleared, [.unpublish(startHandle: 10), .persist(preservedID: made.id)])
        XCTAssertTrue(core.advertisers.isEmpty, "advertising stopped with the controller")
        let outputs = core.sessionClosed(7, poweredOn: true, at: .zero)
        XCTAssertEqual(outputs, [.republish, .advertisingChanged, .persist(preservedID: made.id)])
        let away = ManagerKey(.preserved(made.id), manager: 1)
        XCTAssertEqual(core.pendingRepublish, [away: [thermo]])
        XCTAssertEqual(core.advertisers[away], Advertiser(localName: "Thermo", serviceUUIDs: [BluetoothUUID(0x181A)]))
    }

    func testTheControllerLostLeavesAnAwayManagersServicesInPlace() throws {
        var (core, _) = try peripheralWithAService()
        _ = core.sessionClosed(7, poweredOn: true, at: .zero)
        XCTAssertEqual(core.controllerLost { $0.sessionID != nil }, [], "no one runs to add them again")
        XCTAssertEqual(core.router.services.count, 1)
    }

    /// The app is gone for good: a remote central's read it owed is answered for it (Unlikely Error, by the shell).
    func testAGoneAppsOwedAnswersAreGivenForIt() throws {
        var (core, made) = try peripheralWithAService()
        XCTAssertEqual(core.router.route(41, .read, handles: [12], expectsAnswer: true) { _ in true }, .app(made.key))
        let outputs = quit(7, in: &core)
        XCTAssertTrue(outputs.contains(.answerAbandoned(id: 41, isRead: true)), "\(outputs)")
        XCTAssertTrue(outputs.contains(.unpublish(startHandle: 10)))
        XCTAssertTrue(outputs.contains(.advertisingChanged))
        XCTAssertTrue(core.serviceSpecs.isEmpty)
    }

    func testASessionWithoutRestorationReleasesItsWork() {
        var core = Core()
        let app = ManagerKey(session: 3, manager: 1)
        _ = core.connections.controller(poweredOn: true)
        _ = core.connections.connect(app, identifier: "L", address: lock)
        XCTAssertEqual(core.sessionClosed(3, poweredOn: true, at: .zero), [.scanningChanged, .connections(.controller(.cancelConnect))],
                       "the attempt no one else waits for is cancelled")
    }

    // MARK: The peripheral role

    /// The fault suite's "a service managerd published again for a preserved manager could land beside the app's own
    /// copy": an app that clears its services takes back the republication managerd was to make for it.
    func testAnAppClearingItsServicesDropsWhatWasToBePublishedForIt() throws {
        var (core, made) = try peripheralWithAService()
        core.pendingRepublish[made.key] = [thermo]
        XCTAssertEqual(core.removeAllServices(of: made.key), [.unpublish(startHandle: 10), .persist(preservedID: made.id)])
        XCTAssertTrue(core.pendingRepublish.isEmpty)
        XCTAssertTrue(core.serviceSpecs.isEmpty)
        XCTAssertThrowsError(try core.removeService(start: 10, owner: made.key)) { XCTAssertEqual($0 as? Core.PublicationRefusal, .notPublished) }
    }

    /// A republication makes the record the manager's own only once every service is back; one at a time, the stash
    /// still stands for the rest.
    func testARepublicationIsTheRecordOnlyWhenWhole() throws {
        var core = Core()
        let humidity = PreservedState.PublishedService(definition: ServiceDefinition(uuid: BluetoothUUID(0x181B), primary: true), handles: 20...22)
        let preserved = core.resume(appID: "thermo", restoreID: "t", role: .peripheral,
                                    from: PreservedState(peripheral: .init(services: [thermo, humidity]))) { _ in nil }
        let republications = core.takeRepublications()
        XCTAssertEqual(republications.map(\.key), [preserved.key])
        XCTAssertEqual(republications.first?.services, [thermo, humidity])
        XCTAssertTrue(core.takeRepublications().isEmpty, "each is asked of attd once")
        let landed = PreservedState.PublishedService(definition: thermo.definition, handles: 30...32, valueHandles: [32])
        XCTAssertEqual(core.republished(landed, at: 30...32, for: republications[0]), [.persist(preservedID: preserved.id)])
        let half = try XCTUnwrap(core.restoration.manager(id: preserved.id))
        XCTAssertEqual(core.snapshot(half, name: name).peripheral?.services, [thermo, humidity], "the stash stands until the whole is back")
        let humidityLanded = PreservedState.PublishedService(definition: humidity.definition, handles: 40...42)
        _ = core.republished(humidityLanded, at: 40...42, for: republications[0])
        let whole = try XCTUnwrap(core.restoration.manager(id: preserved.id))
        XCTAssertNil(whole.unrepublished)
        XCTAssertEqual(core.snapshot(whole, name: name).peripheral?.services, [landed, humidityLanded], "the record has where they landed")
        XCTAssertEqual(core.router.owner(of: 41), preserved.key)
    }

    /// The fault suite's "a service managerd published again could land beside the app's own copy": one that lands
    /// after the app came back and cleared its services is withdrawn; one that lands after it came back without
    /// clearing them is its session's.
    func testARepublicationLandingAfterTheAppIsBackIsItsOrIsWithdrawn() throws {
        var core = Core()
        let preserved = core.resume(appID: "thermo", restoreID: "t", role: .peripheral,
                                    from: PreservedState(peripheral: .init(services: [thermo]))) { _ in nil }
        let under = core.takeRepublications()
        _ = core.restore(preserved.id, into: 9, name: name)
        let landed = PreservedState.PublishedService(definition: thermo.definition, handles: 30...32, valueHandles: [32])
        XCTAssertEqual(core.republished(landed, at: 30...32, for: under[0]), [.persist(preservedID: preserved.id)])
        XCTAssertEqual(core.router.owner(of: 31), ManagerKey(session: 9, manager: 1), "the app is back: the service is its session's")

        var other = Core()
        let second = other.resume(appID: "thermo", restoreID: "t", role: .peripheral,
                                  from: PreservedState(peripheral: .init(services: [thermo]))) { _ in nil }
        let pending = other.takeRepublications()
        _ = other.restore(second.id, into: 9, name: name)
        _ = other.removeAllServices(of: ManagerKey(session: 9, manager: 1))
        XCTAssertEqual(other.republished(landed, at: 30...32, for: pending[0]), [.unpublish(startHandle: 30)], "cleared meanwhile: withdrawn")
        XCTAssertNil(other.router.owner(of: 31))
    }

    /// attd's bearers go with it: after it is lost, a link has no bearer (GATT requests wait for the new attd's) and
    /// no MTU but the default until the new one reports its own.
    func testAttdLostTakesItsBearersAndTheirMTUs() {
        var core = Core()
        let running: (ManagerHolder) -> Bool = { _ in true }
        _ = core.controllerChanged(.poweredOn, isRunning: running)
        _ = core.attd(attached: true, isRunning: running)
        _ = core.bearer(0x40, mtu: 247)
        XCTAssertEqual(core.maximumUpdateLength(on: 0x40), 244)
        _ = core.attd(attached: false, isRunning: running)
        XCTAssertNil(core.attMTUs[0x40])
        XCTAssertEqual(core.maximumUpdateLength(on: 0x40), 20)
    }

    /// An app's addService answered by attd after its session closed, or after the stack left poweredOn (which
    /// cleared the app's services), is withdrawn: no one knows of it, and it would stay in attd's database.
    func testAServicePublishedForASessionThatWentIsWithdrawn() {
        var core = Core()
        let running: (ManagerHolder) -> Bool = { _ in true }
        _ = core.controllerChanged(.poweredOn, isRunning: running)
        _ = core.attd(attached: true, isRunning: running)
        core.sessions[7] = .init()
        let owner = ManagerKey(session: 7, manager: 1)
        let live = core.appServicePublished(thermo, at: 10...12, owner: owner)
        XCTAssertTrue(live.kept)
        XCTAssertEqual(live.outputs, [], "a live session's: routed, no record to write")
        XCTAssertEqual(core.router.owner(of: 11), owner)

        core.sessions[8] = .init()
        _ = core.sessionClosed(8, poweredOn: true, at: .zero)
        let gone = core.appServicePublished(thermo, at: 20...22, owner: ManagerKey(session: 8, manager: 1))
        XCTAssertFalse(gone.kept)
        XCTAssertEqual(gone.outputs, [.unpublish(startHandle: 20)])
        XCTAssertNil(core.router.owner(of: 21))

        _ = core.attd(attached: false, isRunning: running)
        let late = core.appServicePublished(thermo, at: 30...32, owner: owner)
        XCTAssertFalse(late.kept, "the stack left poweredOn meanwhile: the app is refused, and adds it again at poweredOn")
        XCTAssertEqual(late.outputs, [.unpublish(startHandle: 30)])
        XCTAssertNil(core.router.owner(of: 31))
    }

    /// updateValue(_:for:onSubscribedCentrals:): every subscribed central, the named ones connected to this stack as
    /// its peripheral, or no one.
    func testAnUpdateGoesToTheLinksOfTheCentralsItNames() {
        var core = Core()
        _ = core.linkUp(handle: 0x40, identifier: "C1", address: lock, isCentral: false)
        _ = core.linkUp(handle: 0x41, identifier: "P1", address: DeviceAddress("C0:00:00:00:00:09")!, isCentral: true)
        XCTAssertEqual(core.links(ofCentrals: []), [], "none named: every subscribed central")
        XCTAssertEqual(core.links(ofCentrals: ["c1", "GONE"]), [0x40], "identifiers in either case; one not connected is skipped")
        XCTAssertNil(core.links(ofCentrals: ["P1"]), "a peripheral this stack is central to is no subscribed central")
        XCTAssertNil(core.links(ofCentrals: ["GONE"]))
    }

    func testASubscriptionIsKeptInTheOwnersRecordUntilItEnds() throws {
        var (core, made) = try peripheralWithAService()
        let subscribed = PreservedState.Subscription(central: "C", valueHandle: 12, notify: true, indicate: false, maximumUpdateLength: 20)
        XCTAssertEqual(core.subscriptionChanged(subscribed), [.persist(preservedID: made.id)])
        XCTAssertEqual(core.subscriptionChanged(.init(central: "C", valueHandle: 99, notify: true, indicate: false, maximumUpdateLength: 20)), [],
                       "no one owns that handle")
        XCTAssertEqual(core.subscriptionChanged(.init(central: "", valueHandle: 12, notify: true, indicate: false, maximumUpdateLength: 20)), [],
                       "late news of a link that ended is not a subscriber")
        let preserved = try XCTUnwrap(core.restoration.manager(id: made.id))
        XCTAssertEqual(core.snapshot(preserved, name: name).peripheral?.subscriptions, [subscribed])
        _ = core.subscriptionChanged(.init(central: "C", valueHandle: 12, notify: false, indicate: false, maximumUpdateLength: 20))
        XCTAssertEqual(core.snapshot(preserved, name: name).peripheral?.subscriptions, [])
    }

    func testAdvertisingIsTheRecordsAndStoppingItIsToo() throws {
        var (core, made) = try peripheralWithAService()
        XCTAssertEqual(core.stopAdvertising(for: made.key), [.advertisingChanged, .persist(preservedID: made.id)])
        let preserved = try XCTUnwrap(core.restoration.manager(id: made.id))
        XCTAssertNil(core.snapshot(preserved, name: name).peripheral?.advertising)
        XCTAssertEqual(core.startAdvertising(Advertiser(localName: "T", serviceUUIDs: []), for: made.key), [.persist(preservedID: made.id)])
        XCTAssertEqual(core.snapshot(preserved, name: name).peripheral?.advertising, .init(localName: "T", serviceUUIDs: []))
    }

    // MARK: Links and their watchers

    /// registerForConnectionEvents: a watcher of a service hears of links to peripherals that advertised it or were
    /// found to have it; what was found goes with the link.
    func testConnectionEventsReachWatchersOfThePeripheralOrOfAServiceItOffers() throws {
        var core = Core()
        let byService = ManagerKey(session: 2, manager: 1), byPeripheral = ManagerKey(session: 3, manager: 1), other = ManagerKey(session: 4, manager: 1)
        core.connectionInterests.register(byService, .init(peripherals: [], services: [BluetoothUUID(0xD00D)]))
        core.connectionInterests.register(byPeripheral, .init(peripherals: ["L"], services: []))
        core.connectionInterests.register(other, .init(peripherals: [], services: [BluetoothUUID(0x180D)]))
        _ = core.connections.controller(poweredOn: true)
        XCTAssertEqual(core.linkUp(handle: 0x40, identifier: "L", address: lock, isCentral: false),
                       [.connectionEvent(byPeripheral, .peerConnected, identifier: "L"), .advertisingChanged],
                       "nothing known offers 0xD00D yet; a remote central's link restarts advertising")
        core.discoveredServices["L"] = [BluetoothUUID(0xD00D)]
        let down = core.linkDown(handle: 0x40, reason: 0x13)
        XCTAssertEqual(down, [.connectionEvent(byService, .peerDisconnected, identifier: "L"),
                                      .connectionEvent(byPeripheral, .peerDisconnected, identifier: "L"), .advertisingChanged])
        XCTAssertNil(core.discoveredServices["L"], "what was found goes with the link")
        _ = core.sessionClosed(3, poweredOn: true, at: .zero)
        XCTAssertTrue(core.linkUp(handle: 0x41, identifier: "L", address: lock, isCentral: true).isEmpty, "a closed session's interest goes with it")
    }

    /// The door lock's subscriptions end with its link: a preserved manager asking for its link again no longer
    /// restores subscriptions it had on it, and its record says so at once.
    func testAnAwayManagersDroppedLinkForgetsItsSubscriptions() throws {
        var (core, made) = try centralWithALink()
        _ = core.restoration.update(heldBy: made.holder) { $0.notifying["L"] = [12] }
        _ = core.sessionClosed(5, poweredOn: true, at: .zero)
        let down = core.linkDown(handle: 0x40, reason: 0x08)
        XCTAssertTrue(down.contains(.persist(preservedID: made.id)), "\(down)")
        XCTAssertEqual(core.restoration.manager(id: made.id)?.notifying["L"], nil)
    }

    // MARK: Apps' lifecycles over their sessions

    private func appSession(_ id: UInt64, of appID: String, in core: inout Core) {
        core.sessions[id, default: .init()].appID = appID
        core.sessions[id]?.saidHello = true
    }

    /// A suspended foreground-only app hears nothing: its scan pauses, its events wait (the latest discovery of each
    /// peripheral only) and reach it in order when it is back in the foreground.
    func testASuspendedAppsScanPausesAndItsEventsWaitForItsReturn() {
        var core = Core()
        appSession(3, of: "finder", in: &core)
        core.scans.start(ManagerKey(session: 3, manager: 1), ScanRequest())
        XCTAssertEqual(core.admit("state poweredOn", as: .news, replacing: nil, for: 3, at: .zero), .deliver(wake: 0))
        let (change, outputs) = core.setLifecycle("finder", .suspended, at: .seconds(1))
        XCTAssertEqual(change.current, .suspended)
        XCTAssertEqual(outputs, [.scanningChanged, .advertisingChanged])
        XCTAssertFalse(core.scans.isScanning, "a suspended app's scan does not run")
        XCTAssertEqual(core.admit("discovered A rssi -70", as: .work, replacing: .discovery(peripheral: "A"), for: 3, at: .seconds(2)), .hold)
        XCTAssertEqual(core.admit("ready to write B 1", as: .news, replacing: .readyToWrite(peripheral: "B"), for: 3, at: .seconds(2)), .hold)
        XCTAssertEqual(core.admit("connected B", as: .work, replacing: nil, for: 3, at: .seconds(2)), .hold)
        XCTAssertEqual(core.admit("ready to write B 2", as: .news, replacing: .readyToWrite(peripheral: "B"), for: 3, at: .seconds(2)), .hold)
        XCTAssertEqual(core.admit("discovered A rssi -40", as: .work, replacing: .discovery(peripheral: "A"), for: 3, at: .seconds(3)), .hold)
        XCTAssertNil(core.admit("welcome", as: .news, replacing: nil, for: 9, at: .seconds(3)), "a session that is no app's is not held")
        let back = core.setLifecycle("finder", .foreground, at: .seconds(4))
        // Room to write comes back once, after what came before it: the app's canSendWriteWithoutResponse turns true.
        XCTAssertEqual(back.outputs, [.scanningChanged, .advertisingChanged,
                                      .deliver(session: 3, events: ["connected B", "ready to write B 2", "discovered A rssi -40"])])
        XCTAssertTrue(core.scans.isScanning)
        XCTAssertEqual(core.setLifecycle("finder", .foreground, at: .seconds(5)).outputs, [.scanningChanged, .advertisingChanged], "delivered once")
    }

    /// A preserved manager whose app is away works as a background app (its scan slow, its duplicates coalesced);
    /// a scan of a foreground app among the scanners keeps the controller's scan fast.
    func testAScanIsSlowOnlyWhenEveryScannerIsInTheBackground() throws {
        var (core, made) = try centralWithALink()
        let manifest = ManifestFile(path: "/etc/beryl/apps/lock.json", data: Data(#"{"id": "lock", "user": "doorlock", "backgroundModes": ["bluetooth-central"]}"#.utf8))
        core.catalog = AppCatalog(files: [manifest], lookup: { _ in Account(uid: 1001, gid: 1001) })
        XCTAssertEqual(core.rules(for: "lock")?.modes, [.central])
        appSession(5, of: "lock", in: &core)
        XCTAssertFalse(core.scanIsSlow, "the lock app is in the foreground")
        _ = core.sessionClosed(5, poweredOn: true, at: .zero)
        XCTAssertEqual(core.policy(for: .preserved(made.id)), .of(.notRunning, modes: [.central]))
        XCTAssertTrue(core.scanIsSlow, "only the preserved manager scans")
        appSession(8, of: "finder", in: &core)
        core.scans.start(ManagerKey(session: 8, manager: 1), ScanRequest())
        XCTAssertFalse(core.scanIsSlow)
        XCTAssertNil(core.sessions[5], "the closed session is forgotten")
        XCTAssertEqual(core.sessions(of: "finder"), [8])
    }

    // MARK: The stack's state

    /// Apps see poweredOn only when the controller is on and attd is attached; a lost attd reads as resetting, the
    /// running apps' services and advertising are cleared (they add them again on poweredOn) and a preserved
    /// manager's are kept to be published again for it.
    func testPoweredOnNeedsTheControllerAndAttdAndLeavingItClearsTheRunningApps() throws {
        var (core, made) = try peripheralWithAService()
        let running: (ManagerHolder) -> Bool = { $0 == made.holder }
        let lockKey = ManagerKey(session: 3, manager: 1)
        _ = core.connections.connect(lockKey, identifier: "L", address: lock)
        XCTAssertEqual(core.controllerChanged(.poweredOn, isRunning: running), [.stateChanged(.resetting)], "attd is not there yet")
        XCTAssertEqual(core.attd(attached: true, isRunning: running), [.stateChanged(.poweredOn), .connections(.controller(.connect(lock)))],
                       "the pending link is asked for once the stack is on")
        XCTAssertEqual(core.attd(attached: true, isRunning: running), [], "no change, nothing said")

        let lost = core.attd(attached: false, isRunning: running)
        XCTAssertEqual(lost.last, .stateChanged(.resetting))
        XCTAssertTrue(lost.contains(.persist(preservedID: made.id)), "the running app's record keeps the stash: \(lost)")
        XCTAssertTrue(core.router.services.isEmpty && core.advertisers.isEmpty, "its database went with attd; advertising stopped")
        let stashed = try XCTUnwrap(core.restoration.manager(id: made.id)?.unrepublished)
        XCTAssertEqual(stashed.services, [thermo])
        XCTAssertEqual(core.state, .resetting)

        XCTAssertEqual(core.controllerChanged(.poweredOff, isRunning: running), [.stateChanged(.poweredOff)])
        XCTAssertEqual(core.attd(attached: true, isRunning: running), [], "attd back, the controller still off")
        XCTAssertEqual(core.controllerChanged(.poweredOn, isRunning: running), [.stateChanged(.poweredOn), .connections(.controller(.connect(lock)))])
    }

    /// An app gone before it published again while the controller is off: its stash waits to be published, but
    /// nothing is asked of attd or the controller until the stack is on.
    func testAnAppGoneWhileTheStackIsOffHasItsServicesPublishedOnlyOnceItIsOn() throws {
        var (core, made) = try peripheralWithAService()
        let running: (ManagerHolder) -> Bool = { $0 == .session(7) }
        _ = core.attd(attached: true, isRunning: running)
        _ = core.controllerChanged(.poweredOn, isRunning: running)
        XCTAssertEqual(core.controllerChanged(.poweredOff, isRunning: running), [.unpublish(startHandle: 10), .persist(preservedID: made.id), .stateChanged(.poweredOff)])
        XCTAssertEqual(core.sessionClosed(7, poweredOn: false, at: .zero), [.persist(preservedID: made.id)], "nothing asked of a stack that is off")
        XCTAssertEqual(core.pendingRepublish, [ManagerKey(.preserved(made.id), manager: 1): [thermo]], "kept for when the stack is on")
        XCTAssertEqual(core.controllerChanged(.poweredOn, isRunning: running), [.stateChanged(.poweredOn), .republish])
    }

    /// A remote central's read reaches the owner only if it can answer now: a live session whose app is not
    /// suspended, or a preserved manager whose app is launched to answer; otherwise Unlikely Error at once (a write
    /// without response is dropped), as Core Bluetooth refuses a suspended app's dynamic reads.
    func testARemoteRequestGoesToAnOwnerThatCanAnswerNow() throws {
        var (core, made) = try peripheralWithAService()
        core.sessions[7, default: .init()].appID = "thermo"
        XCTAssertEqual(core.routeRemoteRequest(1, .read, handles: [12], expectsAnswer: true) { _ in true }, .app(made.key))
        XCTAssertEqual(core.routeRemoteRequest(2, .read, handles: [12], expectsAnswer: true) { _ in false }, .unlikelyError, "its session is gone")
        XCTAssertEqual(core.routeRemoteRequest(3, .read, handles: [99], expectsAnswer: true) { _ in true }, .unlikelyError, "no one owns the handle")
        _ = core.setLifecycle("thermo", .suspended, at: .zero)
        XCTAssertEqual(core.routeRemoteRequest(4, .read, handles: [12], expectsAnswer: true) { _ in true }, .unlikelyError, "a suspended app")
        XCTAssertEqual(core.routeRemoteRequest(5, .write, handles: [12], expectsAnswer: false) { _ in true }, .dropped)
        _ = core.sessionClosed(7, poweredOn: true, at: .zero)
        XCTAssertEqual(core.routeRemoteRequest(6, .read, handles: [12], expectsAnswer: true) { _ in false }, .app(ManagerKey(.preserved(made.id), manager: 1)),
                       "the preserved manager's app is launched to answer")
        XCTAssertThrowsError(try core.router.answer(4, from: .session(7), attError: 0), "a refused request is owed no answer")
        XCTAssertNoThrow(try core.router.answer(1, from: .preserved(made.id), attError: 0), "the first is still owed, by the manager that now holds the work")
    }
}
