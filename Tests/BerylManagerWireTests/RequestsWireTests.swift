import BerylCore
import BerylManager
import BerylManagerWire
import BerylStore
import BerylWire
import XCTest

/// What managerd keeps of preserved managers and when, the refusals apps hear, and what it asks attd for them.
final class RequestsWireTests: XCTestCase {
    private final class MemoryStorage: PreservedRecordStorage {
        var records: [PreservedRecord] = []
        var saves = 0

        func all() throws(SQLiteError) -> [PreservedRecord] { records }
        func save(_ record: PreservedRecord) throws(SQLiteError) {
            saves += 1
            records.removeAll { $0.appID == record.appID && $0.restoreID == record.restoreID && $0.role == record.role }
            records.append(record)
        }
        func remove(appID: String, restoreID: String, role: PreservedRecord.Role) throws(SQLiteError) {
            records.removeAll { $0.appID == appID && $0.restoreID == restoreID && $0.role == role }
        }
        func removeAll(appID: String) throws(SQLiteError) { records.removeAll { $0.appID == appID } }
    }

    private let scanning = PreservedState(central: .init(scan: ScanRequest(services: [BluetoothUUID(0x180D)]), links: []))

    func testAnUnreadableRecordIsNeverOverwrittenUntilItsAppIsQuit() throws {
        let storage = MemoryStorage()
        storage.records = [
            PreservedRecord(appID: "lock", restoreID: "r1", role: .central, state: Array(#"{"version":99}"#.utf8)),
            PreservedRecord(appID: "lock", restoreID: "r2", role: .central, state: scanning.encoded()),
        ]
        var records = PreservedRecords(storage: storage)
        let (resumable, unreadable) = try records.load()
        XCTAssertEqual(resumable.map(\.key.restoreID), ["r2"])
        XCTAssertEqual(resumable.first?.state, scanning)
        XCTAssertEqual(unreadable.map(\.1), [.newerVersion(99)])
        XCTAssertEqual(storage.saves, 0, "a current record read back is not written again")

        let newer = PreservedRecords.Key(appID: "lock", restoreID: "r1", role: .central)
        try records.save(newer, PreservedState())
        XCTAssertEqual(storage.records.first { $0.restoreID == "r1" }?.state, Array(#"{"version":99}"#.utf8), "left as it was")
        try records.save(.init(appID: "lock", restoreID: "r1", role: .peripheral), PreservedState())
        XCTAssertEqual(storage.records.count, 3, "the other role under that identifier is another record")

        try records.forgetApp("lock")
        XCTAssertTrue(storage.records.isEmpty)
        try records.save(newer, scanning)
        XCTAssertEqual(try PreservedState.decodeStored(try XCTUnwrap(storage.records.first?.state)), scanning, "preserved again after the quit")
        try records.forget(newer)
        XCTAssertTrue(storage.records.isEmpty)
    }

    func testAVersionOneRecordIsWrittenAgainWhenRead() throws {
        let storage = MemoryStorage()
        let legacy: [UInt8] = try scanning.wire.serializedBytes()
        storage.records = [PreservedRecord(appID: "hr", restoreID: "r", role: .central, state: legacy)]
        var records = PreservedRecords(storage: storage)
        XCTAssertEqual(try records.load().resumable.first?.state, scanning)
        XCTAssertEqual(storage.saves, 1)
        XCTAssertEqual(storage.records.first?.state.first, UInt8(ascii: "{"), "now version 2")
        var none = PreservedRecords(storage: nil)
        XCTAssertTrue(try none.load().resumable.isEmpty, "no store: nothing comes back")
        XCTAssertNoThrow(try none.save(.init(appID: "hr", restoreID: "r", role: .central), scanning))
    }

    func testRefusalsCarryTheirCodeAndField() {
        let notTheUser = WireFailure(HelloRefusal.notTheAppsUser(appID: "lock", user: "lock", uid: 1001, peerUID: 1002))
        XCTAssertEqual([notTheUser.code], [.permissionDenied])
        XCTAssertEqual(notTheUser.field, "app_id")
        XCTAssertEqual(WireFailure(HelloRefusal.restoreIdentifierInUse(appID: "lock", restoreID: "r")).code, .busy)
        XCTAssertEqual(WireFailure(HelloRefusal.restorationNeedsManifest(appID: "x")).field, "restore_identifier")
        XCTAssertEqual(WireFailure(AppControlRefusal.undeclared(appID: "x")).code, .notFound)
        XCTAssertEqual(WireFailure(LabRefusal.notLabSession).code, .permissionDenied)
        XCTAssertEqual(WireFailure(LaunchRefusal.alreadyRunning(appID: "x", pid: 9)).code, .alreadyExists)
        XCTAssertEqual(WireFailure(LaunchRefusal.noLaunchCommand(appID: "x")).field, "app_id")
        XCTAssertEqual(WireFailure.notConnected("P1").detail.bluetoothError, .notConnected)
        XCTAssertEqual(WireFailure.unknownPeripheral("P1").detail.bluetoothError, .unknownDevice)
        XCTAssertEqual(WireFailure.notPublished(70000, field: "value_handle").detail.managerReason, .notPublished)

        XCTAssertThrowsError(try BluetoothUUID.list(["180D", "nope"], field: "service_uuids")) {
            XCTAssertEqual(($0 as? WireFailure)?.field, "service_uuids")
        }
        XCTAssertEqual(try? BluetoothUUID.list(["180D"], field: "x"), [BluetoothUUID(0x180D)])
        XCTAssertEqual(try? ConnectionLatency(wire: .high), .high)
        XCTAssertThrowsError(try ConnectionLatency(wire: .UNRECOGNIZED(9))) { XCTAssertEqual(($0 as? WireFailure)?.field, "latency") }
    }

    func testWhatManagerdAsksOfAttdForAnApp() {
        // The app's Notify, as the data channel carries it too; its word for sender, links and manager is not attd's.
        let update = Beryl_Ipc_V1_AttRequest(update: .with {
            $0.valueHandle = 18; $0.value = Data([1, 2]); $0.indicate = true; $0.ordered = true; $0.readySeen = 4
            $0.manager = 3; $0.onBehalfOf = 5; $0.connectionHandles = [0x99]
        }, session: 77)
        XCTAssertEqual(update.notify, .with { $0.valueHandle = 18; $0.value = Data([1, 2]); $0.indicate = true; $0.ordered = true; $0.readySeen = 4; $0.onBehalfOf = 77 })
        let named = Beryl_Ipc_V1_AttRequest(update: .with { $0.valueHandle = 18; $0.centrals = ["C1"] }, session: 77, links: [0x41]).notify
        XCTAssertEqual(named.connectionHandles, [0x41])
        XCTAssertEqual(named.centrals, [], "managerd found the centrals' links: attd is not asked to name them again")
        XCTAssertEqual(Beryl_Ipc_V1_AttRequest(forgetting: 77).forgetSender, .with { $0.onBehalfOf = 77 })
        XCTAssertEqual(Beryl_Ipc_V1_AttRequest(forgetting: 77, onLink: 0x40).forgetSender,
                       .with { $0.onBehalfOf = 77; $0.onlyLink = true; $0.connectionHandle = 0x40 })
        XCTAssertEqual(Beryl_Ipc_V1_AttRequest(answering: 5, isRead: true, value: [9], error: 0).answerRead,
                       .with { $0.id = 5; $0.value = Data([9]); $0.startsAtOffset = true }, "an app answers from the request's offset on")
        XCTAssertEqual(Beryl_Ipc_V1_AttRequest(answering: 6, isRead: false, value: [], error: 0x80).answerWrite, .with { $0.id = 6; $0.error = 0x80 })
        XCTAssertEqual(Beryl_Ipc_V1_AttRequest(pairingAnswerOn: 0x41, accept: true, passkey: 123456).pairingAnswer,
                       .with { $0.connectionHandle = 0x41; $0.accept = true; $0.passkey = 123456 })
        let clearing = Beryl_Ipc_V1_AttRequest(clearing: .init(value: .init(link: 0x40, valueHandle: 18), cccdHandle: 19)).gattSubscribe
        XCTAssertEqual(clearing, .with { $0.connectionHandle = 0x40; $0.valueHandle = 18; $0.cccdHandle = 19; $0.enable = false })
    }

    /// An app's request that ran an HCI command hears the controller's status typed, whichever command it was.
    func testAControllersAnswerReachesTheAppTyped() throws {
        // Read RSSI taken: status 0, then Connection_Handle and RSSI (-60).
        XCTAssertEqual(try ControllerAnswer.outcome(.success([0x00, 0x40, 0x00, 0xC4]), of: "Read RSSI").get(), [0x40, 0x00, 0xC4])

        let gone = ControllerAnswer.outcome(.success([0x02]), of: "Read RSSI")
        XCTAssertEqual(gone.failure?.code, .notFound, "the link is gone")
        XCTAssertEqual(ControllerAnswer.outcome(.success([0x0C]), of: "LE Connection Update").failure?.code, .unsupported)
        XCTAssertEqual(gone.failure?.detail.hciStatus, 0x02)
        XCTAssertEqual(gone.failure?.detail.bluetoothError, .notConnected, "Unknown Connection Identifier: the link went")
        XCTAssertEqual(ControllerAnswer.outcome(.success([0x0C]), of: "LE Connection Update").failure?.detail.bluetoothError, .operationNotSupported)
        XCTAssertEqual(ControllerAnswer.outcome(.success([0x3B]), of: "LE Connection Update").failure?.detail.bluetoothError, .invalidParameters)
        XCTAssertEqual(ControllerAnswer.outcome(.success([]), of: "Disconnect").failure?.detail.hciStatus, 0xFF, "an empty answer is no success")

        // hcid's own typed refusal passes on as it came; hcid out of reach is not ready.
        let unresponsive = ControllerAnswer.outcome(.failure(.remote(code: .notReady, message: "controller unresponsive", field: "",
                                                                      detail: RemoteDetail(controllerReason: .unresponsive))), of: "Disconnect")
        XCTAssertEqual(unresponsive.failure?.detail.controllerReason, .unresponsive)
        XCTAssertEqual(unresponsive.failure?.code, .notReady)
        XCTAssertEqual(ControllerAnswer.outcome(.failure(.closed), of: "Disconnect").failure?.code, .notReady)
    }
}

private extension Result {
    var failure: Failure? { if case .failure(let failure) = self { failure } else { nil } }

    // The handles of an app's setNotifyValue as the core books them: a value handle ATT cannot name is no subscription
    // at all; a descriptor it cannot name is one attd refuses.
    func testAnAppsGattOperationAsTheCoreBooksIt() {
        var operation = Beryl_Ipc_V1_GattOperation()
        operation.setNotify = .with { $0.enable = true; $0.valueHandle = 0x0003; $0.cccdHandle = 0x0004 }
        XCTAssertEqual(GattAsk(operation), .setNotify(enable: true, valueHandle: 3, cccdHandle: 4))
        operation.setNotify.cccdHandle = 0x1_0000
        XCTAssertEqual(GattAsk(operation), .setNotify(enable: true, valueHandle: 3, cccdHandle: nil))
        operation.setNotify.valueHandle = 0x1_0003
        XCTAssertEqual(GattAsk(operation), .other)
        operation.read = .with { $0.handle = 3 }
        XCTAssertEqual(GattAsk(operation), .other)
    }

    // The bearers a kept attd lists: a peer that is no address is kept as none (the core does not take its link back).
    func testAnOpenBearerFromAttdsListing() {
        var bearer = Beryl_Ipc_V1_Bearer()
        (bearer.connectionHandle, bearer.attMtu, bearer.peerAddress, bearer.central) = (0x40, 247, "C0:FF:EE:00:00:01/random", true)
        XCTAssertEqual(OpenBearer(bearer), OpenBearer(link: 0x40, mtu: 247, peer: DeviceAddress("C0:FF:EE:00:00:01/random"), isCentral: true))
        bearer.peerAddress = "not an address"
        XCTAssertNil(OpenBearer(bearer).peer)
    }
}
