import BerylCore
import BerylManager
import XCTest

/// managerd restarted under apps whose data channels attd kept (att.proto's AdoptDataChannel): what the app had comes
/// back as its new session's, quietly, and nothing is done twice.
final class ManagerCoreAdoptionTests: XCTestCase {
    private typealias Core = ManagerCore<String>
    private let thermo = PreservedState.PublishedService(definition: ServiceDefinition(uuid: BluetoothUUID(0x181A), primary: true),
                                                         handles: 10...12, valueHandles: [12])
    private let lock = DeviceAddress("C0:FF:EE:00:00:01/random")!

    /// The thermostat's record was read back by the restarted managerd (its services to publish again), and the app,
    /// still running with its services in attd, says Hello again: the adopted services are its own, at their
    /// handles, and no second copy is published.
    func testAnAdoptedAppsServicesAreItsOwnAndNotPublishedAgain() throws {
        var core = Core()
        let record = PreservedState(peripheral: .init(services: [thermo]))
        let preserved = core.resume(appID: "thermo", restoreID: "t", role: .peripheral, from: record) { _ in nil }
        XCTAssertEqual(core.pendingRepublish[preserved.key], [thermo], "read back: waiting to be published again")
        guard case .restorable(let restorable) = core.restoration.bind(appID: "thermo", restoreID: "t", role: .peripheral, session: 8) else {
            return XCTFail("the app's Hello comes back for its manager")
        }
        XCTAssertNotNil(core.restore(restorable.id, into: 8, name: { _ in "" }))

        let adopted = core.adopted(8, manager: 1, services: [thermo], heldLinks: [], heard: [])
        XCTAssertEqual(adopted.outputs, [.persist(preservedID: preserved.id)], "its record now has what attd kept")
        XCTAssertEqual(core.router.owner(of: 12), ManagerKey(session: 8, manager: 1))
        XCTAssertEqual(core.serviceSpecs[10], thermo)
        XCTAssertEqual(core.takeRepublications(), [], "nothing is published beside the kept copy")
        let kept = try XCTUnwrap(core.restoration.manager(id: preserved.id))
        XCTAssertEqual(core.snapshot(kept, name: { _ in "" }).peripheral?.services, [thermo])
    }

    /// A central app kept its link to the lock and its subscription: its new session holds the link and hears the
    /// value without a connection event; a link that went meanwhile is left out.
    func testAnAdoptedCentralHoldsItsLinkAndHearsItsValuesQuietly() {
        var core = Core()
        _ = core.connections.controller(poweredOn: true)
        // Taken back from attd by the restarted managerd: up, held by no one yet.
        let up = core.linkUp(handle: 0x40, identifier: "L", address: lock, isCentral: true)
        XCTAssertFalse(up.contains { if case .connections(.event) = $0 { true } else { false } }, "\(up)")
        let adopted = core.adopted(5, manager: 1, services: [], heldLinks: [0x40, 0x41],
                                   heard: [.init(link: 0x40, valueHandle: 0x21), .init(link: 0x41, valueHandle: 0x31)])
        XCTAssertEqual(adopted.heldLinks, [0x40], "0x41 is gone")
        XCTAssertEqual(adopted.outputs, [], "no connection event, no controller work")
        XCTAssertEqual(core.book.link(for: "L")?.holders, [ManagerKey(session: 5, manager: 1)])
        XCTAssertEqual(core.audience(ofNotification: 0x21, onLink: 0x40)?.holders, [.session(5)])

        // It holds the link: when the link drops, it hears so.
        let down = core.linkDown(handle: 0x40, reason: 0x08)
        XCTAssertTrue(down.contains(.connections(.event(.disconnected(ManagerKey(session: 5, manager: 1), identifier: "L", reason: 0x08)))), "\(down)")
    }
}
