import BerylCore
import BerylGAP
import BerylManager
import XCTest

/// A central manager's commands and GATT answers as ManagerCore takes them: what the record says after each (it is
/// written before the command is acknowledged), and what is asked of the controller.
final class ManagerCoreCentralTests: XCTestCase {
    private typealias Core = ManagerCore<String>
    private let lock = DeviceAddress("C0:FF:EE:00:00:01/random")!
    private let doorService = RemoteDatabase.Service(uuid: BluetoothUUID(0xD00D), handles: 1...5,
                                                     characteristics: [.init(uuid: BluetoothUUID(0xD00E), properties: 0x12, valueHandle: 3)])
    private let batteryService = RemoteDatabase.Service(uuid: BluetoothUUID(0x180F), handles: 6...8)

    /// Session 5's central manager 1 ("door", opted into restoration).
    private func central() -> (Core, ManagerKey, PreservedManager) {
        var core = Core()
        guard case .made(let made) = core.restoration.bind(appID: "lock", restoreID: "door", role: .central, session: 5) else {
            preconditionFailure("a first Hello with a restore identifier makes the manager")
        }
        core.sessions[5, default: .init()].appID = "lock"
        _ = core.connections.controller(poweredOn: true)
        return (core, made.key, made)
    }

    private func record(_ preserved: PreservedManager, in core: Core) -> PreservedState.Central? {
        core.restoration.manager(id: preserved.id).map { core.snapshot($0, name: { _ in "" }).central } ?? nil
    }

    // Fault suite, managerd killed right after scanForPeripherals returned: the record has the scan.
    func testAScanIsInTheRecordBeforeItIsAcknowledged() {
        var (core, key, door) = central()
        let scan = ScanRequest(services: [BluetoothUUID(0xD00D)])
        XCTAssertEqual(core.startScan(scan, for: key), [.scanningChanged, .persist(preservedID: door.id)])
        XCTAssertEqual(record(door, in: core)?.scan, scan)
        XCTAssertEqual(core.stopScan(for: key), [.scanningChanged, .persist(preservedID: door.id)])
        XCTAssertNil(record(door, in: core)?.scan)
    }

    func testAManagerWithoutRestorationScansWithoutARecord() {
        var core = Core()
        let key = ManagerKey(session: 9, manager: 1)
        XCTAssertEqual(core.startScan(ScanRequest(), for: key), [.scanningChanged])
        XCTAssertTrue(core.scans.isScanning)
    }

    // RestorationTests: a pending connect is restored with its options; the record lists it before the controller is asked.
    func testAConnectIsRecordedWithItsOptionsBeforeTheControllerIsAsked() {
        var (core, key, door) = central()
        let options = PreservedState.ConnectOptions(notifyOnDisconnection: true)
        let outputs = core.connect(key, to: "L", at: lock, options: options)
        XCTAssertEqual(outputs, [.persist(preservedID: door.id), .connections(.controller(.connect(lock)))])
        XCTAssertEqual(outputs.map(\.isRecord), [true, false])
        XCTAssertEqual(record(door, in: core)?.links, [PreservedState.Link(identifier: "L", pending: true, options: options)])
        XCTAssertEqual(core.sessions[5]?.connectOptions["L"], options, "alerts read the session's options")
    }

    // Fault suite, kill -9 of the whole central stack and the app just after the app asked again for a link that had
    // dropped: the record had been written without the link when it dropped, and the new request, with the same
    // options, was not written, so managerd resumed a manager with nothing to do and never relaunched the app.
    func testAConnectAskedAgainAfterTheLinkDroppedIsRecorded() {
        var (core, key, door) = central()
        _ = core.connect(key, to: "L", at: lock, options: .init())
        _ = core.linkUp(handle: 0x40, identifier: "L", address: lock, isCentral: true)
        _ = core.notifyChanged(3, enabled: true, on: "L", by: key.holder)
        let down = core.linkDown(handle: 0x40, reason: 0x08)
        XCTAssertTrue(down.contains(.persist(preservedID: door.id)))
        XCTAssertEqual(record(door, in: core)?.links ?? [], [], "the running app lost the link: it asks again, or not")
        XCTAssertEqual(core.connect(key, to: "L", at: lock, options: .init()).first, .persist(preservedID: door.id))
        XCTAssertEqual(record(door, in: core)?.links, [PreservedState.Link(identifier: "L", pending: true, options: .init())])
    }

    // Fault suite, kill -9 of hcid, attd, managerd and the app at once, managerd hearing hcid go before its own end:
    // the links it lost that way were written out of a running app's record, so managerd resumed a manager with
    // nothing to do and never relaunched the app. A stack that failed changes nothing an app asked for.
    func testLinksTheStackLostStayInTheRecord() {
        var (core, key, door) = central()
        _ = core.connect(key, to: "L", at: lock, options: .init())
        _ = core.linkUp(handle: 0x40, identifier: "L", address: lock, isCentral: true)
        _ = core.notifyChanged(3, enabled: true, on: "L", by: key.holder)
        let down = core.linkDown(handle: 0x40, reason: 0x16, stackFailed: true)
        XCTAssertEqual(down.first, .connections(.event(.disconnected(key, identifier: "L", reason: 0x16))), "the running app hears it")
        XCTAssertTrue(down.contains(.persist(preservedID: door.id)), "connected became pending")
        XCTAssertEqual(record(door, in: core)?.links, [PreservedState.Link(identifier: "L", pending: true, options: .init())])
        XCTAssertNil(core.restoration.manager(id: door.id)?.notifying["L"], "the peer forgot an unbonded client's descriptors with the link")
        XCTAssertEqual(core.linkDown(handle: 0x41, reason: 0x08), [], "a link never up")
        _ = core.connect(key, to: "L", at: lock, options: .init())
        XCTAssertEqual(core.restoration.manager(id: door.id)?.lostToStack, [:], "the app asked again: the book holds the request")
        _ = core.linkUp(handle: 0x41, identifier: "L", address: lock, isCentral: true)
        XCTAssertTrue(core.linkDown(handle: 0x41, reason: 0x08).contains(.persist(preservedID: door.id)),
                      "a link the peer dropped leaves the record")
        XCTAssertEqual(record(door, in: core)?.links, [])
    }

    // A read-only review after the last session: the record kept a lost link only until its next write, because the
    // book had let go of it. Any later write (here a scan) and the session's close while hcid is still away keep it,
    // and the preserved manager asks the controller for it again.
    func testALinkTheStackLostSurvivesLaterWritesAndTheSessionsClose() {
        var (core, key, door) = central()
        _ = core.connect(key, to: "L", at: lock, options: .init(notifyOnDisconnection: true))
        _ = core.linkUp(handle: 0x40, identifier: "L", address: lock, isCentral: true)
        _ = core.linkDown(handle: 0x40, reason: 0x16, stackFailed: true)
        _ = core.startScan(ScanRequest(), for: key)
        XCTAssertEqual(record(door, in: core)?.links, [PreservedState.Link(identifier: "L", pending: true, options: .init(notifyOnDisconnection: true))])
        let closed = core.sessionClosed(5, poweredOn: true, at: .zero)
        XCTAssertEqual(closed.last, .persist(preservedID: door.id))
        XCTAssertTrue(closed.contains(.connections(.controller(.connect(lock)))), "the preserved manager asks for it again")
        let away = ManagerKey(.preserved(door.id), manager: 1)
        XCTAssertEqual(core.book.held(by: away).pending, ["L"])
        XCTAssertEqual(core.restoration.manager(id: door.id)?.lostToStack, [:])
        XCTAssertEqual(record(door, in: core)?.links.map(\.identifier), ["L"])
    }

    // The app cancels a link the stack lost: the record lets go of it, and the app hears the wait end (no reason).
    func testCancellingALinkTheStackLostForgetsIt() {
        var (core, key, door) = central()
        _ = core.connect(key, to: "L", at: lock, options: .init())
        _ = core.linkUp(handle: 0x40, identifier: "L", address: lock, isCentral: true)
        _ = core.linkDown(handle: 0x40, reason: 0x16, stackFailed: true)
        let outputs = try? core.cancelConnection(key, to: "L")
        XCTAssertEqual(outputs, [.persist(preservedID: door.id), .connections(.event(.disconnected(key, identifier: "L", reason: 0)))])
        XCTAssertEqual(record(door, in: core)?.links, [])
        XCTAssertThrowsError(try core.cancelConnection(key, to: "L"), "nothing is held or awaited any more")
        _ = core.sessionClosed(5, poweredOn: true, at: .zero)
        XCTAssertEqual(core.book.pendingIdentifiers, [], "nothing is asked for again")
    }

    // hcid's own controller resets (recovery, resync, a reopened transport) end links with a Disconnection Complete it
    // makes up, after saying the controller is resetting: those are the stack's losses too, not the peer's.
    func testALinkEndingWhileTheControllerResetsIsTheStacksLoss() {
        var (core, key, door) = central()
        _ = core.attd(attached: true, isRunning: { _ in true })
        _ = core.controllerChanged(.poweredOn, isRunning: { _ in true })
        _ = core.connect(key, to: "L", at: lock, options: .init())
        _ = core.linkUp(handle: 0x40, identifier: "L", address: lock, isCentral: true)
        _ = core.controllerChanged(.resetting, isRunning: { _ in true })
        _ = core.linkDown(handle: 0x40, reason: 0x16)
        XCTAssertEqual(record(door, in: core)?.links.map(\.pending), [true])
        XCTAssertEqual(core.restoration.manager(id: door.id)?.lostToStack["L"], lock)
    }

    // The stack lost the link of a manager whose app is away: asked again, and the relaunched app is told it does not
    // notify (it subscribes again; a value adopted as standing would stay silent from an unbonded peer).
    func testAnAwayManagersSubscriptionsEndWithALinkTheStackLost() {
        var (core, key, door) = central()
        _ = core.connect(key, to: "L", at: lock, options: .init())
        _ = core.linkUp(handle: 0x40, identifier: "L", address: lock, isCentral: true)
        _ = core.notifyChanged(3, enabled: true, on: "L", by: key.holder)
        _ = core.sessionClosed(5, poweredOn: true, at: .zero)
        let down = core.linkDown(handle: 0x40, reason: 0x16, stackFailed: true)
        XCTAssertTrue(down.contains(.connections(.controller(.connect(lock)))))
        _ = core.linkUp(handle: 0x41, identifier: "L", address: lock, isCentral: true)
        let away = ManagerHolder.preserved(door.id)
        XCTAssertNil(core.notifyRequested(true, valueHandle: 3, cccdHandle: 4, on: 0x41, identifier: "L", by: away),
                     "the descriptor is written again")
    }

    func testConnectingToALinkAlreadyUpConnectsAtOnce() {
        var (core, key, door) = central()
        _ = core.linkUp(handle: 0x40, identifier: "L", address: lock, isCentral: true)
        let other = ManagerKey(session: 6, manager: 1)
        _ = core.connect(other, to: "L", at: lock, options: .init())
        XCTAssertEqual(core.connect(key, to: "L", at: lock, options: .init()),
                       [.persist(preservedID: door.id), .connections(.event(.connected(key, identifier: "L")))])
    }

    // A cancelled peripheral is not restored: its options, what was found on it and its notifying values go.
    func testACancelForgetsThePeripheralInTheRecord() {
        var (core, key, door) = central()
        _ = core.connect(key, to: "L", at: lock, options: .init(notifyOnConnection: true))
        _ = core.linkUp(handle: 0x40, identifier: "L", address: lock, isCentral: true)
        _ = core.discovered(.whole([doorService], sought: nil), services: [doorService.uuid], everyService: true, on: "L", by: key.holder)
        _ = core.notifyChanged(3, enabled: true, on: "L", by: key.holder)
        XCTAssertEqual(record(door, in: core)?.links.first?.notifyingValueHandles, [3])
        let outputs = try? core.cancelConnection(key, to: "L")
        XCTAssertEqual(outputs?.first, .persist(preservedID: door.id))
        XCTAssertEqual(outputs?.last, .connections(.event(.disconnected(key, identifier: "L", reason: 0x16))),
                       "a held link is reported cancelled by the local host (Core Vol 1 Part F §2)")
        XCTAssertEqual(record(door, in: core)?.links, [])
        let manager = core.restoration.manager(id: door.id)
        XCTAssertNil(manager?.connectOptions["L"])
        XCTAssertNil(manager?.databases["L"])
        XCTAssertNil(manager?.notifying["L"])
        XCTAssertThrowsError(try core.cancelConnection(key, to: "L")) { XCTAssertEqual($0 as? CentralConnections.Refusal, .notHeld) }
    }

    // willRestoreState's peripherals carry their services: a whole discovery replaces the copy, others add to it.
    func testDiscoveriesBuildTheRecordsCopyOfThePeripheral() {
        var (core, key, door) = central()
        _ = core.connect(key, to: "L", at: lock, options: .init())
        _ = core.linkUp(handle: 0x40, identifier: "L", address: lock, isCentral: true)
        let bare = RemoteDatabase.Service(uuid: doorService.uuid, handles: doorService.handles)
        XCTAssertEqual(core.discovered(.services([bare], sought: [bare.uuid]), services: [bare.uuid], everyService: false, on: "L", by: key.holder),
                       [.persist(preservedID: door.id)])
        _ = core.discovered(.characteristics(doorService.characteristics, inServiceAt: 1), services: [], everyService: false, on: "L", by: key.holder)
        XCTAssertEqual(record(door, in: core)?.links.first?.database?.services, [doorService])
        _ = core.discovered(.whole([batteryService], sought: nil), services: [batteryService.uuid], everyService: true, on: "L", by: key.holder)
        XCTAssertEqual(record(door, in: core)?.links.first?.database?.services, [batteryService], "a whole discovery is the database now")
        _ = core.discovered(.whole([doorService], sought: [doorService.uuid]), services: [doorService.uuid], everyService: false, on: "L", by: key.holder)
        XCTAssertEqual(record(door, in: core)?.links.first?.database?.services, [doorService, batteryService],
                       "a discovery filtered by service adds to it")
        XCTAssertEqual(core.discoveredServices["L"], [doorService.uuid, batteryService.uuid])
        XCTAssertEqual(core.discovered(nil, services: [BluetoothUUID(0x1234)], everyService: false, on: "L", by: key.holder), [],
                       "an answer that does not read as a discovery is not kept, but its services are seen")
        XCTAssertTrue(core.discoveredServices["L"]?.contains(BluetoothUUID(0x1234)) == true)
        XCTAssertEqual(core.notifyChanged(3, enabled: true, on: "L", by: key.holder), [.persist(preservedID: door.id)])
        XCTAssertEqual(core.notifyChanged(3, enabled: true, on: "L", by: key.holder), [], "already notifying: nothing to write")
        XCTAssertEqual(core.notifyChanged(3, enabled: false, on: "L", by: key.holder), [.persist(preservedID: door.id)])
        XCTAssertEqual(record(door, in: core)?.links.first?.notifyingValueHandles, [])
        XCTAssertEqual(core.discovered(.whole([doorService], sought: [doorService.uuid]), services: [doorService.uuid], everyService: false, on: "L", by: key.holder), [],
                       "the same discovery again changes nothing kept, so no record is written")
    }

    // A link's ATT_MTU sets what one notification and one write without response carry, and goes with the link.
    func testTheBearersMTUBoundsWritesAndGoesWithTheLink() {
        var (core, key, _) = central()
        _ = core.connect(key, to: "L", at: lock, options: .init())
        _ = core.linkUp(handle: 0x40, identifier: "L", address: lock, isCentral: true)
        XCTAssertEqual(core.maximumWriteLength(on: 0x40, withoutResponse: true), 20, "ATT_MTU 23 until the bearer says")
        _ = core.bearer(0x40, mtu: 247)
        XCTAssertEqual(core.maximumUpdateLength(on: 0x40), 244)
        XCTAssertEqual(core.maximumWriteLength(on: 0x40, withoutResponse: false), 512)
        _ = core.linkDown(handle: 0x40, reason: 0x13)
        XCTAssertNil(core.attMTUs[0x40], "a GATT request on the next link with this handle waits for its bearer")
    }

    // GATT, RSSI and write lengths need a link the asking app holds; retrieveConnectedPeripherals finds links by the
    // services discovered (or advertised) on them, and only where this stack is central.
    func testAppsReachOnlyTheirLinksAndRetrieveConnectedFiltersByService() {
        var (core, key, _) = central()
        _ = core.connect(key, to: "L", at: lock, options: .init())
        _ = core.linkUp(handle: 0x40, identifier: "L", address: lock, isCentral: true)
        XCTAssertEqual(core.link(to: "L", heldBy: key.holder)?.handle, 0x40)
        XCTAssertNil(core.link(to: "L", heldBy: .session(6)), "another app's link")
        XCTAssertNil(core.link(to: "X", heldBy: key.holder))
        let central = DeviceAddress("C0:FF:EE:00:00:02/random")!
        _ = core.linkUp(handle: 0x41, identifier: "C", address: central, isCentral: false)
        let addresses = ["L": lock, "C": central]
        XCTAssertEqual(core.connectedPeripherals(offering: [], address: { addresses[$0] }), ["L"], "a remote central is not a peripheral")
        XCTAssertEqual(core.connectedPeripherals(offering: [doorService.uuid], address: { addresses[$0] }), [])
        _ = core.discovered(.services([doorService], sought: [doorService.uuid]), services: [doorService.uuid], everyService: false, on: "L", by: key.holder)
        XCTAssertEqual(core.connectedPeripherals(offering: [doorService.uuid, batteryService.uuid], address: { addresses[$0] }), ["L"])
    }

    // PipelinedWriteTests' race: an app cancels a link others keep while attd's ready for its writes is on the way;
    // that ready was counted before attd forgot the app's writes, and would put the app ahead of attd.
    func testAWriteReadyCountedBeforeItsSenderWasForgottenIsDropped() throws {
        var (core, key, _) = central()
        let other = ManagerKey(session: 6, manager: 1)
        _ = core.connect(key, to: "L", at: lock, options: .init())
        _ = core.connect(other, to: "L", at: lock, options: .init())
        _ = core.linkUp(handle: 0x40, identifier: "L", address: lock, isCentral: true)
        XCTAssertTrue(core.admitsWriteReady(for: 5, onLink: 0x40))
        let outputs = try core.cancelConnection(key, to: "L")
        XCTAssertTrue(outputs.contains(.forgetWrites(session: 5, link: 0x40)), "attd is told to forget the app's writes: \(outputs)")
        XCTAssertFalse(outputs.contains(.connections(.controller(.disconnect(handle: 0x40)))), "session 6 keeps the link")
        XCTAssertFalse(core.admitsWriteReady(for: 5, onLink: 0x40), "a ready attd sent before it forgot is not the app's count")
        XCTAssertTrue(core.admitsWriteReady(for: 5, onLink: 0x41), "its writes on another link are not being forgotten")
        XCTAssertTrue(core.admitsWriteReady(for: 6, onLink: 0x40), "nor another app's on this one")
        core.writesForgotten(of: 5, onLink: 0x40)
        XCTAssertTrue(core.admitsWriteReady(for: 5, onLink: 0x40), "attd answered: what it sends now is counted afresh")
        XCTAssertThrowsError(try core.cancelConnection(key, to: "L"))
    }

    private final class Directory: DeviceDirectory {
        var identifiers: [DeviceAddress: String] = [:]
        var names: [String: String] = [:]
        func identifier(at address: DeviceAddress) -> String? { identifiers[address] }
        func address(of identifier: String) -> DeviceAddress? { identifiers.first { $0.value == identifier }?.key }
        func seen(_ address: DeviceAddress, name: String?) -> String {
            let identifier = identifiers[address, default: "P\(identifiers.count + 1)"]
            identifiers[address] = identifier
            if let name { names[identifier] = name }
            return identifier
        }
    }

    // ScanTests: only an app's scan makes a device known; a scannable device is reported with its scan response (its
    // name there), once per scan; a scan started later hears the devices already heard that match it at once.
    func testOnlyAnAppsScanMakesADeviceKnownAndALaterScanHearsItAtOnce() {
        var (core, key, _) = central()
        let directory = Directory()
        // Flags, then the door service's UUID; the scan response names it.
        let advertising = AdvertisingReport(kind: .connectableUndirected, address: lock, data: [0x02, 0x01, 0x06, 0x03, 0x03, 0x0D, 0xD0], rssi: -50)
        let response = AdvertisingReport(kind: .scanResponse, address: lock, data: [0x05, 0x09] + Array("Door".utf8), rssi: -50)
        XCTAssertEqual(core.advertisingReceived(advertising, directory: directory), .heard([]))
        XCTAssertTrue(directory.identifiers.isEmpty, "no app scans: the device stays unknown (a lab's scan hands out no identifiers)")

        _ = core.startScan(ScanRequest(services: [BluetoothUUID(0xD00D)]), for: key)
        XCTAssertEqual(core.advertisingReceived(advertising, directory: directory), .heard([]), "waits for the scan response")
        XCTAssertEqual(directory.identifiers[lock], "P1", "known from the first report an app's scan heard")
        guard case .heard(let found) = core.advertisingReceived(response, directory: directory) else { return XCTFail("heard") }
        XCTAssertEqual(found.map(\.target), [key])
        XCTAssertEqual(found.first?.advertisement.localName, "Door")
        XCTAssertEqual(directory.names["P1"], "Door")
        XCTAssertEqual(core.advertisingReceived(advertising, directory: directory), .heard([]), "reported once per scan without duplicates")
        XCTAssertEqual(core.advertisingReceived(AdvertisingReport(kind: .connectableUndirected, address: lock, data: [0x02, 0x01], rssi: -50),
                                                directory: directory), .malformed(.truncated(at: 0)), "a malformed report is dropped")

        let other = ManagerKey(session: 6, manager: 1)
        _ = core.startScan(ScanRequest(services: [BluetoothUUID(0x180F)]), for: other)
        XCTAssertEqual(core.alreadyHeard(by: other, directory: directory), [], "the battery scan does not match the door")
        let again = ManagerKey(session: 7, manager: 1)
        _ = core.startScan(ScanRequest(), for: again)
        XCTAssertEqual(core.alreadyHeard(by: again, directory: directory).map(\.identifier), ["P1"])
        XCTAssertEqual(core.alreadyHeard(by: again, directory: directory), [], "and only once")
    }
}
