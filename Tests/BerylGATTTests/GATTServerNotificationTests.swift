import BerylATT
import BerylCore
import BerylCrypto
import BerylGATT
import XCTest

final class GATTServerNotificationTests: XCTestCase {
    /// GATT/SR/GAN/BV-01-C and GATT/SR/GAI/BV-01-C: notifications and indications to a subscribed client.
    func testGATT_SR_GAN_BV_01_C_notificationsAndIndications() throws {
        let (server, _) = try makeServer()
        XCTAssertNil(server.notification(valueHandle: 11, value: [1]), "not subscribed")
        XCTAssertEqual(server.receive([0x12] + le(12) + [0x01, 0x00]), [.subscriptionChanged(valueHandle: 11, notify: true, indicate: false), .send([0x13])])
        XCTAssertEqual(server.notification(valueHandle: 11, value: [0, 72]), [0x1B] + le(11) + [0, 72])
        XCTAssertEqual(server.notification(valueHandle: 11, value: [UInt8](repeating: 1, count: 100))?.count, 23, "clipped to ATT_MTU - 3")
        XCTAssertEqual(sent(server.receive([0x0A] + le(12))), [0x0B, 0x01, 0x00], "the CCCD reads back")

        XCTAssertFalse(server.indicate(valueHandle: 11, value: [1]).subscribed)
        _ = server.receive([0x12] + le(12) + [0x02, 0x00])
        let first = server.indicate(valueHandle: 11, value: [1])
        XCTAssertEqual(first.outputs, [.send([0x1D] + le(11) + [1])])
        let second = server.indicate(valueHandle: 11, value: [2])
        XCTAssertEqual(second.outputs, [], "one indication outstanding at a time")
        XCTAssertEqual(server.receive([0x1E]), [.indicationConfirmed(handle: 11), .send([0x1D] + le(11) + [2])])
        XCTAssertEqual(server.receive([0x1E]), [.indicationConfirmed(handle: 11)])
        XCTAssertEqual(sent(server.receive([0x12] + le(12) + [1])), [0x01, 0x12] + le(12) + [0x0D], "a CCCD is two bytes")
    }

    /// Core Vol 3 Part F §3.3.3: an indication is a transaction; unconfirmed for 30 s it times out, once, and the bearer
    /// carries nothing more — queued indications, notifications and responses included.
    func testAnIndicationUnconfirmedFor30SecondsEndsTheBearersUse() throws {
        let (server, _) = try makeServer()
        _ = server.receive([0x12] + le(12) + [0x03, 0x00])
        XCTAssertEqual(server.indicate(valueHandle: 11, value: [1]).outputs, [.send([0x1D] + le(11) + [1])])
        XCTAssertEqual(server.tick(at: .seconds(100)), [], "first seen")
        XCTAssertEqual(server.receive([0x1E]), [.indicationConfirmed(handle: 11)])
        XCTAssertEqual(server.tick(at: .seconds(140)), [], "nothing outstanding")

        _ = server.indicate(valueHandle: 11, value: [2])
        XCTAssertTrue(server.indicate(valueHandle: 11, value: [3]).subscribed, "queued behind the outstanding one")
        XCTAssertEqual(server.tick(at: .seconds(200)), [])
        XCTAssertEqual(server.tick(at: .milliseconds(229_900)), [], "29.9 s")
        XCTAssertEqual(server.tick(at: .seconds(230)), [.indicationTimedOut(handle: 11)])
        XCTAssertEqual(server.tick(at: .seconds(300)), [], "said once")
        XCTAssertFalse(server.isUsable)
        XCTAssertEqual(server.receive([0x1E]), [.log("ATT PDU after a transaction timeout dropped")], "the queued indication is not sent")
        XCTAssertEqual(server.receive([0x0A] + le(12)), [.log("ATT PDU after a transaction timeout dropped")], "no response either")
        XCTAssertNil(server.notification(valueHandle: 11, value: [4]))
        XCTAssertEqual(server.indicate(valueHandle: 11, value: [5]).outputs, [])
    }

    func testSubscriptionsCarryOverForABondedPeer() throws {
        let (_, database) = try makeServer()
        let restored = ATTServer(database: database, clientConfigurations: [12: 0x0001])
        XCTAssertEqual(restored.notification(valueHandle: 11, value: [9]), [0x1B] + le(11) + [9])
        let later = ATTServer(database: database)
        let turnedOn = later.restore(clientConfigurations: [12: 0x0002, 11: 0x0001, 400: 1], clientFeatures: [0x01])
        XCTAssertEqual(turnedOn.map(\.valueHandle), [11], "the value its CCCD belongs to, for the owner to hear")
        XCTAssertTrue(later.restore(clientConfigurations: [12: 0x0002], clientFeatures: []).isEmpty, "unchanged: nothing to say again")
        XCTAssertEqual(later.clientConfigurations, [12: 0x0002], "only handles that are still CCCDs come back")
        XCTAssertTrue(later.indicate(valueHandle: 11, value: [1]).subscribed)
        XCTAssertEqual(later.clientFeatures, [0x01])
    }

    /// What a restarted managerd hears of the subscriptions to an adopted app's service.
    func testThePeersSubscriptionsInAServiceAreListedByValue() throws {
        let (_, database) = try makeServer()
        let server = ATTServer(database: database, clientConfigurations: [12: 0x0002])
        XCTAssertEqual(server.subscriptions(in: 1...20).map(\.valueHandle), [11])
        XCTAssertEqual(server.subscriptions(in: 1...20).map(\.value), [0x0002])
        XCTAssertTrue(server.subscriptions(in: 13...20).isEmpty, "another service's range")
        _ = server.restore(clientConfigurations: [12: 0x0000], clientFeatures: [])
        XCTAssertTrue(server.subscriptions(in: 1...20).isEmpty, "an unsubscribed CCCD is no subscription")
    }

    /// Read Multiple over dynamic values: each owner is asked in turn, and one refusal refuses the whole read.
    func testReadMultipleFetchesDynamicValuesFromTheirOwners() throws {
        let (server, _) = try makeServer()
        guard case .readRequested(let id, 22, 0)? = server.receive([0x0E] + le(6) + le(22) + le(14)).first else { return XCTFail("owner not asked") }
        XCTAssertEqual(sent(server.completeRead(id: id, with: .success([0xAA, 0xBB]))), [0x0F, 87, 0xAA, 0xBB, 2])
        guard case .readRequested(let second, 22, 0)? = server.receive([0x0E] + le(22) + le(6)).first else { return XCTFail() }
        XCTAssertEqual(sent(server.completeRead(id: second, with: .failure(.insufficientAuthorization))), [0x01, 0x0E] + le(22) + [0x08])
        XCTAssertEqual(sent(server.receive([0x0E] + le(6) + le(14))), [0x0F, 87, 2], "the bearer is free again")
        XCTAssertEqual(sent(server.receive([0x0E] + le(22) + le(300))), [0x01, 0x0E] + le(300) + [0x01], "handles are checked before any owner is asked")
    }
}
