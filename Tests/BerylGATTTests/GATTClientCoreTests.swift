import BerylATT
import BerylCore
import BerylGATT
import XCTest

/// One link's GATT client core against a real server over bytes: what attd's shell used to compose with callbacks
/// (discovery, Service Changed, securing and retrying, the bearer's timeout) as deterministic scripts.
final class GATTClientCoreTests: XCTestCase {
    private static let heartRate = BluetoothUUID(0x180D)
    private static let measurement = BluetoothUUID(0x2A37)
    private static let secret = BluetoothUUID(0x2A38)
    private static let control = BluetoothUUID(0x2A39)
    private static let guarded = BluetoothUUID(0x2A3A)

    /// A GATTClient wired to an ATTServer; `deliver` carries bytes both ways until nothing is in flight.
    private final class Bench {
        let bearer = ATTClient()
        lazy var gatt = GATTClient(bearer: bearer)
        let database = AttributeDatabase()
        lazy var server = ATTServer(database: database)
        var security: GATTClient.Security? = GATTClient.Security(level: LinkSecurity(), canSecure: true)
        var now: Duration = .zero
        /// Every output the core gave but the PDUs, in order.
        var heard: [GATTClient.Output] = []
        var serverHeard: [ATTServerOutput] = []
        /// While false, the server's answers wait here instead of crossing.
        var serverAnswers = true
        var held: [[UInt8]] = []

        init() throws {
            try database.addCoreServices(deviceName: "Peer")
            try database.add(ServiceDefinition(uuid: GATTClientCoreTests.heartRate, characteristics: [
                CharacteristicDefinition(uuid: GATTClientCoreTests.measurement, properties: [.read, .notify], permissions: .readable, value: [0, 60]),
                CharacteristicDefinition(uuid: GATTClientCoreTests.secret, properties: [.read], permissions: [.readable, .readEncryptionRequired], value: [42]),
                CharacteristicDefinition(uuid: GATTClientCoreTests.guarded, properties: [.read], permissions: [.readable, .readAuthenticationRequired], value: [7]),
                CharacteristicDefinition(uuid: GATTClientCoreTests.control, properties: [.read, .write], permissions: [.readable, .writeable], value: [0]),
            ]))
        }

        func feed(_ outputs: [GATTClient.Output]) {
            var pdus: [[UInt8]] = []
            for output in outputs {
                if case .send(let bytes) = output { pdus.append(bytes) } else { heard.append(output) }
            }
            for bytes in pdus {
                for answer in server.receive(bytes) {
                    guard case .send(let reply) = answer else { serverHeard.append(answer); continue }
                    if serverAnswers { feed(gatt.receive(bearer.receive(reply, at: now), security: security, at: now)) } else { held.append(reply) }
                }
            }
        }

        func releaseHeld() {
            serverAnswers = true
            let replies = held
            held.removeAll()
            for reply in replies { feed(gatt.receive(bearer.receive(reply, at: now), security: security, at: now)) }
        }

        func finished(_ id: GATTClient.OperationID) -> Result<GATTClient.Outcome, GATTClient.Failure>? {
            for case .finished(id, let result) in heard { return result }
            return nil
        }

        var serviceChangedValueHandle: UInt16 {
            database.attributes.first { $0.type == GATTType.serviceChanged }!.handle
        }
    }

    /// GATT/CL/GAD/BV-04-C composed with §7.1: the whole database, and the peer's Service Changed subscribed to
    /// (0x0002 written to its CCCD) without the app asking.
    func testAWholeDiscoveryFindsEveryServiceAndSubscribesToServiceChanged() throws {
        let bench = try Bench()
        bench.feed(bench.gatt.start(.discover(DiscoveryScope(), .whole), id: 1, at: .zero))
        guard case .success(.services(let trees))? = bench.finished(1) else { return XCTFail("\(bench.heard)") }
        XCTAssertEqual(trees.map(\.service.uuid), [GATTType.gapService, GATTType.gattService, Self.heartRate])
        XCTAssertEqual(trees[2].characteristics.map(\.characteristic.uuid), [Self.measurement, Self.secret, Self.guarded, Self.control])
        XCTAssertEqual(bench.gatt.role.serviceChangedValueHandle, bench.serviceChangedValueHandle)
        XCTAssertTrue(bench.serverHeard.contains(.subscriptionChanged(valueHandle: bench.serviceChangedValueHandle, notify: false, indicate: true)),
                      "\(bench.serverHeard)")
        XCTAssertEqual(bench.gatt.operationsUnderWay, 0)
    }

    /// discoverServices alone: the app hears the services, and the client looks for Service Changed once, out of its sight.
    func testServicesAloneLookForServiceChangedOnceOutOfTheAppsSight() throws {
        let bench = try Bench()
        bench.feed(bench.gatt.start(.discover(DiscoveryScope(), .services), id: 1, at: .zero))
        guard case .success(.services(let trees))? = bench.finished(1) else { return XCTFail("\(bench.heard)") }
        XCTAssertTrue(trees.allSatisfy(\.characteristics.isEmpty), "services only")
        XCTAssertEqual(bench.gatt.role.serviceChangedValueHandle, bench.serviceChangedValueHandle, "found by the lookup after")
        XCTAssertEqual(bench.heard.filter { if case .finished = $0 { true } else { false } }.count, 1, "the lookup is not the app's")
        bench.feed(bench.gatt.start(.discover(DiscoveryScope(), .services), id: 2, at: .zero))
        XCTAssertEqual(bench.serverHeard.filter { $0 == .subscriptionChanged(valueHandle: bench.serviceChangedValueHandle, notify: false, indicate: true) }.count, 1,
                       "looked for and subscribed once per link")
    }

    /// GATT/CL/GAI/BV-03-C's client side: indications that arrive while a re-discovery runs wait, merged, for it to end.
    func testAStormOfServiceChangedIndicationsRediscoversOneRangeAtATime() throws {
        let bench = try Bench()
        bench.feed(bench.gatt.start(.discover(DiscoveryScope(), .whole), id: 1, at: .zero))
        let changed = bench.serviceChangedValueHandle
        bench.heard.removeAll()
        bench.serverAnswers = false
        for index in 0..<20 {
            let start = UInt16(0x0100 + index * 4)
            bench.feed(bench.gatt.receive([.indication(handle: changed, value: ServiceChangedValue.encode(start...(start + 3)))], security: bench.security, at: .zero))
        }
        XCTAssertEqual(bench.held.count, 1, "one re-discovery request in flight, not twenty")
        bench.releaseHeld()
        let changes = bench.heard.compactMap { output -> ClosedRange<UInt16>? in
            if case .serviceChanged(let range, .success) = output { range } else { nil }
        }
        XCTAssertEqual(changes, [0x0100...0x0103, 0x0104...0x014F], "the first, then the nineteen merged")
        XCTAssertFalse(bench.gatt.role.rediscovering)
        bench.feed(bench.gatt.receive([.indication(handle: changed + 7, value: [1, 0, 2, 0])], security: bench.security, at: .zero))
        XCTAssertEqual(bench.heard.last, .notification(handle: changed + 7, value: [1, 0, 2, 0], indication: true), "another characteristic's is the app's")
    }

    /// A bonded peer indicates a change made while we were away as soon as the link is up (Core Vol 3 Part G §7.1),
    /// before anything is discovered on it: a client told where the peer's Service Changed is (found on an earlier
    /// link, kept with the bond) re-discovers the range; one not told hands the indication to the app as any other.
    func testServiceChangedRememberedFromAnEarlierLinkIsRecognisedBeforeAnyDiscovery() throws {
        let earlier = try Bench()
        earlier.feed(earlier.gatt.start(.discover(DiscoveryScope(), .whole), id: 1, at: .zero))
        let changed = earlier.serviceChangedValueHandle
        XCTAssertTrue(earlier.heard.contains(.serviceChangedFound(valueHandle: changed)), "\(earlier.heard)")

        let remembering = try Bench()
        remembering.gatt.rememberServiceChanged(changed)
        let range = ServiceChangedValue.encode(0x0001...0xFFFF)
        remembering.feed(remembering.gatt.receive([.indication(handle: changed, value: range)], security: remembering.security, at: .zero))
        XCTAssertTrue(remembering.heard.contains { if case .serviceChanged(0x0001...0xFFFF, .success) = $0 { true } else { false } }, "\(remembering.heard)")
        XCTAssertFalse(remembering.heard.contains { if case .notification = $0 { true } else { false } })
        XCTAssertFalse(remembering.heard.contains { if case .serviceChangedFound = $0 { true } else { false } }, "already known: not found anew")
        XCTAssertEqual(remembering.serverHeard.filter { if case .subscriptionChanged = $0 { true } else { false } }.count, 0,
                       "a bonded peer kept our subscription: not written again")

        let forgetful = try Bench()
        forgetful.feed(forgetful.gatt.receive([.indication(handle: changed, value: range)], security: forgetful.security, at: .zero))
        XCTAssertEqual(forgetful.heard.last, .notification(handle: changed, value: range, indication: true))
    }

    /// Core Vol 3 Part C §10.3.2, as iOS does it: Insufficient Authentication on an unencrypted link secures the link, then the same request goes again once.
    func testAnEncryptionErrorSecuresTheLinkAndRetriesOnce() throws {
        let bench = try Bench()
        let value = try XCTUnwrap(bench.database.attributes.first { $0.type == Self.secret }).handle
        bench.feed(bench.gatt.start(.read(handle: value), id: 1, at: .zero))
        bench.feed(bench.gatt.start(.read(handle: value), id: 2, at: .zero))
        XCTAssertEqual(bench.heard.filter { $0 == .secure }.count, 1, "one request to secure the link for both")
        XCTAssertNil(bench.finished(1))
        XCTAssertEqual(bench.gatt.operationsUnderWay, 2)

        bench.server.security = LinkSecurity(encrypted: true)
        bench.security?.level = LinkSecurity(encrypted: true)
        bench.feed(bench.gatt.secured(true, at: .zero))
        XCTAssertEqual(bench.finished(1), .success(.value([42])))
        XCTAssertEqual(bench.finished(2), .success(.value([42])))
    }

    /// Secured but still refused (Just Works where MITM is required): the same request is not sent a third time.
    func testARequestIsRetriedOnlyOnceAfterSecuring() throws {
        let bench = try Bench()
        let value = try XCTUnwrap(bench.database.attributes.first { $0.type == Self.guarded }).handle
        bench.feed(bench.gatt.start(.read(handle: value), id: 1, at: .zero))
        XCTAssertEqual(bench.heard.filter { $0 == .secure }.count, 1)
        bench.server.security = LinkSecurity(encrypted: true)
        bench.security?.level = LinkSecurity(encrypted: true)
        bench.feed(bench.gatt.secured(true, at: .zero))
        XCTAssertEqual(bench.finished(1), .failure(.att(.insufficientAuthentication)))
        XCTAssertEqual(bench.heard.filter { $0 == .secure }.count, 1)
    }

    func testWhenSecuringFailsTheAppHearsTheServersError() throws {
        let bench = try Bench()
        let value = try XCTUnwrap(bench.database.attributes.first { $0.type == Self.secret }).handle
        bench.feed(bench.gatt.start(.read(handle: value), id: 1, at: .zero))
        bench.feed(bench.gatt.secured(false, at: .zero))
        XCTAssertEqual(bench.finished(1), .failure(.att(.insufficientAuthentication)), "unencrypted without a key: Core Vol 3 Part C §10.3.1")
    }

    func testAnErrorSecurityCannotCureIsTheAppsAtOnce() throws {
        let bench = try Bench()
        let value = try XCTUnwrap(bench.database.attributes.first { $0.type == Self.secret }).handle
        bench.security = GATTClient.Security(level: LinkSecurity(), canSecure: false)
        bench.feed(bench.gatt.start(.read(handle: value), id: 1, at: .zero))
        XCTAssertFalse(bench.heard.contains(.secure))
        XCTAssertEqual(bench.finished(1), .failure(.att(.insufficientAuthentication)), "unencrypted without a key: Core Vol 3 Part C §10.3.1")

        // Already encrypted and still refused: a second pairing would not help either.
        bench.security = GATTClient.Security(level: LinkSecurity(encrypted: true), canSecure: true)
        bench.feed(bench.gatt.start(.read(handle: 0x7FFF), id: 2, at: .zero))
        XCTAssertEqual(bench.finished(2), .failure(.att(.invalidHandle)))
        XCTAssertFalse(bench.heard.contains(.secure))
    }

    /// Core Vol 3 Part F §3.3.3: no answer in 30 s fails the outstanding and queued requests, and the link is ended once.
    func testTheTransactionTimeoutFailsEveryOperationAndEndsTheLinkOnce() throws {
        let bench = try Bench()
        bench.serverAnswers = false
        bench.feed(bench.gatt.start(.read(handle: 3), id: 1, at: .zero))
        bench.feed(bench.gatt.start(.write(handle: 3, value: [1]), id: 2, at: .seconds(1)))
        bench.feed(bench.gatt.tick(security: bench.security, at: .seconds(29)))
        XCTAssertNil(bench.finished(1))
        bench.feed(bench.gatt.tick(security: bench.security, at: .seconds(30)))
        XCTAssertEqual(bench.finished(1), .failure(.bearerTimedOut))
        XCTAssertEqual(bench.finished(2), .failure(.bearerTimedOut))
        XCTAssertEqual(bench.heard.filter { $0 == .disconnect }.count, 1)
        XCTAssertFalse(bench.gatt.isUsable)
        bench.feed(bench.gatt.start(.read(handle: 3), id: 3, at: .seconds(31)))
        XCTAssertEqual(bench.finished(3), .failure(.bearerTimedOut), "the bearer takes nothing after")
        XCTAssertEqual(bench.heard.filter { $0 == .disconnect }.count, 1)
    }

    /// Operations parked on security and ones waiting for an answer both end as the link's, not with a stand-in code.
    func testALinkClosedFailsRunningAndParkedOperations() throws {
        let bench = try Bench()
        let value = try XCTUnwrap(bench.database.attributes.first { $0.type == Self.secret }).handle
        bench.feed(bench.gatt.start(.read(handle: value), id: 1, at: .zero))
        bench.serverAnswers = false
        bench.feed(bench.gatt.start(.discover(DiscoveryScope(), .whole), id: 2, at: .zero))
        bench.feed(bench.gatt.linkClosed())
        XCTAssertEqual(bench.finished(1), .failure(.linkClosed))
        XCTAssertEqual(bench.finished(2), .failure(.linkClosed))
        XCTAssertEqual(bench.gatt.operationsUnderWay, 0)
    }

    /// GATT/CL/GAW/BV-06-C with a server whose echo differs: nothing is written and the app hears the cancel.
    func testAReliableWriteWhoseEchoDiffersIsCancelled() throws {
        let bench = try Bench()
        let value = try XCTUnwrap(bench.database.attributes.first { $0.type == Self.control }).handle
        bench.serverAnswers = false
        bench.feed(bench.gatt.start(.reliableWrite([HandleValue(handle: value, value: [1, 2, 3])]), id: 1, at: .zero))
        let echo = try XCTUnwrap(bench.held.first)
        bench.held = [Array(echo.dropLast()) + [9]]
        bench.releaseHeld()
        XCTAssertEqual(bench.finished(1), .failure(.reliableWriteCancelled))
        XCTAssertEqual(bench.database.attribute(at: value)?.value, .fixed([0]), "nothing written")
    }

    func testTheMTUExchangeReportsTheAgreedMTU() throws {
        let bench = try Bench()
        bench.feed(bench.gatt.exchangeMTU(offering: 247, at: .zero))
        XCTAssertEqual(bench.heard, [.mtuExchanged(mtu: 247, refused: nil)])
        XCTAssertEqual(bench.gatt.mtu, 247)
    }

    /// A subscription writes the CCCD with the bits Core Vol 3 Part G §3.3.3.3 gives; off is 0x0000.
    func testConfiguringWritesTheCCCDBits() throws {
        let bench = try Bench()
        let value = try XCTUnwrap(bench.database.attributes.first { $0.type == Self.measurement }).handle
        bench.feed(bench.gatt.start(.configure(cccd: value + 1, notify: true, indicate: false), id: 1, at: .zero))
        XCTAssertEqual(bench.finished(1), .success(.written))
        XCTAssertEqual(bench.serverHeard.last, .subscriptionChanged(valueHandle: value, notify: true, indicate: false))
        bench.feed(bench.gatt.start(.configure(cccd: value + 1, notify: false, indicate: false), id: 2, at: .zero))
        XCTAssertEqual(bench.serverHeard.last, .subscriptionChanged(valueHandle: value, notify: false, indicate: false))
    }
}
