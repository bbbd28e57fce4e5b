import BerylCore
import BerylManager
import BerylManagerWire
import BerylWire
import XCTest

/// An app's manager requests as managerd acts on them: typed, with a malformed field refused by name before anything
/// changes, and requests that are not a manager's left to managerd's other handlers.
final class ManagerCommandWireTests: XCTestCase {
    private typealias Kind = Beryl_Ipc_V1_ManagerRequest.OneOf_Kind

    private func refusal(_ kind: Kind, file: StaticString = #filePath, line: UInt = #line) -> WireFailure? {
        do {
            let command = try ManagerCommand(kind, session: 7)
            XCTFail("\(kind) was taken as \(String(describing: command))", file: file, line: line)
            return nil
        } catch {
            return error
        }
    }

    func testAScanIsTypedAndItsUUIDsChecked() throws {
        let start = Kind.startScan(.with { $0.manager = 2; $0.serviceUuids = ["180D"]; $0.solicitedServiceUuids = ["FEAA"]; $0.allowDuplicates = true })
        XCTAssertEqual(try ManagerCommand(start, session: 7),
                       .core(.startScan(ManagerKey(session: 7, manager: 2), ScanRequest(services: [BluetoothUUID(0x180D)], allowDuplicates: true,
                                                                                        solicited: [BluetoothUUID(0xFEAA)]))))
        XCTAssertEqual(refusal(.startScan(.with { $0.serviceUuids = ["180D", "heart"] }))?.field, "service_uuids")
        XCTAssertEqual(refusal(.startScan(.with { $0.solicitedServiceUuids = ["12345"] }))?.field, "solicited_service_uuids")
        XCTAssertEqual(refusal(.startScan(.with { $0.serviceUuids = ["heart"] }))?.code, .invalidArgument)
    }

    func testAdvertisingAndConnectedRetrievalCheckTheirUUIDs() throws {
        XCTAssertEqual(try ManagerCommand(.startAdvertising(.with { $0.manager = 1; $0.localName = "Thermo"; $0.serviceUuids = ["181A"] }), session: 7),
                       .core(.startAdvertising(ManagerKey(session: 7, manager: 1), Advertiser(localName: "Thermo", serviceUUIDs: [BluetoothUUID(0x181A)]))))
        XCTAssertEqual(refusal(.startAdvertising(.with { $0.serviceUuids = ["not-a-uuid"] }))?.field, "service_uuids")
        XCTAssertEqual(refusal(.retrieveConnected(.with { $0.serviceUuids = ["xyz"] }))?.field, "service_uuids")
    }

    // `beryl peripherals --peer` names addresses, apps name identifiers, and naming neither lists every device.
    func testARetrieveNamesAddressesIdentifiersOrEveryDevice() throws {
        let address = try XCTUnwrap(BDAddress("C0:FF:EE:00:00:01"))
        XCTAssertEqual(try ManagerCommand(.retrievePeripherals(.with { $0.addresses = ["C0:FF:EE:00:00:01/random"]; $0.identifiers = ["A"] }), session: 7),
                       .retrievePeripherals(.addresses([AddressQuery(address, type: .random)])))
        // A bare address keeps its type unsaid, for managerd to resolve against the devices heard.
        XCTAssertEqual(try ManagerCommand(.retrievePeripherals(.with { $0.addresses = ["C0:FF:EE:00:00:01", "C0:FF:EE:00:00:01/public"] }), session: 7),
                       .retrievePeripherals(.addresses([AddressQuery(address, type: nil), AddressQuery(address, type: .public)])))
        XCTAssertEqual(try ManagerCommand(.retrievePeripherals(.with { $0.identifiers = ["A", "B"] }), session: 7), .retrievePeripherals(.identifiers(["A", "B"])))
        XCTAssertEqual(try ManagerCommand(.retrievePeripherals(.init()), session: 7), .retrievePeripherals(.everyKnown))
        let bad = refusal(.retrievePeripherals(.with { $0.addresses = ["C0:FF:EE:00:00:01", "C0:FF:EE"] }))
        XCTAssertEqual(bad?.field, "addresses")
        XCTAssertEqual(bad?.code, .invalidArgument)
    }

    // Fields are checked before any state: a request naming no operation is refused as such, whether or not the app
    // holds the peripheral (before the decode, the link was looked up first).
    func testAGattRequestNamesAnOperation() throws {
        XCTAssertEqual(refusal(.gatt(.with { $0.peripheral = "A" }))?.field, "kind")
        let read = Beryl_Ipc_V1_GattOperation.with { $0.peripheral = "A"; $0.read.handle = 3 }
        XCTAssertEqual(try ManagerCommand(.gatt(read), session: 7), .gatt(read))
    }

    func testALatencyIsOneOfCoreBluetoothsThree() throws {
        XCTAssertEqual(try ManagerCommand(.setConnectionLatency(.with { $0.central = "C"; $0.latency = .high }), session: 7),
                       .core(.setConnectionLatency(central: "C", .high)))
        let unknown = refusal(.setConnectionLatency(.with { $0.central = "C"; $0.latency = .UNRECOGNIZED(9) }))
        XCTAssertEqual(unknown?.field, "latency")
        XCTAssertEqual(unknown?.code, .invalidArgument)
    }

    // registerForConnectionEvents(options:) matches identifiers as Core Bluetooth's UUIDs compare: case aside.
    func testConnectionEventInterestsCheckTheirIdentifiersAndServices() throws {
        let identifier = "6f3c1a9e-0000-4000-8000-00000000000a"
        XCTAssertEqual(try ManagerCommand(.registerConnectionEvents(.with { $0.manager = 3; $0.peripheralUuids = [identifier]; $0.serviceUuids = ["180D"] }),
                                          session: 7),
                       .core(.registerConnectionEvents(ManagerKey(session: 7, manager: 3),
                                                       .init(peripherals: [identifier.uppercased()], services: [BluetoothUUID(0x180D)]))))
        XCTAssertEqual(refusal(.registerConnectionEvents(.with { $0.peripheralUuids = ["lock"] }))?.field, "peripheral_uuids")
        XCTAssertEqual(refusal(.registerConnectionEvents(.with { $0.serviceUuids = ["lock"] }))?.field, "service_uuids")
    }

    // An answer's error code is checked by the core once it knows the request (one not pending is refused as that).
    func testAnAnswerKeepsItsCodeAsSent() throws {
        XCTAssertEqual(try ManagerCommand(.respond(.with { $0.id = 9; $0.error = 0x1FF; $0.value = Data([1, 2]) }), session: 7),
                       .core(.respond(id: 9, attError: 0x1FF, value: [1, 2])))
        XCTAssertEqual(try ManagerCommand(.removeService(.with { $0.manager = 1; $0.startHandle = 70_000 }), session: 7),
                       .core(.removeService(ManagerKey(session: 7, manager: 1), start: 70_000)), "a handle out of range is not this manager's: refused as not found")
    }

    func testRequestsThatAreNotAManagersAreLeftToTheirHandlers() throws {
        let others: [Kind] = [.hello(.init()), .getCapabilities(.init()), .appIdle(.init()), .invalidate(.init()), .subscribeAlerts(.init()),
                              .listApps(.init()), .launchApp(.init()), .stopApp(.init()), .setAppState(.init()), .labOpen(.init()), .labScan(.init()),
                              .labRemoveBond(.init())]
        for kind in others { XCTAssertNil(try ManagerCommand(kind, session: 7), "\(kind)") }
    }

    // Each refusal of the core reads as the error apps heard when managerd's shell made it: code, field and the
    // Core Bluetooth error or manager reason in the detail.
    func testEachCommandRefusalKeepsItsWireForm() {
        let cases: [(CommandRefusal, IPCErrorCode, String, RemoteDetail, String)] = [
            (.unknownPeripheral("P"), .notFound, "peripheral", RemoteDetail(bluetoothError: .unknownDevice), "no peripheral P is known"),
            (.notConnected("P"), .notFound, "peripheral", RemoteDetail(bluetoothError: .notConnected), "peripheral P is not connected for this app"),
            (.neitherHeldNorAwaited("P"), .notFound, "peripheral", RemoteDetail(bluetoothError: .unknownDevice), "this manager neither holds nor awaits P"),
            (.noLinkWithCentral("C"), .notFound, "central", RemoteDetail(bluetoothError: .notConnected), "no link with central C"),
            (.notPublished(startHandle: 70_000), .notFound, "start_handle", RemoteDetail(managerReason: .notPublished),
             "this manager published no service at handle 70000"),
            (.requestNotPending(id: 4), .notFound, "id", RemoteDetail(managerReason: .requestNotPending), "request 4 is not waiting for this app's answer"),
            (.notAnATTError(0x1FF), .invalidArgument, "error", RemoteDetail(bluetoothError: .invalidParameters), "ATT error codes are one byte; 511"),
        ]
        for (refusal, code, field, detail, message) in cases {
            let failure = WireFailure(refusal)
            XCTAssertEqual(failure.code, code, "\(refusal)")
            XCTAssertEqual(failure.field, field, "\(refusal)")
            XCTAssertEqual(failure.detail, detail, "\(refusal)")
            XCTAssertTrue(failure.message.hasPrefix(message), "\(refusal): \(failure.message)")
        }
    }

    // Read RSSI's return parameters are Connection_Handle then RSSI (Core Vol 4 Part E §7.5.4); fewer is the
    // controller's fault, not a value.
    func testTheControllersAnswerAnswersTheApp() throws {
        let rssi = try Response(answering: .readRSSI(link: 0x40), returned: [0x40, 0x00, 0xC4][...])
        XCTAssertEqual(rssi.manager.rssi.rssi, -60)
        XCTAssertThrowsError(try Response(answering: .readRSSI(link: 0x40), returned: [0x40, 0x00][...]))
        XCTAssertEqual(try Response(answering: .connectionUpdate(link: 0x41, ConnectionLatency.low.parameters), returned: [][...]).kind, .ack(.init()))
        XCTAssertEqual(ControllerAsk.readRSSI(link: 0x40).packet.parameters, [0x40, 0x00])
    }
}
