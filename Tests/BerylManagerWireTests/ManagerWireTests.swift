import BerylCore
import BerylGAP
import BerylManager
import BerylManagerWire
import BerylWire
import Foundation
import XCTest

/// managerd's stateless proto ⇄ core translation: every case of each enum lands where it should, and an app's GATT
/// operation reaches attd on the link's handle with every field it carried.
final class ManagerWireTests: XCTestCase {
    func testEachGattOperationBecomesAttdsRequestOnTheLink() throws {
        let discover = try XCTUnwrap(Beryl_Ipc_V1_AttRequest(.with { $0.discover = .with {
            $0.serviceUuids = ["180D"]; $0.characteristicUuids = ["2A37"]; $0.startHandle = 3; $0.endHandle = 9; $0.depth = .characteristics
        } }, connectionHandle: 0x41, session: 7))
        XCTAssertEqual(discover.gattDiscover.connectionHandle, 0x41)
        XCTAssertEqual(discover.gattDiscover.serviceUuids, ["180D"])
        XCTAssertEqual(discover.gattDiscover.characteristicUuids, ["2A37"])
        XCTAssertEqual(discover.gattDiscover.startHandle...discover.gattDiscover.endHandle, 3...9)
        XCTAssertEqual(discover.gattDiscover.depth, .characteristics)

        // The app's own att.proto message goes on, with the link and the sender managerd knows, not the app's word.
        let read = try XCTUnwrap(Beryl_Ipc_V1_AttRequest(.with { $0.read = .with { $0.handle = 0x2A; $0.connectionHandle = 0x99; $0.peripheral = "X" } },
                                                         connectionHandle: 0x41, session: 7))
        XCTAssertEqual(read.gattRead, .with { $0.connectionHandle = 0x41; $0.handle = 0x2A })

        let write = try XCTUnwrap(Beryl_Ipc_V1_AttRequest(.with { $0.write = .with {
            $0.handle = 0x2C; $0.value = Data([1, 2]); $0.withoutResponse = true; $0.signed = true; $0.ordered = true; $0.readySeen = 3
            $0.onBehalfOf = 99; $0.connectionHandle = 0x99; $0.peripheral = "X"
        } }, connectionHandle: 0x42, session: 7))
        XCTAssertEqual(write.gattWrite, .with {
            $0.connectionHandle = 0x42; $0.handle = 0x2C; $0.value = Data([1, 2]); $0.withoutResponse = true; $0.signed = true
            $0.ordered = true; $0.readySeen = 3; $0.onBehalfOf = 7
        }, "attd keeps the app's write order per app")

        let notify = try XCTUnwrap(Beryl_Ipc_V1_AttRequest(.with { $0.setNotify = .with {
            $0.valueHandle = 0x2C; $0.cccdHandle = 0x2D; $0.indicate = true; $0.enable = true; $0.connectionHandle = 0x99
        } }, connectionHandle: 0x43, session: 7))
        XCTAssertEqual(notify.gattSubscribe, .with { $0.connectionHandle = 0x43; $0.valueHandle = 0x2C; $0.cccdHandle = 0x2D; $0.indicate = true; $0.enable = true })

        let writes: [Beryl_Ipc_V1_AttWrite] = [.with { $0.handle = 5; $0.value = Data([9]) }, .with { $0.handle = 6; $0.value = Data([8]) }]
        let reliable = try XCTUnwrap(Beryl_Ipc_V1_AttRequest(.with { $0.reliableWrite.writes = writes }, connectionHandle: 0x44, session: 7))
        XCTAssertEqual(reliable.gattReliableWrite.connectionHandle, 0x44)
        XCTAssertEqual(reliable.gattReliableWrite.writes, writes)

        XCTAssertNil(Beryl_Ipc_V1_AttRequest(Beryl_Ipc_V1_GattOperation(), connectionHandle: 0x41, session: 7), "an operation of no kind")
    }

    /// One reading of attd's answers for the library's ordered queues, updateValue's and writes without response's.
    func testAttdsAnswersToAnOrderedSenderReadAsSentQueueFullOrSendAgain() {
        func remote(_ code: IPCErrorCode) -> Result<Beryl_Ipc_V1_Response, IPCClientError> { .failure(.remote(code: code, message: "", field: "")) }
        XCTAssertEqual(OrderedSendAnswer(.success(.init()), ordered: true), .sent)
        XCTAssertEqual(OrderedSendAnswer(remote(.busy), ordered: false), .queueFull)
        XCTAssertEqual(OrderedSendAnswer(remote(.cancelled), ordered: true), .sendAgain)
        XCTAssertNil(OrderedSendAnswer(remote(.cancelled), ordered: false), "only an ordered sender sends again")
        XCTAssertNil(OrderedSendAnswer(remote(.notFound), ordered: true))
        XCTAssertNil(OrderedSendAnswer(.failure(.closed), ordered: true))
        XCTAssertEqual(Beryl_Ipc_V1_WriteCommandResult(.sendAgain), .with { $0.sent = false; $0.sendAgain = true })
        XCTAssertEqual(Beryl_Ipc_V1_UpdateResult(.queueFull), .with { $0.sent = false; $0.sendAgain = false })
        XCTAssertEqual(Beryl_Ipc_V1_UpdateResult(.sent), .with { $0.sent = true })
    }

    func testAPublishedServicesHandlesAreA16BitRangeOrNothing() {
        XCTAssertEqual(Beryl_Ipc_V1_ServicePublished.with { $0.startHandle = 0x10; $0.endHandle = 0x14 }.handles, 0x10...0x14)
        XCTAssertNil(Beryl_Ipc_V1_ServicePublished.with { $0.startHandle = 0x10; $0.endHandle = 0x1_0000 }.handles)
        XCTAssertNil(Beryl_Ipc_V1_ServicePublished.with { $0.startHandle = 0x14; $0.endHandle = 0x10 }.handles)
    }

    func testLifecycleStatesRoundTripAndNotRunningCannotBeSet() {
        for state in LifecycleState.allCases where state != .notRunning {
            XCTAssertEqual(LifecycleState(settable: state.wire), state)
        }
        XCTAssertEqual(LifecycleState.notRunning.wire, .notRunning)
        XCTAssertNil(LifecycleState(settable: .notRunning), "an app is not running when its process exits")
        XCTAssertNil(LifecycleState(settable: .UNRECOGNIZED(9)))
    }

    func testEventsAreClassedForASuspendedApp() {
        func kind(_ event: Beryl_Ipc_V1_ManagerEvent) -> AppLifecycle.EventClass { AppLifecycle.EventClass(event) }
        XCTAssertEqual(kind(.with { $0.stateChanged = .init() }), .news)
        XCTAssertEqual(kind(.with { $0.pairingFinished = .init() }), .news)
        XCTAssertEqual(kind(.with { $0.readyToUpdate = .init() }), .news, "the library's update queue waits for it")
        XCTAssertEqual(kind(.with { $0.readyToWrite = .init() }), .news, "canSendWriteWithoutResponse waits for it")
        XCTAssertEqual(Beryl_Ipc_V1_ManagerEvent.with { $0.readyToWrite.peripheral = "P" }.heldKey, .readyToWrite(peripheral: "P"))
        XCTAssertEqual(Beryl_Ipc_V1_ManagerEvent.with { $0.discovered.peripheral.identifier = "P" }.heldKey, .discovery(peripheral: "P"))
        XCTAssertEqual(Beryl_Ipc_V1_ManagerEvent.with { $0.readyToUpdate.count = 3 }.heldKey, .readyToUpdate)
        XCTAssertNil(Beryl_Ipc_V1_ManagerEvent.with { $0.notification = .init() }.heldKey)
        XCTAssertEqual(kind(.with { $0.pairingPrompt = .init() }), .prompt)
        XCTAssertEqual(kind(.with { $0.notification = .init() }), .work)
    }

    func testLaunchFailuresAndAlertsKeepTheirKind() {
        XCTAssertEqual(Beryl_Ipc_V1_LaunchFailureKind(nil), .none)
        XCTAssertEqual(Beryl_Ipc_V1_LaunchFailureKind(.couldNotStart(reason: "no such file")), .couldNotStart)
        XCTAssertEqual(Beryl_Ipc_V1_LaunchFailureKind(.didNotRestore(restoreIDs: ["a"], within: .seconds(15))), .didNotRestore)
        XCTAssertEqual(Beryl_Ipc_V1_LaunchFailureKind(.exitedWithoutRestoring(exit: "exit 1", restoreIDs: ["a"])), .exitedWithoutRestoring)
        XCTAssertEqual(AlertKind.allCases.map { Beryl_Ipc_V1_AlertKind($0) }, [.connection, .disconnection, .notification])
    }

    func testALabLinksSecurityTravelsAsItWasSaid() {
        let paired = Beryl_Ipc_V1_Paired.with {
            $0.encrypted = true; $0.authenticated = true; $0.bonded = true; $0.secureConnections = true; $0.keySize = 16
        }
        let security = LabSecurity(paired)
        XCTAssertEqual(security, LabSecurity(encrypted: true, authenticated: true, bonded: true, secureConnections: true, keySize: 16))
        XCTAssertEqual(security.wire, .with { $0.encrypted = true; $0.authenticated = true; $0.bonded = true; $0.secureConnections = true; $0.keySize = 16 })
        XCTAssertEqual(LabSecurityOutcome.secured(security).wire(handle: 0x40).secured, security.wire)
        let failed = LabSecurityOutcome.pairingFailed(reason: 0x04, remote: true).wire(handle: 0x40)
        XCTAssertEqual(failed.handle, 0x40)
        XCTAssertEqual(failed.pairingFailed, .with { $0.reason = 0x04; $0.remote = true })
        XCTAssertEqual(LabSecurityOutcome.encryptionFailed(status: 0x06).wire(handle: 1).encryptionFailed, 0x06)
        XCTAssertEqual(LabSecurityOutcome.linkClosed(reason: 0x3D).wire(handle: 1).linkClosed, 0x3D)
    }

    func testWhatADeviceAdvertisedReachesTheApp() {
        var advertisement = AdvertisementData()
        advertisement.localName = "Thermo"
        advertisement.serviceUUIDs = [BluetoothUUID(0x180D)]
        advertisement.overflowServiceUUIDs = [BluetoothUUID(0x1810)]
        advertisement.solicitedServiceUUIDs = [BluetoothUUID(0x1812)]
        advertisement.serviceData = [BluetoothUUID(0x180F): [0x64]]
        advertisement.manufacturerData = [0x4C, 0x00, 0x01]
        advertisement.txPowerLevel = -8
        advertisement.isConnectable = true
        let info = Beryl_Ipc_V1_AdvertisementInfo(advertisement)
        XCTAssertEqual(info.localName, "Thermo")
        XCTAssertEqual(info.serviceUuids, [BluetoothUUID(0x180D).description])
        XCTAssertEqual(info.overflowServiceUuids, [BluetoothUUID(0x1810).description])
        XCTAssertEqual(info.solicitedServiceUuids, [BluetoothUUID(0x1812).description])
        XCTAssertEqual(info.serviceData, [BluetoothUUID(0x180F).description: Data([0x64])])
        XCTAssertEqual(info.manufacturerData, Data([0x4C, 0x00, 0x01]))
        XCTAssertTrue(info.txPowerKnown)
        XCTAssertEqual(info.txPowerLevel, -8)
        XCTAssertTrue(info.connectable)
        XCTAssertFalse(Beryl_Ipc_V1_AdvertisementInfo(AdvertisementData()).txPowerKnown, "no TX power advertised is not 0 dBm")
    }

    /// An alert for a suspended app needs both an event of its kind and the connect option that asked for it.
    func testAnAlertNeedsItsEventAndTheOptionThatAskedForIt() throws {
        let connected = try XCTUnwrap(AlertKind.candidate(for: .with { $0.connected.peripheral = "P" }))
        XCTAssertEqual(connected.kind, .connection)
        XCTAssertEqual(connected.peripheral, "P")
        XCTAssertEqual(AlertKind.candidate(for: .with { $0.disconnected.peripheral = "P" })?.kind, .disconnection)
        XCTAssertEqual(AlertKind.candidate(for: .with { $0.notification.peripheral = "P" })?.kind, .notification)
        XCTAssertNil(AlertKind.candidate(for: .with { $0.stateChanged = .init() }))

        func alerted(_ connect: Beryl_Ipc_V1_Connect) -> [AlertKind] { AlertKind.allCases.filter(PreservedState.ConnectOptions(connect).alerts) }
        XCTAssertEqual(alerted(.with { $0.notifyOnConnection = true }), [.connection])
        XCTAssertEqual(alerted(.with { $0.notifyOnDisconnection = true }), [.disconnection])
        XCTAssertEqual(alerted(.with { $0.notifyOnNotification = true }), [.notification])
        XCTAssertEqual(alerted(Beryl_Ipc_V1_Connect()), [])
    }

    func testALinksEventsAsTheManagerHearsThem() {
        let key = ManagerKey(session: 3, manager: 1)
        XCTAssertEqual(Beryl_Ipc_V1_ManagerEvent(.connected(key, identifier: "P"))?.connected, .with { $0.manager = 1; $0.peripheral = "P" })
        XCTAssertEqual(Beryl_Ipc_V1_ManagerEvent(.disconnected(key, identifier: "P", reason: 0x13))?.disconnected,
                       .with { $0.manager = 1; $0.peripheral = "P"; $0.reason = 0x13 })
        XCTAssertNil(Beryl_Ipc_V1_ManagerEvent(.requestedAgain(key, identifier: "P", reason: 0x08)), "an app away hears nothing")
        XCTAssertEqual(CentralConnections.Event.requestedAgain(key, identifier: "P", reason: 0x08).key, key)
    }

    func testWhatTheGATTClientHeardReachesTheManagerUnderThePeripheralsIdentifier() {
        let notification = Beryl_Ipc_V1_ManagerEvent(.gattNotification(.with { $0.connectionHandle = 0x40; $0.handle = 0x12; $0.value = Data([7]); $0.indication = true; $0.delivered = [3] }),
                                                     peripheral: "P")?.notification
        XCTAssertEqual(notification, .with { $0.peripheral = "P"; $0.handle = 0x12; $0.value = Data([7]); $0.indication = true },
                       "as a data channel carries it: nothing of attd's links and audiences")
        let change = Beryl_Ipc_V1_GattServiceChanged.with { $0.connectionHandle = 0x40; $0.startHandle = 5; $0.endHandle = 9 }
        XCTAssertEqual(Beryl_Ipc_V1_ManagerEvent(.gattServiceChanged(change), peripheral: "P")?.servicesChanged, .with { $0.peripheral = "P"; $0.change = change })
        XCTAssertEqual(Beryl_Ipc_V1_ManagerEvent(.gattWriteReady(.with { $0.connectionHandle = 0x40; $0.count = 4; $0.onBehalfOf = 9 }), peripheral: "P")?.readyToWrite,
                       .with { $0.peripheral = "P"; $0.count = 4 })
        XCTAssertNil(Beryl_Ipc_V1_ManagerEvent(.bearerOpened(.init()), peripheral: "P"))
    }

    func testEveryStackStateRoundTripsAndAnUnknownWireValueIsUnknown() {
        let all = StackState.allCases
        for state in all { XCTAssertEqual(StackState(Beryl_Ipc_V1_ControllerState(state)), state) }
        XCTAssertEqual(Set(all.map { Beryl_Ipc_V1_ControllerState($0).rawValue }).count, all.count, "each has its own wire value")
        XCTAssertEqual(StackState(.UNRECOGNIZED(42)), .unknown)
    }

    // RestorationTests: what a preserved manager's app, away, finds held when it is launched for it.
    func testOnlyWorkWaitsForAnAbsentApp() {
        let waits: [Beryl_Ipc_V1_ManagerEvent.OneOf_Kind] = [
            .discovered(.init()), .connected(.init()), .disconnected(.init()), .notification(.init()), .servicesChanged(.init()),
            .readRequest(.init()), .writeRequest(.init()), .subscription(.init()), .connectionEvent(.init()),
        ]
        let doesNotWait: [Beryl_Ipc_V1_ManagerEvent.OneOf_Kind] = [
            .stateChanged(.poweredOn), .readyToWrite(.init()), .readyToUpdate(.init()), .advertisingStarted(.init()),
            .pairingPrompt(.init()), .pairingFinished(.init()),
        ]
        for kind in waits { XCTAssertTrue(Beryl_Ipc_V1_ManagerEvent.with { $0.kind = kind }.waitsForAbsentApp, "\(kind)") }
        for kind in doesNotWait { XCTAssertFalse(Beryl_Ipc_V1_ManagerEvent.with { $0.kind = kind }.waitsForAbsentApp, "\(kind)") }
        XCTAssertFalse(Beryl_Ipc_V1_ManagerEvent().waitsForAbsentApp, "an event of no kind")
        XCTAssertEqual(Beryl_Ipc_V1_ManagerEvent.with { $0.discovered.peripheral.identifier = "L" }.heldKey, .discovery(peripheral: "L"))
        XCTAssertNil(Beryl_Ipc_V1_ManagerEvent.with { $0.connected = .init() }.heldKey)
    }

    // A restored manager's held events reach it under its number in the new session, whichever event names one.
    func testEveryHeldEventNamingAManagerIsRetargeted() {
        let held: [Beryl_Ipc_V1_ManagerEvent] = [
            .with { $0.discovered.manager = 4 }, .with { $0.connected.manager = 4 }, .with { $0.disconnected.manager = 4 },
            .with { $0.readRequest.manager = 4 },
            .with { $0.writeRequest.manager = 4 }, .with { $0.subscription.manager = 4 }, .with { $0.advertisingStarted.manager = 4 },
            .with { $0.connectionEvent.manager = 4 },
        ]
        for var event in held {
            event.retarget(manager: 1)
            var expected = event
            expected.retarget(manager: 4)
            XCTAssertNotEqual(event, expected, "\(event) keeps manager 4")
        }
    }

    // AppTests' API misuse: before poweredOn a manager is refused what needs the radio, never its clean-up.
    func testOnlyWhatNeedsTheRadioWaitsForPoweredOn() {
        let needs: [Beryl_Ipc_V1_ManagerRequest.OneOf_Kind] = [
            .startScan(.init()), .connect(.init()), .gatt(.init()), .addService(.init()), .startAdvertising(.init()), .updateValue(.init()),
            .registerConnectionEvents(.init()),
        ]
        let never: [Beryl_Ipc_V1_ManagerRequest.OneOf_Kind] = [
            .hello(.init()), .retrievePeripherals(.init()), .respond(.init()), .removeAllServices(.init()), .stopAdvertising(.init()),
            .getCapabilities(.init()), .labOpen(.init()), .launchApp(.init()),
        ]
        for kind in needs { XCTAssertTrue(kind.needsPoweredOn, "\(kind)") }
        for kind in never { XCTAssertFalse(kind.needsPoweredOn, "\(kind)") }
    }

    // Who an app is is checked at its Hello: a session that skipped it (or a lab's) uses no manager, but may ask the
    // stack questions, drive `beryl app` and the lab.
    func testAManagersWorkNeedsAHelloFirst() {
        let needs: [Beryl_Ipc_V1_ManagerRequest.OneOf_Kind] = [
            .startScan(.init()), .connect(.init()), .gatt(.init()), .addService(.init()), .startAdvertising(.init()), .updateValue(.init()),
            .respond(.init()), .removeAllServices(.init()), .appIdle(.init()), .invalidate(.init()), .answerPairing(.init()),
        ]
        let never: [Beryl_Ipc_V1_ManagerRequest.OneOf_Kind] = [
            .hello(.init()), .retrievePeripherals(.init()), .retrieveConnected(.init()), .getCapabilities(.init()), .listApps(.init()),
            .subscribeAlerts(.init()), .labOpen(.init()), .labConnect(.init()),
        ]
        for kind in needs { XCTAssertTrue(kind.needsHello, "\(kind)") }
        for kind in never { XCTAssertFalse(kind.needsHello, "\(kind)") }
        XCTAssertEqual(WireFailure.helloFirst.code, .permissionDenied)
    }

    func testAnAppsStatusTravelsWhole() throws {
        let manifest = try AppManifestParser.parse(
            Data(#"{"id": "com.example.doorlock", "user": "doorlock", "backgroundModes": ["bluetooth-central"], "launch": {"command": ["/usr/bin/doorlock"]}}"#.utf8),
            file: "/etc/beryl/apps/doorlock.json", lookup: { $0 == "doorlock" ? Account(uid: 1001, gid: 1001) : nil })
        var core = ManagerCore<String>(restoreGrace: .seconds(15))
        core.catalog = AppCatalog([manifest])
        let door = core.restoration.resume(appID: manifest.id, restoreID: "door", role: .central)
        _ = core.holdForAbsentApp("connected", replacing: nil, for: door.id, at: .seconds(10))
        _ = core.launchFailed(manifest.id, reason: "No such file or directory", at: .seconds(10))
        let info = Beryl_Ipc_V1_AppInfo(core.status(of: manifest.id, sessionPIDs: [77]))
        XCTAssertEqual(info.id, manifest.id)
        XCTAssertEqual(info.manifest, manifest.file)
        XCTAssertEqual(info.user, "doorlock")
        XCTAssertEqual(info.backgroundModes, ["bluetooth-central"])
        XCTAssertTrue(info.launchable)
        XCTAssertEqual(info.pids, [77])
        XCTAssertEqual(info.preservedCentrals, ["door"])
        XCTAssertEqual(info.queuedEvents, 1)
        XCTAssertEqual(info.launches, 1)
        XCTAssertEqual(info.lastLaunchError, "No such file or directory")
        XCTAssertEqual(info.lastLaunchFailure, .couldNotStart)
        XCTAssertEqual(info.lastLaunchUnrestored, [])
        var ended = core.status(of: manifest.id, sessionPIDs: [])
        ended.lastLaunchFailure = .didNotRestore(restoreIDs: ["door", "gate"], within: .seconds(15))
        XCTAssertEqual(Beryl_Ipc_V1_AppInfo(ended).lastLaunchFailure, .didNotRestore)
        XCTAssertEqual(Beryl_Ipc_V1_AppInfo(ended).lastLaunchUnrestored, ["door", "gate"])
        ended.lastLaunchFailure = .exitedWithoutRestoring(exit: "status 1", restoreIDs: ["door"])
        XCTAssertEqual(Beryl_Ipc_V1_AppInfo(ended).lastLaunchUnrestored, ["door"])
        let undeclared = Beryl_Ipc_V1_AppInfo(core.status(of: "com.example.plain", sessionPIDs: []))
        XCTAssertEqual(undeclared.manifest, "")
        XCTAssertFalse(undeclared.launchable)
        XCTAssertEqual(undeclared.state, .notRunning)
    }
}
