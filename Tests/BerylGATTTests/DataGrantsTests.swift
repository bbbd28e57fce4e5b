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

    func testANewChannelReplacesTheAppsOldOneAndThePublishersChannelsOutliveItAsOrphans() {
        var grants = DataGrants()
        _ = grants.opened(10, for: app(7), live: true)
        XCTAssertEqual(grants.opened(12, for: app(7), live: true), 10, "the old one is closed by the shell")
        XCTAssertFalse(grants.isChannel(10))
        _ = grants.opened(13, for: app(8), live: false)
        _ = grants.opened(14, for: UpdateSender(publisher: 4, onBehalfOf: 7), live: true)
        XCTAssertEqual(grants.sessionClosed(managerd), .publisher(orphaned: [12, 13]), "managerd's channels wait for its successor")
        XCTAssertEqual(grants.channelCount, 3)
        XCTAssertEqual(grants.orphanCount, 2)
        XCTAssertTrue(grants.isOrphaned(12))
        XCTAssertFalse(grants.isOrphaned(14), "another publisher's channel is not touched")
        XCTAssertEqual(grants.admit(12), .success(app(7)), "an orphan still carries its app's values")
        XCTAssertEqual(grants.admit(13), .failure(.revoked), "as its grant last said")
        XCTAssertEqual(grants.sessionClosed(12), .channel(app: app(7), wasOrphaned: true), "the shell withdraws what was published for it")
        XCTAssertEqual(grants.sessionClosed(14), .channel(app: UpdateSender(publisher: 4, onBehalfOf: 7), wasOrphaned: false))
        XCTAssertNil(grants.liveChannel(of: UpdateSender(publisher: 4, onBehalfOf: 7)))
    }

    /// att.proto's AdoptDataChannel: a restarted managerd takes over the channel whose token the app presented, with
    /// the links it held and the values it heard, under the app's new session.
    func testARestartedPublisherAdoptsAnOrphanByItsTokenWithItsLinksAndAudiences() {
        var grants = DataGrants()
        let successor: PublisherID = 5
        let adopted = UpdateSender(publisher: successor, onBehalfOf: 1)
        _ = grants.opened(10, for: app(7), live: true, resumeToken: [1, 2, 3])
        _ = grants.opened(11, for: app(8), live: true, resumeToken: [4, 5, 6])
        grants.name(0x40, "P-1")
        grants.name(0x41, "P-2")
        grants.setLinks([0x40, 0x41], heldBy: app(7))
        grants.setAudience([7, 8], others: true, of: 0x21, on: 0x40, peripheral: "P-1", publisher: managerd)
        XCTAssertNil(grants.adopt(token: [1, 2, 3], as: adopted, live: true), "only an orphan is adopted")
        _ = grants.sessionClosed(managerd)
        grants.linkClosed(0x41, reason: 0x08)
        XCTAssertEqual(grants.route(notificationOf: 0x21, on: 0x40),
                       .init(peripheral: "P-1", channels: [10, 11], publisher: managerd, delivered: [7, 8], publisherDelivers: false),
                       "the orphans still hear the value; nobody is left to deliver to the others")
        XCTAssertEqual(grants.link(to: "P-1", heldBy: app(7)), .success(0x40), "and still reads and writes on its link")
        XCTAssertNil(grants.adopt(token: [9, 9, 9], as: adopted, live: true), "a token no orphan has")
        XCTAssertNil(grants.adopt(token: [], as: adopted, live: true))

        let adoption = grants.adopt(token: [1, 2, 3], as: adopted, live: true)
        XCTAssertEqual(adoption?.channel, 10)
        XCTAssertEqual(adoption?.was, app(7))
        XCTAssertEqual(adoption?.heldLinks, [0x40])
        XCTAssertEqual(adoption?.lost, [.init(peripheral: "P-2", reason: 0x08)], "the link that ended meanwhile, for managerd to tell the app")
        XCTAssertEqual(adoption?.hears.map(\.valueHandle), [0x21])
        XCTAssertFalse(grants.isOrphaned(10))
        XCTAssertEqual(grants.admit(10), .success(adopted), "the channel acts under the app's new session")
        XCTAssertEqual(grants.link(to: "P-1", heldBy: adopted), .success(0x40))
        XCTAssertEqual(grants.link(to: "P-1", heldBy: app(7)), .failure(.outsideGrant("this app holds no link to P-1")))
        XCTAssertNil(grants.adopt(token: [1, 2, 3], as: UpdateSender(publisher: successor, onBehalfOf: 2), live: true), "adopted once")
        XCTAssertEqual(grants.route(notificationOf: 0x21, on: 0x40),
                       .init(peripheral: "P-1", channels: [10, 11], publisher: successor, delivered: [1], publisherDelivers: false),
                       "before the successor sets the audience, it is the publisher: attd's broadcast skips it, and had it a "
                       + "copy it would know the adopted app has the value already (it is no second path to the app)")

        grants.setAudience([1], others: false, of: 0x21, on: 0x40, peripheral: "P-1", publisher: successor)
        XCTAssertEqual(grants.route(notificationOf: 0x21, on: 0x40),
                       .init(peripheral: "P-1", channels: [10, 11], publisher: successor, delivered: [1], publisherDelivers: false),
                       "the successor's audience keeps the orphan not adopted yet")
        _ = grants.sessionClosed(11)
        XCTAssertEqual(grants.route(notificationOf: 0x21, on: 0x40)?.channels, [10], "an orphan that closed leaves its audiences")
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
        grants.setAudience([7, 9], others: true, of: 0x21, on: 0x41, peripheral: "Q", publisher: managerd)
        _ = grants.sessionClosed(managerd)
        XCTAssertEqual(grants.route(notificationOf: 0x21, on: 0x41)?.channels, [10], "app 7's channel outlives the publisher that set it")
        XCTAssertEqual(grants.route(notificationOf: 0x21, on: 0x41)?.publisherDelivers, false, "those it delivered to went with it")
        _ = grants.sessionClosed(10)
        XCTAssertNil(grants.route(notificationOf: 0x21, on: 0x41), "and with the orphan the audience is gone")
    }
}
