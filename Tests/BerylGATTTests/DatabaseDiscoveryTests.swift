import BerylATT
import BerylCore
import BerylGATT
import XCTest

/// The whole-database discovery attd runs for an app, and the Service Changed bookkeeping around it, against a real
/// server over the loopback bearer.
final class DatabaseDiscoveryTests: XCTestCase {
    private static let heartRate = BluetoothUUID(0x180D)
    private static let measurement = BluetoothUUID(0x2A37)
    private static let location = BluetoothUUID(0x2A38)
    private static let custom = BluetoothUUID("6E400001-B5A3-F393-E0A9-E50E24DCCA9E")!

    private func peer() throws -> Loopback {
        let database = AttributeDatabase()
        try database.addCoreServices(deviceName: "Peer")
        let heartRate = try database.add(ServiceDefinition(uuid: Self.heartRate, characteristics: [
            CharacteristicDefinition(uuid: Self.measurement, properties: [.notify], permissions: [], value: [0, 60]),
            CharacteristicDefinition(uuid: Self.location, properties: [.read], permissions: .readable, value: [1],
                                     descriptors: [DescriptorDefinition(uuid: BluetoothUUID(0x2901), value: Array("Where".utf8))]),
        ]))
        try database.add(ServiceDefinition(uuid: Self.custom, includes: [heartRate], characteristics: [
            CharacteristicDefinition(uuid: BluetoothUUID("6E400002-B5A3-F393-E0A9-E50E24DCCA9E")!, properties: [.read, .indicate], permissions: .readable, value: [7]),
        ]))
        return Loopback(database: database)
    }

    private func discover(_ link: Loopback, _ scope: DiscoveryScope = DiscoveryScope(), looking: Bool = true) -> (GATTStep<[DiscoveredServiceTree]>, DatabaseDiscovery) {
        var discovery = DatabaseDiscovery(scope: scope, looksForServiceChanged: looking)
        let result = link.run(discovery.start()) { discovery.handle($0) }
        return (result, discovery)
    }

    /// GATT/CL/GAD/BV-01-C, -03-C, -04-C, -06-C composed: every service with its includes, characteristics and
    /// descriptors, as attributes on the server say.
    func testTheWholeDatabaseMatchesTheServers() throws {
        let link = try peer()
        let (result, discovery) = discover(link)
        guard case .done(let trees) = result else { return XCTFail("\(result)") }
        XCTAssertEqual(trees.map(\.service.uuid), [BluetoothUUID(0x1800), BluetoothUUID(0x1801), Self.heartRate, Self.custom])
        for tree in trees {
            XCTAssertEqual(link.database.attributes.first { $0.handle == tree.service.start }?.type, GATTType.primaryService)
        }
        let heartRate = try XCTUnwrap(trees.first { $0.service.uuid == Self.heartRate })
        XCTAssertEqual(heartRate.characteristics.map(\.characteristic.uuid), [Self.measurement, Self.location])
        XCTAssertEqual(heartRate.characteristics[0].descriptors.map(\.uuid), [GATTType.clientConfiguration])
        XCTAssertEqual(heartRate.characteristics[1].descriptors.map(\.uuid), [BluetoothUUID(0x2901)])
        let custom = try XCTUnwrap(trees.last)
        XCTAssertEqual(custom.included.map(\.uuid), [Self.heartRate])
        XCTAssertEqual(custom.included.first?.start, heartRate.service.start)
        let changed = try XCTUnwrap(discovery.serviceChanged)
        XCTAssertEqual(link.database.attributes.first { $0.handle == changed.valueHandle }?.type, GATTType.serviceChanged)
        XCTAssertEqual(changed.cccd, changed.valueHandle + 1)
    }

    /// A scope naming one characteristic still finds Service Changed with its CCCD while the role does not know it.
    func testAFilteredDiscoveryStillFindsServiceChangedUntilItIsKnown() throws {
        let link = try peer()
        let scope = DiscoveryScope(services: [Self.heartRate, GATTType.gattService], characteristics: [Self.location])
        guard case (.done(let trees), let discovery) = discover(link, scope) else { return XCTFail() }
        XCTAssertEqual(trees.map(\.service.uuid), [GATTType.gattService, Self.heartRate], "sorted by handle")
        XCTAssertEqual(trees[1].characteristics.map(\.characteristic.uuid), [Self.location])
        XCTAssertNotNil(discovery.serviceChanged?.cccd)
        guard case (.done(let again), _) = discover(link, scope, looking: false) else { return XCTFail() }
        XCTAssertTrue(again[0].characteristics.isEmpty, "known already: the filter holds")
    }

    /// A characteristic whose descriptors cannot be read is kept without them; the rest of the discovery goes on.
    func testADescriptorErrorSkipsOnlyThatCharacteristic() throws {
        let link = try peer()
        var refused = false
        link.tamper = { answer in
            guard answer.first == ATTOpcode.findInformationResponse.rawValue, !refused else { return answer }
            refused = true
            return ATTPDU.errorResponse(request: ATTOpcode.findInformationRequest.rawValue, handle: 0, error: .unlikelyError).encoded
        }
        guard case (.done(let trees), let discovery) = discover(link) else { return XCTFail() }
        // The first Find Information goes to Service Changed (the GAP characteristics leave no room for descriptors).
        let changed = try XCTUnwrap(trees.flatMap(\.characteristics).first { $0.characteristic.uuid == GATTType.serviceChanged })
        XCTAssertTrue(changed.descriptors.isEmpty, "the first characteristic with descriptors lost them")
        XCTAssertEqual(discovery.serviceChanged?.valueHandle, changed.characteristic.valueHandle)
        XCTAssertNil(discovery.serviceChanged?.cccd, "known, but without a CCCD to subscribe with")
        XCTAssertEqual(trees.last?.service.uuid, Self.custom, "and discovery reached the last service")
        XCTAssertFalse(trees.first { $0.service.uuid == Self.heartRate }!.characteristics[1].descriptors.isEmpty)
    }

    /// GATT/CL/GAD/BV-01-C and -02-C alone, as `discoverServices` asks: no includes, characteristics or descriptors.
    func testServicesOnlyStopsAfterThePrimaryServices() throws {
        let link = try peer()
        var discovery = DatabaseDiscovery(scope: DiscoveryScope(services: [Self.custom, Self.heartRate]), looksForServiceChanged: false, servicesOnly: true)
        let result = link.run(discovery.start()) { discovery.handle($0) }
        guard case .done(let trees) = result else { return XCTFail("\(result)") }
        XCTAssertEqual(trees.map(\.service.uuid), [Self.heartRate, Self.custom], "sorted by handle")
        XCTAssertTrue(trees.allSatisfy { $0.included.isEmpty && $0.characteristics.isEmpty })
        XCTAssertFalse(link.serverSaw.isEmpty)
        XCTAssertTrue(link.serverSaw.allSatisfy { $0.first == ATTOpcode.findByTypeValueRequest.rawValue }, "Find By Type Value only, per UUID")
    }

    func testAScopeNamingNoServiceDiscoversNothing() throws {
        let link = try peer()
        XCTAssertEqual(discover(link, DiscoveryScope(services: [])).0, .done([]))
    }

    /// Service Changed is known as soon as its descriptors are, not when the whole database is: the shell subscribes
    /// then, so an indication during the rest of a long discovery starts a re-discovery instead of reaching apps.
    func testServiceChangedIsKnownBeforeTheDiscoveryEnds() throws {
        let link = try peer()
        var discovery = DatabaseDiscovery(scope: DiscoveryScope(), looksForServiceChanged: true)
        var requestsAfterLearning = 0
        var firstSeen: (valueHandle: UInt16, cccd: UInt16?)?
        let result = link.run(discovery.start()) { response in
            let step = discovery.handle(response)
            if firstSeen == nil { firstSeen = discovery.serviceChanged }
            if discovery.serviceChanged != nil, case .request = step { requestsAfterLearning += 1 }
            return step
        }
        XCTAssertNotNil(firstSeen?.cccd, "never shown before its CCCD is known, or the shell would learn it without subscribing")
        guard case .done = result else { return XCTFail("\(result)") }
        XCTAssertNotNil(discovery.serviceChanged?.cccd)
        XCTAssertGreaterThan(requestsAfterLearning, 2, "the heart rate and custom services were still to be described")
    }

    func testAnErrorFindingServicesFailsTheDiscovery() throws {
        let link = try peer()
        link.tamper = { answer in
            answer.first == ATTOpcode.readByGroupTypeResponse.rawValue
                ? ATTPDU.errorResponse(request: ATTOpcode.readByGroupTypeRequest.rawValue, handle: 1, error: .insufficientAuthentication).encoded : answer
        }
        XCTAssertEqual(discover(link).0, .failed(.insufficientAuthentication))
    }

    /// Thousands of characteristics without descriptors are taken in a loop: no recursion per characteristic.
    func testAServiceWithThousandsOfCharacteristics() throws {
        let database = AttributeDatabase()
        try database.add(ServiceDefinition(uuid: Self.custom, characteristics: (0..<3000).map { index in
            CharacteristicDefinition(uuid: BluetoothUUID(UInt16(0x3000 + index % 0x1000)), properties: .read, permissions: .readable, value: [])
        }))
        let link = Loopback(database: database)
        guard case (.done(let trees), _) = discover(link) else { return XCTFail() }
        XCTAssertEqual(trees.first?.characteristics.count, 3000)
    }

    /// GATT/CL/GAI/BV-03-C's client side: a storm of Service Changed indications, each confirmed on the wire, makes one
    /// re-discovery at a time; what comes meanwhile is merged into the next.
    func testAStormOfServiceChangedIndicationsMakesOneRediscoveryAtATime() throws {
        let link = try peer()
        var role = GATTClientRole()
        guard case (.done, let discovery) = discover(link, looking: role.discoveryLooksForServiceChanged) else { return XCTFail() }
        let cccd = try XCTUnwrap(role.learn(from: discovery))
        var subscribe = GATTStep<Bool>.request(.writeRequest(handle: cccd, value: [0x02, 0x00]))
        subscribe = link.run(subscribe) { _ in .done(true) }
        XCTAssertNil(role.learn(from: discovery), "subscribed once")

        var actions: [GATTClientRole.IndicationAction] = []
        for index in 0..<40 {
            let start = UInt16(0x0100 + index * 4)
            let (subscribed, outputs) = link.server.indicateServiceChanged(start...(start + 3))
            XCTAssertTrue(subscribed)
            var pending = outputs
            while !pending.isEmpty {
                guard case .send(let bytes) = pending.removeFirst() else { continue }
                for output in link.client.receive(bytes, at: .zero) {
                    switch output {
                    case .indication(let handle, let value): actions.append(role.indicated(handle: handle, value: value))
                    case .send(let confirmation): pending += link.server.receive(confirmation)
                    default: break
                    }
                }
            }
        }
        XCTAssertEqual(actions.count, 40, "every indication arrived, one confirmed before the next")
        XCTAssertEqual(actions.first, .rediscover(0x0100...0x0103))
        XCTAssertEqual(actions.dropFirst().filter { $0 != .merged }, [])
        XCTAssertEqual(role.rediscoveryFinished(), 0x0104...0x019F, "the 39 that came meanwhile, merged")
        XCTAssertTrue(role.rediscovering)
        XCTAssertNil(role.rediscoveryFinished())
        XCTAssertFalse(role.rediscovering)
        XCTAssertEqual(role.indicated(handle: discovery.serviceChanged!.valueHandle, value: [1, 0, 2, 0]), .rediscover(1...2))
        XCTAssertEqual(role.indicated(handle: 0x0042, value: [1, 0, 2, 0]), .deliver, "another characteristic's indication is the app's")
        XCTAssertEqual(role.indicated(handle: discovery.serviceChanged!.valueHandle, value: [1, 0]), .deliver, "not a range: not a change")
    }

    func testServicesAloneLookForServiceChangedOncePerLink() {
        var role = GATTClientRole()
        XCTAssertTrue(role.shouldLookForServiceChanged())
        XCTAssertFalse(role.shouldLookForServiceChanged())
    }
}
