import BerylCore
import BerylManager
import Foundation
import XCTest

/// Who an app is and who may drive it, as ManagerCore decides: a session's Hello, `beryl app`'s launch, terminate,
/// quit and state, and who hears what happens on a link.
final class ManagerCoreAppsTests: XCTestCase {
    private typealias Core = ManagerCore<String>
    private let appID = "com.example.doorlock"
    private let lock = DeviceAddress("C0:FF:EE:00:00:01/random")!

    /// doorlock is declared for uid 1001.
    private func core() throws -> Core {
        let manifest = try AppManifestParser.parse(Data(#"{"id": "com.example.doorlock", "user": "doorlock"}"#.utf8), file: "/etc/beryl/apps/doorlock.json",
                                                   lookup: { $0 == "doorlock" ? Account(uid: 1001, gid: 1001) : nil })
        var core = Core()
        core.catalog = AppCatalog([manifest])
        return core
    }

    // AuthorizationTests: a process of another user claiming the app id is refused (CBManager.authorization denied).
    func testAHelloUnderAnotherUsersAppIDIsRefused() throws {
        var core = try core()
        XCTAssertEqual(core.hello(3, appID: appID, uid: 1002, restoreID: "", role: .central),
                       .failure(.notTheAppsUser(appID: appID, user: "doorlock", uid: 1001, peerUID: 1002)))
        XCTAssertNil(core.sessions[3]?.appID, "a refused session is nobody's")
        XCTAssertEqual(core.hello(4, appID: "com.example.undeclared", uid: 1002, restoreID: "", role: .central), .success(.plain),
                       "an undeclared app runs foreground-only")
        XCTAssertEqual(core.hello(5, appID: "com.example.undeclared", uid: 1002, restoreID: "r", role: .central),
                       .failure(.restorationNeedsManifest(appID: "com.example.undeclared")))
    }

    // RestorationTests: the first Hello with a restore identifier makes the manager (its record written before the
    // Welcome), a second live one is refused, and the app back after it went restores it.
    func testARestoreIdentifierMakesBindsOrRestoresItsManager() throws {
        var core = try core()
        guard case .success(.made(let id)) = core.hello(5, appID: appID, uid: 1001, restoreID: "door", role: .central) else {
            return XCTFail("the first Hello makes the manager")
        }
        XCTAssertEqual(core.sessions[5]?.saidHello, true)
        XCTAssertEqual(core.hello(6, appID: appID, uid: 1001, restoreID: "door", role: .central),
                       .failure(.restoreIdentifierInUse(appID: appID, restoreID: "door")))
        guard case .success(.made) = core.hello(6, appID: appID, uid: 1001, restoreID: "door", role: .peripheral) else {
            return XCTFail("the same identifier in the other role is another manager")
        }
        _ = core.sessionClosed(5, poweredOn: true, at: .zero)
        XCTAssertEqual(core.hello(7, appID: appID, uid: 1001, restoreID: "door", role: .central), .success(.restoring(preservedID: id)))
    }

    // A session is one manager: a second Hello would bind it a second restore identifier the core could not tell apart.
    // ManagerStateTests, in the core: a session connected but not welcomed hears no state change (it heard poweredOn
    // ahead of its Welcome, added its services, and the Welcome's reset clearing removed them).
    func testOnlyWelcomedSessionsHearTheStacksState() throws {
        var core = try core()
        core.sessions[3] = AppSession()  // as managerd opens every session's entry at its first request
        _ = core.hello(9, appID: "com.example.plain", uid: 1003, restoreID: "", role: .peripheral)
        _ = core.hello(5, appID: appID, uid: 1001, restoreID: "", role: .central)
        XCTAssertEqual(core.hello(4, appID: appID, uid: 1002, restoreID: "", role: .central).map { _ in true },
                       .failure(.notTheAppsUser(appID: appID, user: "doorlock", uid: 1001, peerUID: 1002)))
        _ = core.hello(8, appID: "", uid: 0, restoreID: "", role: .central, isLabSession: true)
        XCTAssertEqual(core.welcomedSessions, [5, 9], "not the one still to say Hello, the refused one, nor the lab's")
        XCTAssertEqual(core.hello(3, appID: "", uid: 1003, restoreID: "", role: .central).map { _ in true }, .success(true))
        XCTAssertEqual(core.welcomedSessions, [3, 5, 9], "welcomed now")
    }

    func testASessionSaysHelloOnceAndALabSessionNever() throws {
        var core = try core()
        XCTAssertEqual(core.hello(5, appID: appID, uid: 1001, restoreID: "door", role: .central).map { _ in true }, .success(true))
        XCTAssertEqual(core.hello(5, appID: appID, uid: 1001, restoreID: "window", role: .central), .failure(.alreadyGreeted))
        XCTAssertEqual(core.restoration.managers(of: appID).map(\.restoreID), ["door"])
        XCTAssertEqual(core.hello(8, appID: "", uid: 0, restoreID: "", role: .central, isLabSession: true), .failure(.labSession))
        XCTAssertNil(core.sessions[8]?.saidHello)
    }

    func testOnlyRootManagerdsUserOrTheAppsUserDrivesIt() throws {
        let core = try core()
        XCTAssertEqual(core.control(appID, byUID: 1001, managerdUID: 500).map(\.id), .success(appID))
        XCTAssertEqual(core.control(appID, byUID: 0, managerdUID: 500).map(\.id), .success(appID))
        XCTAssertEqual(core.control(appID, byUID: 500, managerdUID: 500).map(\.id), .success(appID))
        XCTAssertEqual(core.control(appID, byUID: 1002, managerdUID: 500).map(\.id), .failure(.notPermitted(appID: appID, user: "doorlock")))
        XCTAssertEqual(core.control("com.example.other", byUID: 0, managerdUID: 500).map(\.id), .failure(.undeclared(appID: "com.example.other")))
    }

    func testAnAppSetsItsOwnStateAndItsUsersMayForceIt() throws {
        var core = try core()
        _ = core.hello(5, appID: appID, uid: 1001, restoreID: "", role: .central)
        _ = core.hello(6, appID: "com.example.plain", uid: 1003, restoreID: "", role: .central)
        XCTAssertEqual(core.stateSetter(of: appID, session: 5, uid: 1001, managerdUID: 500, runningAs: [1001]), .success(.app))
        XCTAssertEqual(core.stateSetter(of: appID, session: 9, uid: 1001, managerdUID: 500, runningAs: []), .success(.user(uid: 1001)),
                       "the manifest's user, with the app not running")
        XCTAssertEqual(core.stateSetter(of: appID, session: 6, uid: 1003, managerdUID: 500, runningAs: [1001]),
                       .failure(.notPermittedToSetState(appID: appID)), "another app's session")
        XCTAssertEqual(core.stateSetter(of: "com.example.plain", session: 9, uid: 1003, managerdUID: 500, runningAs: [1003]), .success(.user(uid: 1003)),
                       "an undeclared app's own user, while it runs")
        XCTAssertEqual(core.stateSetter(of: "com.example.gone", session: 9, uid: 0, managerdUID: 500, runningAs: []),
                       .failure(.notDeclaredOrRunning(appID: "com.example.gone")))
    }

    // BackgroundTests' quit: a force-quit app keeps nothing, so nothing launches it again.
    func testAUserQuitDiscardsEveryManagerAndEveryRecordOfTheApp() throws {
        var core = try core()
        guard case .success(.made(let door)) = core.hello(5, appID: appID, uid: 1001, restoreID: "door", role: .central),
              case .success(.made(let chime)) = core.hello(6, appID: appID, uid: 1001, restoreID: "chime", role: .peripheral) else {
            return XCTFail("both managers are made")
        }
        _ = core.sessionClosed(6, poweredOn: true, at: .zero)
        let outputs = core.userQuit(appID)
        XCTAssertEqual(outputs.filter(\.isRecord), [.forget(appID: appID, restoreID: "door", role: .central),
                                                    .forget(appID: appID, restoreID: "chime", role: .peripheral), .forgetApp(appID: appID)])
        XCTAssertNil(core.restoration.manager(id: door))
        XCTAssertNil(core.restoration.manager(id: chime))
        XCTAssertEqual(core.sessions[5]?.quitting, true, "its live session releases its work as it closes")
        XCTAssertNil(core.restoration.hold("connected", replacing: nil, for: chime), "nothing is held for it")
    }

    // A link's GATT events reach each manager holding it once; pairing as peripheral reaches every publisher and advertiser.
    func testWhoHearsALinksGATTEventsAndItsPairing() throws {
        var core = try core()
        let door = ManagerKey(session: 5, manager: 1), other = ManagerKey(session: 5, manager: 2), chime = ManagerKey(session: 6, manager: 1)
        _ = core.connections.controller(poweredOn: true)
        _ = core.connect(door, to: "L", at: lock, options: .init())
        _ = core.connect(other, to: "L", at: lock, options: .init())
        _ = core.linkUp(handle: 0x40, identifier: "L", address: lock, isCentral: true)
        XCTAssertEqual(core.holders(ofLink: 0x40)?.holders, [.session(5)])
        XCTAssertEqual(core.pairingAudience(ofLink: 0x40)?.holders, [.session(5)])
        core.router.publish(10...12, owner: chime)
        core.advertisers[ManagerKey(session: 7, manager: 1)] = Advertiser(localName: "Chime", serviceUUIDs: [])
        let central = DeviceAddress("C0:FF:EE:00:00:02/random")!
        _ = core.linkUp(handle: 0x41, identifier: "C", address: central, isCentral: false)
        XCTAssertEqual(core.pairingAudience(ofLink: 0x41)?.identifier, "C")
        XCTAssertEqual(core.pairingAudience(ofLink: 0x41)?.holders, [.session(6), .session(7)])
        XCTAssertNil(core.holders(ofLink: 0x99))
    }

    // AlertTests: an event held for a suspended app raises an alert only when its connection asked for that kind, with
    // the peripheral's name when known and the manifest's alert command given the message.
    func testAHeldEventAlertsOnlyWhenItsConnectionAskedFor() throws {
        var core = Core()
        core.catalog = AppCatalog([try AppManifestParser.parse(
            Data(#"{"id": "com.example.doorlock", "user": "doorlock", "alertCommand": ["/usr/bin/notify-send"]}"#.utf8),
            file: "/etc/beryl/apps/doorlock.json", lookup: { $0 == "doorlock" ? Account(uid: 1001, gid: 1001) : nil })])
        _ = core.hello(5, appID: appID, uid: 1001, restoreID: "", role: .central)
        _ = core.connect(ManagerKey(session: 5, manager: 1), to: "L", at: lock, options: .init(notifyOnConnection: false, notifyOnDisconnection: true,
                                                                                               notifyOnNotification: false))
        let named: (String) -> String? = { $0 == "L" ? "Front door" : nil }
        XCTAssertNil(core.alert((.connection, "L"), heldFor: 5, name: named), "notifyOnConnection was not asked for")
        XCTAssertNil(core.alert((.disconnection, "M"), heldFor: 5, name: named), "no options for a peripheral it did not connect")
        XCTAssertNil(core.alert((.disconnection, "L"), heldFor: 6, name: named), "nor for another session")
        XCTAssertNil(core.alert(nil, heldFor: 5, name: named))
        let alert = try XCTUnwrap(core.alert((.disconnection, "L"), heldFor: 5, name: named))
        XCTAssertEqual(alert.message, "com.example.doorlock: disconnection of Front door")
        XCTAssertEqual(alert.command, ["/usr/bin/notify-send", "com.example.doorlock: disconnection of Front door"])
        XCTAssertEqual(alert.manifest?.uid, 1001, "the command runs as the app's user")
        XCTAssertEqual(alert.environment["BERYL_ALERT"], "disconnection")

        _ = core.hello(6, appID: "com.example.undeclared", uid: 1002, restoreID: "", role: .central)
        _ = core.connect(ManagerKey(session: 6, manager: 1), to: "M", at: lock, options: .init(notifyOnConnection: true, notifyOnDisconnection: false,
                                                                                               notifyOnNotification: false))
        let unnamed = try XCTUnwrap(core.alert((.connection, "M"), heldFor: 6, name: named))
        XCTAssertEqual(unnamed.message, "com.example.undeclared: connection of M", "an unnamed peripheral goes by its identifier")
        XCTAssertNil(unnamed.command, "an app without a manifest has no alert command")

        // `beryl alerts` of another user hears nothing of the app: the alert names the user's peripherals.
        XCTAssertTrue(core.mayHearAlerts(of: appID, uid: 1001, managerdUID: 500, heldFor: nil), "the manifest's user")
        XCTAssertTrue(core.mayHearAlerts(of: appID, uid: 0, managerdUID: 500, heldFor: nil))
        XCTAssertTrue(core.mayHearAlerts(of: appID, uid: 500, managerdUID: 500, heldFor: nil))
        XCTAssertFalse(core.mayHearAlerts(of: appID, uid: 1002, managerdUID: 500, heldFor: 1001))
        XCTAssertTrue(core.mayHearAlerts(of: "com.example.undeclared", uid: 1002, managerdUID: 500, heldFor: 1002), "the user its event was held for")
        XCTAssertFalse(core.mayHearAlerts(of: "com.example.undeclared", uid: 1003, managerdUID: 500, heldFor: 1002))
    }

    // `beryl app list`: every declared app and every running one; what each has preserved, held, launched and woken.
    func testWhatBerylAppReportsOfAnApp() throws {
        var core = try core()
        let manifestWithLaunch = try AppManifestParser.parse(
            Data(#"{"id": "com.example.doorlock", "user": "doorlock", "launch": {"command": ["/usr/bin/doorlock"]}}"#.utf8),
            file: "/etc/beryl/apps/doorlock.json", lookup: { $0 == "doorlock" ? Account(uid: 1001, gid: 1001) : nil })
        core.catalog = AppCatalog([manifestWithLaunch])
        let door = core.restoration.resume(appID: appID, restoreID: "door", role: .central)
        _ = core.restoration.resume(appID: appID, restoreID: "chime", role: .peripheral)
        _ = core.holdForAbsentApp("connected", replacing: nil, for: door.id, at: .seconds(10))
        _ = core.launchStarted(appID, pid: 4242, at: .seconds(10))
        _ = core.hello(9, appID: "com.example.plain", uid: 1003, restoreID: "", role: .central)
        XCTAssertEqual(core.listedApps(running: ["com.example.plain", ""]), [appID, "com.example.plain"])

        let status = core.status(of: appID, sessionPIDs: [4242, 4300])
        XCTAssertEqual(status.manifest?.file, "/etc/beryl/apps/doorlock.json")
        XCTAssertEqual(status.pids, [4242, 4300], "the launched process once, beside its sessions'")
        XCTAssertEqual(status.preservedCentrals, ["door"])
        XCTAssertEqual(status.preservedPeripherals, ["chime"])
        XCTAssertEqual(status.queuedEvents, 1)
        XCTAssertEqual(status.launches, 1)
        XCTAssertEqual(status.state, .background, "launched for its work")
        let plain = core.status(of: "com.example.plain", sessionPIDs: [5000])
        XCTAssertNil(plain.manifest)
        XCTAssertEqual(plain.pids, [5000])
        XCTAssertEqual(plain.state, .foreground)
    }

    // BackgroundWakeTests, in the core: an app this stack did not launch, woken in the background with two sessions,
    // stays awake while one of them owes its event, and is idle and not running once the last closes; the core counts
    // the app's sessions itself.
    func testAWakeEndsWithTheAppsLastSessionAndTheCoreSaysHowLongItLasted() throws {
        let manifest = try AppManifestParser.parse(
            Data(#"{"id": "com.example.doorlock", "user": "doorlock", "backgroundModes": ["bluetooth-central"], "wakeBudgetSeconds": 10}"#.utf8),
            file: "/etc/beryl/apps/doorlock.json", lookup: { $0 == "doorlock" ? Account(uid: 1001, gid: 1001) : nil })
        var core = Core()
        core.catalog = AppCatalog([manifest])
        for session: UInt64 in [1, 2] { _ = core.hello(session, appID: appID, uid: 1001, restoreID: "", role: .central) }
        XCTAssertEqual(core.welcomeWake(1, at: .zero), 0, "started by its user: no wake yet")
        _ = core.setLifecycle(appID, .background, at: .zero)
        XCTAssertEqual(core.admit("heard", as: .work, replacing: nil, for: 1, at: .seconds(1)), .deliver(wake: 1))
        XCTAssertEqual(core.admit("heard", as: .work, replacing: nil, for: 2, at: .seconds(1)), .deliver(wake: 1))
        XCTAssertTrue(core.sessionIdle(1, upTo: 1, at: .seconds(2)).isEmpty, "session 2 still owes its event")
        XCTAssertTrue(core.sessionClosed(1, poweredOn: true, at: .seconds(2)).allSatisfy { if case .idleAgain = $0 { false } else { true } })
        XCTAssertEqual(core.lifecycle(of: appID), .background)
        let closing = core.sessionClosed(2, poweredOn: true, at: .seconds(4))
        guard case .idleAgain(appID, .seconds(3))? = closing.first else { return XCTFail("the wake ends with the last session: \(closing)") }
        XCTAssertEqual(core.lifecycle(of: appID), .notRunning)
    }
}
