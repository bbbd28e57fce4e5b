@testable import BerylGATT
import XCTest

/// What an app's data channel may do, and where what is addressed to an app goes (DataGrants, sans-IO).
final class DataGrantsTests: XCTestCase {
    private let managerd: PublisherID = 3
    private func app(_ id: UInt64) -> UpdateSender { UpdateSender(publisher: managerd, onBehalfOf: id) }

    func testAChannelActsForItsOwnAppOnlyWhileItsGrantIsLive() {
        var grants = DataGrants()
        XCTAssertNil(grants.opened(10, for: app(7), live: true))
        XCTAssertEqual(grants.admit(10), .success(app(7)), "the channel's own app, never one a request names")
        XCTAssertEqual(grants.admit(11), .failure(.notADataOperation), "a session that is no channel")
        XCTAssertEqual(grants.setLive(app(7), false), 10, "the channel to tell")
        XCTAssertNil(grants.setLive(app(7), false), "told once")
        XCTAssertEqual(grants.admit(10), .failure(.revoked))
        XCTAssertNil(grants.liveChannel(of: app(7)), "its events go through managerd while revoked")
        XCTAssertEqual(grants.setLive(app(7), true), 10)
        XCTAssertEqual(grants.liveChannel(of: app(7)), 10)
    }

    func testANewChannelReplacesTheAppsOldOneAndThePublisherTakesItsChannelsWithIt() {
        var grants = DataGrants()
        _ = grants.opened(10, for: app(7), live: true)
        XCTAssertEqual(grants.opened(12, for: app(7), live: true), 10, "the old one is closed by the shell")
        XCTAssertFalse(grants.isChannel(10))
        _ = grants.opened(13, for: app(8), live: false)
        _ = grants.opened(14, for: UpdateSender(publisher: 4, onBehalfOf: 7), live: true)
        XCTAssertEqual(grants.sessionClosed(managerd), [12, 13], "managerd's channels go with it; another publisher's stay")
        XCTAssertEqual(grants.channelCount, 1)
        XCTAssertEqual(grants.sessionClosed(14), [], "a channel closing closes nothing else")
        XCTAssertNil(grants.liveChannel(of: UpdateSender(publisher: 4, onBehalfOf: 7)))
    }

    func testCentralsAreNamedByTheIdentifiersManagerdGaveTheirLinks() {
        var grants = DataGrants()
        grants.name(0x40, "aaaa-1")
        grants.name(0x41, "BBBB-2")
        XCTAssertEqual(grants.links(named: ["AAAA-1", "bbbb-2", "cccc-3"]), [0x40, 0x41], "case does not matter; unknown ones are left out")
        grants.linkClosed(0x40)
        XCTAssertEqual(grants.links(named: ["AAAA-1"]), [], "a link that closed names no one")
        grants.name(0x41, "")
        XCTAssertEqual(grants.links(named: ["BBBB-2"]), [])
    }

    func testAnAppReadsAndWritesOnlyOnTheLinksItHolds() {
        var grants = DataGrants()
        grants.name(0x40, "P-1")
        grants.name(0x41, "P-2")
        grants.setLinks([0x40], heldBy: app(7))
        XCTAssertEqual(grants.link(to: "p-1", heldBy: app(7)), .success(0x40))
        XCTAssertEqual(grants.link(to: "P-2", heldBy: app(7)), .failure(.outsideGrant("this app holds no link to P-2")), "a link another app holds")
        XCTAssertEqual(grants.link(to: "P-1", heldBy: app(8)), .failure(.outsideGrant("this app holds no link to P-1")))
        grants.linkClosed(0x40)
        grants.name(0x40, "P-3")
        XCTAssertEqual(grants.link(to: "P-3", heldBy: app(7)), .failure(.outsideGrant("this app holds no link to P-3")),
                       "a new link on a handle the app held before is not the app's until managerd says so")
        grants.setLinks([0x40, 0x41], heldBy: app(7))
        _ = grants.sessionClosed(managerd)
        XCTAssertEqual(grants.link(to: "P-2", heldBy: app(7)), .failure(.outsideGrant("this app holds no link to P-2")), "forgotten with managerd")
    }

    func testANotificationGoesToTheLiveChannelsOfItsAudienceAndManagerdDeliversTheRest() {
        var grants = DataGrants()
        XCTAssertNil(grants.route(notificationOf: 0x21, on: 0x40), "no audience: managerd delivers, as before")
        _ = grants.opened(10, for: app(7), live: true)
        _ = grants.opened(11, for: app(8), live: false)
        grants.setAudience([7, 8, 9], others: false, of: 0x21, on: 0x40, peripheral: "P", publisher: managerd)
        XCTAssertEqual(grants.route(notificationOf: 0x21, on: 0x40),
                       .init(peripheral: "P", channels: [10], publisher: managerd, delivered: [7], publisherDelivers: true),
                       "app 8 is revoked and app 9 has no channel: managerd delivers to them")
        _ = grants.setLive(app(8), true)
        grants.setAudience([7, 8], others: false, of: 0x21, on: 0x40, peripheral: "P", publisher: managerd)
        XCTAssertEqual(grants.route(notificationOf: 0x21, on: 0x40)?.publisherDelivers, false, "everyone had it directly: managerd hears nothing")
        grants.setAudience([7], others: true, of: 0x21, on: 0x40, peripheral: "P", publisher: managerd)
        XCTAssertEqual(grants.route(notificationOf: 0x21, on: 0x40)?.publisherDelivers, true, "a preserved manager listens too")
        XCTAssertNil(grants.route(notificationOf: 0x22, on: 0x40), "another value of the link")
        grants.linkClosed(0x40)
        XCTAssertNil(grants.route(notificationOf: 0x21, on: 0x40), "forgotten with the link")
        grants.setAudience([7], others: false, of: 0x21, on: 0x41, peripheral: "Q", publisher: managerd)
        _ = grants.sessionClosed(managerd)
        XCTAssertNil(grants.route(notificationOf: 0x21, on: 0x41), "and with the publisher that set it")
    }
}
