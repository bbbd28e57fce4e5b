import BerylCore
import BerylManager
import XCTest

/// Core Bluetooth's state preservation and restoration as managerd keeps it, scripted without processes: which
/// manager a Hello restores, what is held for an app that is not running, and what a record stores.
final class RestorationCoreTests: XCTestCase {
    private typealias Event = String

    func testAPreservedManagerHasItsOwnIdNeverASessions() {
        var restoration = Restoration<Event>()
        let session: UInt64 = 1 << 50
        guard case .made(let made) = restoration.bind(appID: "lock", restoreID: "door", role: .central, session: session) else {
            return XCTFail("a first Hello makes the manager")
        }
        XCTAssertEqual(made.holder, .session(session), "while the app runs, its session holds the work")
        XCTAssertEqual(made.id, 1)
        let preserved = restoration.preserve(session: session)
        XCTAssertEqual(preserved?.holder, .preserved(1), "gone: held under its own id, not a placeholder session id")
        XCTAssertEqual(preserved?.live, false)
        XCTAssertNil(restoration.manager(heldBy: .session(session)))
        XCTAssertEqual(restoration.resume(appID: "thermo", restoreID: "t", role: .peripheral).holder, .preserved(2),
                       "a manager read back after a restart counts on from the same ids")
    }

    func testARestoreIdentifierInUseIsRefusedAndRolesAreApart() {
        var restoration = Restoration<Event>()
        _ = restoration.bind(appID: "lock", restoreID: "door", role: .central, session: 7)
        XCTAssertEqual(restoration.bind(appID: "lock", restoreID: "door", role: .central, session: 8), .inUse)
        guard case .made(let peripheral) = restoration.bind(appID: "lock", restoreID: "door", role: .peripheral, session: 8) else {
            return XCTFail("Core Bluetooth keeps central and peripheral restore identifiers apart")
        }
        XCTAssertEqual(peripheral.role, .peripheral)
        guard case .made = restoration.bind(appID: "other", restoreID: "door", role: .central, session: 9) else {
            return XCTFail("another app's identifier is its own")
        }
    }

    func testEventsHeldForAnAbsentAppComeBackInOrderWithOneDiscoveryPerPeripheral() throws {
        var restoration = Restoration<Event>()
        _ = restoration.bind(appID: "lock", restoreID: "door", role: .central, session: 3)
        XCTAssertNil(restoration.hold("connected A", replacing: nil, for: 1), "its app is running: nothing is held for it")
        _ = restoration.preserve(session: 3)
        XCTAssertTrue(restoration.waitingToRestore("lock").isEmpty, "preserved with nothing held: no reason to launch it")

        XCTAssertEqual(restoration.hold("discovered A, -70", replacing: .discovery(peripheral: "A"), for: 1), "lock", "the app to launch")
        XCTAssertEqual(restoration.hold("connected B", replacing: nil, for: 1), "lock")
        XCTAssertEqual(restoration.hold("discovered A, -40", replacing: .discovery(peripheral: "A"), for: 1), "lock")
        XCTAssertNil(restoration.hold("stray", replacing: nil, for: 99), "no manager is preserved under that id")
        XCTAssertEqual(restoration.queuedCount(1), 2)
        XCTAssertEqual(restoration.waitingToRestore("lock").map(\.restoreID), ["door"])
        XCTAssertEqual(restoration.launchOptions("lock").centrals, ["door"])
        XCTAssertEqual(restoration.launchOptions("lock").peripherals, [])

        guard case .restorable(let back) = restoration.bind(appID: "lock", restoreID: "door", role: .central, session: 12) else {
            return XCTFail("the app's Hello finds the preserved manager")
        }
        let restored = try XCTUnwrap(restoration.restore(back.id, into: 12))
        XCTAssertEqual(restored.from, .preserved(1), "what managerd held moves from the manager's own id")
        XCTAssertEqual(restored.queued, ["connected B", "discovered A, -40"], "in order, the latest discovery of A only")
        XCTAssertEqual(restoration.manager(id: 1)?.holder, .session(12))
        XCTAssertEqual(restoration.queuedCount(1), 0)
        XCTAssertNil(restoration.restore(1, into: 13), "a live manager is not restored twice")
        XCTAssertEqual(restoration.launchOptions("lock").centrals, [], "a running app's manager is not a launch option")
        XCTAssertEqual(restoration.restorations(of: "lock"), 1, "handed back once")
        XCTAssertEqual(restoration.restorations(of: "other"), 0)
    }

    func testAManagerResumedFromItsRecordKeepsWhatItCanStillReach() {
        var restoration = Restoration<Event>()
        let database = RemoteDatabase(services: [.init(uuid: BluetoothUUID(0x180D), handles: 1...5)])
        let record = PreservedState(central: .init(links: [.init(identifier: "A", pending: false, options: .init(notifyOnDisconnection: true), database: database),
                                                           .init(identifier: "gone", pending: true, database: database)]))
        let central = restoration.resume(appID: "lock", restoreID: "door", role: .central, from: record) { $0 == "A" }
        XCTAssertEqual(central.holder, .preserved(central.id))
        XCTAssertEqual(central.databases, ["A": database], "a peripheral the store no longer knows is not kept")
        XCTAssertEqual(central.connectOptions, ["A": .init(notifyOnDisconnection: true)])
        XCTAssertEqual(restoration.manager(id: central.id), central, "what was returned is what is held")

        let service = PreservedState.PublishedService(definition: ServiceDefinition(uuid: BluetoothUUID(0x181A), primary: true), handles: 10...12)
        let advertising = PreservedState.Advertising(localName: "Thermo", serviceUUIDs: [])
        let peripheral = restoration.resume(appID: "thermo", restoreID: "t", role: .peripheral,
                                            from: PreservedState(peripheral: .init(services: [service], advertising: advertising)))
        XCTAssertEqual(peripheral.unrepublished, .init(services: [service], advertising: nil),
                       "its services stay in the record until published again; its advertiser is back at once, so none is stashed")
    }

    func testTheHeldQueueIsBounded() throws {
        var restoration = Restoration<Event>(queueCapacity: 3)
        let made = restoration.resume(appID: "lock", restoreID: "door", role: .central)
        for index in 0..<5 { _ = restoration.hold("event \(index)", replacing: nil, for: made.id) }
        XCTAssertEqual(restoration.queuedCount(made.id), 3)
        XCTAssertEqual(try XCTUnwrap(restoration.restore(made.id, into: 1)).queued, ["event 2", "event 3", "event 4"], "the oldest go first")
    }

    func testDiscardingForgetsTheManagerAndWhatWasHeld() {
        var restoration = Restoration<Event>()
        let made = restoration.resume(appID: "lock", restoreID: "door", role: .central)
        _ = restoration.hold("connected", replacing: nil, for: made.id)
        XCTAssertEqual(restoration.discard(made.id)?.restoreID, "door")
        XCTAssertNil(restoration.manager(id: made.id))
        XCTAssertTrue(restoration.waitingToRestore("lock").isEmpty)
        XCTAssertFalse(restoration.hasLiveManager("lock"))
        guard case .made(let again) = restoration.bind(appID: "lock", restoreID: "door", role: .central, session: 4) else {
            return XCTFail("after a user quit the identifier starts afresh")
        }
        XCTAssertNotEqual(again.id, made.id, "ids are not reused")
        XCTAssertEqual(restoration.queuedCount(again.id), 0)
    }

    /// The fault suite's "a peripheral app killed after attd went and before it added its services again (or killed
    /// with managerd) came back with nothing published".
    func testAStashStandsForWhatWasClearedUntilTheAppPublishesAgain() throws {
        var restoration = Restoration<Event>()
        _ = restoration.bind(appID: "thermo", restoreID: "t", role: .peripheral, session: 5)
        let service = PreservedState.PublishedService(definition: ServiceDefinition(uuid: BluetoothUUID(0x181A), primary: true), handles: 10...12, valueHandles: [12])
        let advertising = PreservedState.Advertising(localName: "Thermo", serviceUUIDs: [BluetoothUUID(0x181A)])
        restoration.stash(heldBy: .session(5), services: [service], advertising: nil)  // attd went: its services are cleared
        restoration.stash(heldBy: .session(5), services: [], advertising: advertising)  // then the state drop clears advertising
        let cleared = try XCTUnwrap(restoration.manager(heldBy: .session(5)))
        XCTAssertEqual(cleared.peripheralState(published: [], advertising: nil, subscriptions: []).peripheral,
                       .init(services: [service], advertising: advertising), "a record written now still has both")

        let preserved = try XCTUnwrap(restoration.preserve(session: 5), "killed before it added them again")
        XCTAssertEqual(preserved.unrepublished, .init(services: [service], advertising: advertising), "for managerd to publish for it")

        _ = restoration.restore(preserved.id, into: 6)
        restoration.appPublished(heldBy: .session(6))
        let back = try XCTUnwrap(restoration.manager(heldBy: .session(6)))
        XCTAssertEqual(back.peripheralState(published: [], advertising: nil, subscriptions: []).peripheral, .init(),
                       "once the app publishes itself, what it has now is the record")
    }

    /// The fault suite's "a service managerd published again for a preserved manager could land beside the app's
    /// own copy, under a session no longer there".
    func testAServicePublishedForAnAbsentAppIsWithdrawnWhenTheAppClearedItsServicesMeanwhile() {
        var restoration = Restoration<Event>()
        let resumed = restoration.resume(appID: "thermo", restoreID: "t", role: .peripheral)
        let early = restoration.startRepublication(heldBy: resumed.holder)!
        XCTAssertEqual(restoration.owner(of: early), .preserved(resumed.id))
        let late = restoration.startRepublication(heldBy: resumed.holder)!
        _ = restoration.bind(appID: "thermo", restoreID: "t", role: .peripheral, session: 9)
        _ = restoration.restore(resumed.id, into: 9)
        XCTAssertEqual(restoration.owner(of: late), .session(9), "the app is back: the service lands as its session's")
        restoration.appClearedServices(heldBy: .session(9))
        XCTAssertNil(restoration.owner(of: late), "it cleared its services since, and adds its own: withdrawn, not kept twice")
        let after = restoration.startRepublication(heldBy: .session(9))!
        XCTAssertEqual(restoration.owner(of: after), .session(9))
        restoration.discard(resumed.id)
        XCTAssertNil(restoration.owner(of: after), "a discarded manager owns nothing")
    }

    func testALinkKeepsWhatTheAppDiscoveredButNotSubscriptionsItNoLongerHas() {
        var restoration = Restoration<Event>()
        let made = restoration.resume(appID: "lock", restoreID: "door", role: .central)
        let database = RemoteDatabase(services: [.init(uuid: BluetoothUUID(0x180D), handles: 1...5, characteristics: [.init(uuid: BluetoothUUID(0x2A37), properties: 0x10, valueHandle: 3)])])
        let changed = restoration.update(heldBy: made.holder) {
            $0.databases["A"] = database
            $0.notifying["A"] = [3]
            $0.notifying["B"] = [9]
            $0.connectOptions["A"] = .init(notifyOnDisconnection: true)
        }
        XCTAssertEqual(changed?.databases["A"], database, "the changed manager is returned, to be written down")
        let manager = restoration.manager(id: made.id)!
        XCTAssertEqual(manager.link("A", pending: false, name: "Lock"),
                       .init(identifier: "A", pending: false, name: "Lock", options: .init(notifyOnDisconnection: true), database: database, notifyingValueHandles: [3]))
        XCTAssertEqual(manager.link("A", pending: true, name: "Lock").notifyingValueHandles, [], "a link being re-requested has no subscriptions yet")
        XCTAssertEqual(manager.link("B", pending: false, name: "").notifyingValueHandles, [], "nothing discovered: no handles to name")
        let state = manager.centralState(scan: ScanRequest(services: [BluetoothUUID(0x180D)]), connected: ["A"], pending: ["B"]) { $0 == "A" ? "Lock" : "" }
        XCTAssertEqual(state.central?.links.map(\.identifier), ["A", "B"])
        XCTAssertEqual(state.central?.links.map(\.pending), [false, true])
        XCTAssertEqual(state.central?.scan?.services, [BluetoothUUID(0x180D)])
        XCTAssertNil(state.peripheral)
    }
}

/// The record a preserved manager is written as: its own versioned struct.
final class PreservedStateTests: XCTestCase {
    private var everything: PreservedState {
        var state = PreservedState(
            central: .init(scan: ScanRequest(services: [BluetoothUUID(0x180D)], allowDuplicates: true, solicited: [BluetoothUUID(0xFE59)]),
                           links: [.init(identifier: "8C5B1A5E-0000-4000-8000-000000000001", pending: false, name: "Lock",
                                         options: .init(notifyOnConnection: true, notifyOnDisconnection: true, notifyOnNotification: false),
                                         database: RemoteDatabase(services: [.init(uuid: BluetoothUUID("A0B40001-9266-4B2B-8D1B-2F3A0E6F1C01")!, handles: 16...24,
                                                                                   characteristics: [.init(uuid: BluetoothUUID(0x2A37), properties: 0x12, valueHandle: 18,
                                                                                                           descriptors: [.init(uuid: BluetoothUUID(0x2902), handle: 19)])],
                                                                                   included: [.init(uuid: BluetoothUUID(0x180F), handles: 30...33)])]),
                                         notifyingValueHandles: [18])]),
            peripheral: .init(services: [.init(definition: ServiceDefinition(uuid: BluetoothUUID(0x181A), primary: true, characteristics: [
                .init(uuid: BluetoothUUID(0x2A6E), properties: 0x12, permissions: 0x01, cachedValue: [0x10, 0x08], descriptors: [.init(uuid: BluetoothUUID(0x2901), value: Array("Temp".utf8))]),
                .init(uuid: BluetoothUUID(0x2A6F), properties: 0x11A, permissions: 0x03),
            ], includedStartHandles: [40]), handles: 50...56, valueHandles: [52, 55])],
                              advertising: .init(localName: "Thermo", serviceUUIDs: [BluetoothUUID(0x181A)]),
                              subscriptions: [.init(central: "C1", valueHandle: 52, notify: true, indicate: false, maximumUpdateLength: 244)]))
        state.version = PreservedState.currentVersion
        return state
    }

    func testARecordReadsBackAsItWasWritten() throws {
        let bytes = everything.encoded()
        XCTAssertEqual(bytes.first, UInt8(ascii: "{"))
        XCTAssertEqual(try PreservedState.decode(bytes) { _ throws(PreservedStateError) in XCTFail("not a legacy record"); return PreservedState() }, everything)
        XCTAssertTrue(String(decoding: bytes, as: UTF8.self).contains("\"180D\""), "UUIDs are written as Core Bluetooth prints them")
    }

    func testARecordFromANewerBerylIsRefusedNotGuessedAt() {
        var newer = String(decoding: everything.encoded(), as: UTF8.self)
        newer = newer.replacingOccurrences(of: "\"version\":2", with: "\"version\":3")
        XCTAssertThrowsError(try PreservedState.decode(Array(newer.utf8)) { _ throws(PreservedStateError) in PreservedState() }) { error in
            XCTAssertEqual(error as? PreservedStateError, .newerVersion(3))
        }
    }

    func testADamagedRecordIsATypedErrorAndALegacyOneIsMigrated() throws {
        XCTAssertThrowsError(try PreservedState.decode(Array("{\"version\":2,\"central\":{\"links\":7}}".utf8)) { _ throws(PreservedStateError) in PreservedState() }) { error in
            guard case .unreadable? = error as? PreservedStateError else { return XCTFail("\(error)") }
        }
        var handedOver: [UInt8] = []
        let migrated = try PreservedState.decode([0x0A, 0x02, 0x08, 0x01]) { legacy throws(PreservedStateError) in
            handedOver = legacy
            return PreservedState(central: .init())
        }
        XCTAssertEqual(handedOver, [0x0A, 0x02, 0x08, 0x01], "what is not JSON is version 1, for the wire layer to read")
        XCTAssertEqual(migrated.central, .init())
    }
}

/// Core Bluetooth's rule that discovery adds to what was found before, on managerd's copy of a peer's database.
final class RemoteDatabaseTests: XCTestCase {
    private let heartRate = RemoteDatabase.Service(uuid: BluetoothUUID(0x180D), handles: 10...20)
    private let battery = RemoteDatabase.Service(uuid: BluetoothUUID(0x180F), handles: 1...4)

    func testServicesAreAddedOnceAndKeptInHandleOrder() {
        var database = RemoteDatabase()
        database.add(.services([heartRate], sought: [heartRate.uuid]))
        database.add(.characteristics([.init(uuid: BluetoothUUID(0x2A37), properties: 0x10, valueHandle: 12)], inServiceAt: 10))
        database.add(.services([battery, heartRate], sought: nil))
        XCTAssertEqual(database.services.map(\.handles.lowerBound), [1, 10])
        XCTAssertEqual(database.services[1].characteristics.count, 1, "discovering services again keeps what was found in them")
        database.add(.whole([.init(uuid: BluetoothUUID(0x180D), handles: 10...20)], sought: [heartRate.uuid]))
        XCTAssertEqual(database.services[1].characteristics, [], "a whole discovery replaces what it found again")
    }

    /// The fault suite's kill-hcid-app × restoring (seed 28014 at 20 seeds): the peer's service had moved to 23–31 and
    /// back to 14–22, and managerd's record kept both copies; the relaunched door lock subscribed through the stale one
    /// and heard Invalid Handle. A discovery is the truth for the UUIDs it looked for, and for no others.
    func testADiscoveryDropsTheCopiesOfASoughtServiceItNoLongerFinds() {
        let thermostat = BluetoothUUID(0xFFE0)
        let temperature = { (valueHandle: UInt16) in
            RemoteDatabase.Characteristic(uuid: BluetoothUUID(0x2A6E), properties: 0x10, valueHandle: valueHandle,
                                          descriptors: [.init(uuid: BluetoothUUID(0x2902), handle: valueHandle + 1)])
        }
        var database = RemoteDatabase(services: [battery, .init(uuid: thermostat, handles: 14...22, characteristics: [temperature(18)])])
        database.add(.services([.init(uuid: thermostat, handles: 23...31)], sought: [thermostat]))  // moved
        database.add(.characteristics([temperature(27)], inServiceAt: 23))
        XCTAssertEqual(database.services.map(\.handles), [1...4, 23...31], "the copy at 14 is gone; the battery service was not sought")
        database.add(.services([.init(uuid: thermostat, handles: 14...22)], sought: [thermostat]))  // back
        XCTAssertEqual(database.services.map(\.handles), [1...4, 14...22])
        database.add(.whole([.init(uuid: thermostat, handles: 14...22, characteristics: [temperature(18)])], sought: nil))
        XCTAssertEqual(database.services.map(\.handles), [14...22], "a discovery of every service is the truth for all of them")
        XCTAssertEqual(database.services[0].characteristics.map(\.valueHandle), [18])
    }

    func testCharacteristicsIncludedServicesAndDescriptorsLandInTheirService() {
        var database = RemoteDatabase(services: [heartRate])
        database.add(.characteristics([.init(uuid: BluetoothUUID(0x2A38), properties: 0x02, valueHandle: 15)], inServiceAt: 10))
        database.add(.characteristics([.init(uuid: BluetoothUUID(0x2A37), properties: 0x10, valueHandle: 12),
                                       .init(uuid: BluetoothUUID(0x2A38), properties: 0x02, valueHandle: 15)], inServiceAt: 10))
        XCTAssertEqual(database.services[0].characteristics.map(\.valueHandle), [12, 15], "by value handle, each once")
        database.add(.descriptors([.init(uuid: BluetoothUUID(0x2902), handle: 13)], ofValueAt: 12))
        XCTAssertEqual(database.services[0].characteristics[0].descriptors.map(\.handle), [13])
        database.add(.included([.init(uuid: BluetoothUUID(0x180F), handles: 1...4)], inServiceAt: 10))
        XCTAssertEqual(database.services[0].included.map(\.handles), [1...4])

        let before = database
        database.add(.characteristics([.init(uuid: BluetoothUUID(0x2A39), properties: 0x08, valueHandle: 40)], inServiceAt: 33))
        database.add(.descriptors([.init(uuid: BluetoothUUID(0x2902), handle: 41)], ofValueAt: 40))
        XCTAssertEqual(database, before, "what belongs to a service never discovered is not guessed into another")
    }
}
