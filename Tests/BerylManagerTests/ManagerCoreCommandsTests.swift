import BerylCore
import BerylGAP
import BerylManager
import XCTest

/// An app's commands the core answers itself: the answer is an output, in the order the app must see it (a record
/// before its acknowledgement, the controller's work and the events after), and each refusal is typed.
final class ManagerCoreCommandsTests: XCTestCase {
    private typealias Core = ManagerCore<String>
    private let lock = DeviceAddress("C0:FF:EE:00:00:01/random")!
    private let centralAddress = DeviceAddress("C0:FF:EE:00:00:02/random")!

    private final class Directory: DeviceDirectory {
        var identifiers: [DeviceAddress: String] = [:]
        func identifier(at address: DeviceAddress) -> String? { identifiers[address] }
        func seen(_ address: DeviceAddress, name: String?) -> String {
            let identifier = identifiers[address, default: "P\(identifiers.count + 1)"]
            identifiers[address] = identifier
            return identifier
        }
        func address(of identifier: String) -> DeviceAddress? { identifiers.first { $0.value == identifier }?.key }
    }

    /// Session 5's central manager 1 ("door", opted into restoration); the lock is known as "L".
    private func central() -> (Core, ManagerKey, PreservedManager, Directory) {
        var core = Core()
        guard case .made(let made) = core.restoration.bind(appID: "lock", restoreID: "door", role: .central, session: 5) else {
            preconditionFailure("a first Hello with a restore identifier makes the manager")
        }
        core.sessions[5, default: .init()].appID = "lock"
        _ = core.connections.controller(poweredOn: true)
        let directory = Directory()
        directory.identifiers[lock] = "L"
        return (core, made.key, made, directory)
    }

    private func replies(_ outputs: [Core.Output]) -> [Int] {
        outputs.indices.filter { if case .reply = outputs[$0] { true } else { false } }
    }

    // Fault suite, managerd killed right after connect returned: the record asking for the link is written before the
    // app hears the acknowledgement, and the controller is asked after it.
    func testAConnectIsRecordedBeforeItIsAcknowledgedAndTheControllerAskedAfter() throws {
        var (core, key, made, directory) = central()
        let outputs = core.command(.connect(key, peripheral: "L", .init()), from: 5, reply: 1, directory: directory)
        XCTAssertEqual(replies(outputs), [1], "one answer, after the record: \(outputs)")
        XCTAssertEqual(Array(outputs.prefix(2)), [.persist(preservedID: made.id), .reply(1, .success(.ack))])
        XCTAssertTrue(outputs.dropFirst(2).contains { if case .connections(.controller) = $0 { true } else { false } },
                      "the controller is asked after the acknowledgement: \(outputs)")

        XCTAssertEqual(core.command(.connect(key, peripheral: "X", .init()), from: 5, reply: 2, directory: directory),
                       [.reply(2, .failure(.unknownPeripheral("X")))], "CBError.unknownDevice, and nothing changes")
        XCTAssertEqual(core.command(.cancelConnection(key, peripheral: "X"), from: 5, reply: 3, directory: directory),
                       [.reply(3, .failure(.neitherHeldNorAwaited("X")))])
        let cancelled = core.command(.cancelConnection(key, peripheral: "L"), from: 5, reply: 4, directory: directory)
        XCTAssertEqual(Array(cancelled.prefix(2)), [.persist(preservedID: made.id), .reply(4, .success(.ack))])
    }

    // What needs a link the app holds is refused without one; with one, Read RSSI goes to the controller, whose
    // answer answers the app, and the longest write is the link's ATT_MTU less the opcode and handle.
    func testALinksQuestionsNeedTheAppsLink() {
        var (core, key, _, directory) = central()
        XCTAssertEqual(core.command(.readRSSI(peripheral: "L"), from: 5, reply: 1, directory: directory), [.reply(1, .failure(.notConnected("L")))])
        _ = core.command(.connect(key, peripheral: "L", .init()), from: 5, reply: 2, directory: directory)
        _ = core.linkUp(handle: 0x40, identifier: "L", address: lock, isCentral: true)
        _ = core.bearer(0x40, mtu: 247)
        XCTAssertEqual(core.command(.readRSSI(peripheral: "L"), from: 5, reply: 3, directory: directory), [.askController(3, .readRSSI(link: 0x40))])
        XCTAssertEqual(core.command(.readRSSI(peripheral: "L"), from: 6, reply: 4, directory: directory), [.reply(4, .failure(.notConnected("L")))],
                       "another session's link is not this app's")
        XCTAssertEqual(core.command(.maximumWriteLength(peripheral: "L", withoutResponse: true), from: 5, reply: 5, directory: directory),
                       [.reply(5, .success(.maximumWriteLength(244)))])
        XCTAssertEqual(core.command(.maximumWriteLength(peripheral: "L", withoutResponse: false), from: 5, reply: 6, directory: directory),
                       [.reply(6, .success(.maximumWriteLength(512)))])
        XCTAssertEqual(core.command(.setConnectionLatency(central: "L", .low), from: 5, reply: 7, directory: directory),
                       [.reply(7, .failure(.noLinkWithCentral("L")))], "this stack is the lock's central, not its peripheral")
    }

    // CBPeripheralManager.setDesiredConnectionLatency(_:for:): LE Connection Update on the central's link.
    func testALatencyIsAskedOfTheCentralsLink() {
        var core = Core()
        let directory = Directory()
        _ = core.linkUp(handle: 0x41, identifier: "C", address: centralAddress, isCentral: false)
        XCTAssertEqual(core.command(.setConnectionLatency(central: "C", .high), from: 7, reply: 1, directory: directory),
                       [.askController(1, .connectionUpdate(link: 0x41, ConnectionLatency.high.parameters))])
    }

    // Core Bluetooth's rule: one answer per request. attd hears the app's answer before the app its acknowledgement;
    // a code that is not one ATT error is refused and leaves the request owed.
    func testAnAnswerToARemoteCentralGoesToAttdOnce() {
        var core = Core()
        let owner = ManagerKey(session: 7, manager: 1)
        core.router.publish(10...12, owner: owner)
        guard case .app = core.routeRemoteRequest(9, .read, handles: [12], expectsAnswer: true, isLive: { $0 == 7 }) else { return XCTFail("routed") }
        let directory = Directory()
        XCTAssertEqual(core.command(.respond(id: 9, attError: 0x1FF, value: []), from: 7, reply: 1, directory: directory),
                       [.reply(1, .failure(.notAnATTError(0x1FF)))])
        XCTAssertEqual(core.command(.respond(id: 9, attError: 0, value: [1]), from: 8, reply: 2, directory: directory),
                       [.reply(2, .failure(.requestNotPending(id: 9)))], "another app's answer")
        XCTAssertEqual(core.command(.respond(id: 9, attError: 0, value: [1]), from: 7, reply: 3, directory: directory),
                       [.answerRemote(id: 9, isRead: true, value: [1], attError: 0), .reply(3, .success(.ack))])
        XCTAssertEqual(core.command(.respond(id: 9, attError: 0, value: [1]), from: 7, reply: 4, directory: directory),
                       [.reply(4, .failure(.requestNotPending(id: 9)))], "answered already")
        XCTAssertEqual(core.command(.removeService(owner, start: 70_000), from: 7, reply: 5, directory: directory),
                       [.reply(5, .failure(.notPublished(startHandle: 70_000)))])
        XCTAssertEqual(core.command(.removeService(ManagerKey(session: 8, manager: 1), start: 10), from: 8, reply: 6, directory: directory),
                       [.reply(6, .failure(.notPublished(startHandle: 10)))], "another app's service")
        let removed = core.command(.removeService(owner, start: 10), from: 7, reply: 7, directory: directory)
        XCTAssertEqual(removed.last, .reply(7, .success(.ack)))
        XCTAssertTrue(removed.contains(.unpublish(startHandle: 10)))
    }

    // ScanTests: a scan started later hears, after its acknowledgement, the devices already heard that match it; and
    // advertising is laid out after the app heard its start acknowledged, so that it hears whether it started.
    func testAScanHearsWhatWasHeardAfterItsAcknowledgement() {
        var (core, key, _, directory) = central()
        _ = core.command(.startScan(key, ScanRequest()), from: 5, reply: 1, directory: directory)
        let report = AdvertisingReport(kind: .nonConnectable, address: lock, data: [0x02, 0x01, 0x06], rssi: -40)
        XCTAssertNotEqual(core.advertisingReceived(report, directory: directory), .heard([]))
        let later = ManagerKey(session: 6, manager: 1)
        let outputs = core.command(.startScan(later, ScanRequest()), from: 6, reply: 2, directory: directory)
        guard let acknowledged = outputs.firstIndex(of: .reply(2, .success(.ack))), case .discovered(let discovery) = outputs.last else {
            return XCTFail("\(outputs)")
        }
        XCTAssertEqual(acknowledged, outputs.count - 2)
        XCTAssertEqual(discovery.identifier, "L")
        XCTAssertEqual(discovery.target, later)

        let advertiser = ManagerKey(session: 7, manager: 1)
        let advertising = core.command(.startAdvertising(advertiser, Advertiser(localName: "T", serviceUUIDs: [])), from: 7, reply: 3, directory: directory)
        XCTAssertEqual(Array(advertising.suffix(2)), [.reply(3, .success(.ack)), .advertisingAsked(advertiser)])
    }
}
