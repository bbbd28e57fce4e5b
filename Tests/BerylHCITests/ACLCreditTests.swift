import BerylCore
@testable import BerylHCI
import BerylSim
import XCTest

/// hcid's credited lane: a client (attd) is granted a couple of connection events of controller buffers per link,
/// never sends past them, and has them back as its fragments leave for the controller; answers go ahead of it.
final class ACLCreditTests: XCTestCase {
    private let attd: HCIClientID = 7

    private func credits(_ harness: HostHarness, host: Int = 0, client: HCIClientID, link: UInt16) -> (fresh: Int?, returned: Int) {
        var fresh: Int?
        var returned = 0
        for report in harness.credits[host] where report.client == client {
            for grant in report.grants where grant.handle == link {
                if grant.fresh { (fresh, returned) = (grant.credits, 0) } else { returned += grant.credits }
            }
        }
        return (fresh, returned)
    }

    func testACreditedClientIsGrantedEachLinkAndHasEveryBufferBackAsItsFragmentsLeave() {
        let harness = HostHarness()
        harness.startAll()
        harness.hosts[0].attachCreditedClient(attd)
        let (central, peripheral) = harness.connect()
        let grant = harness.hosts[0].creditsPerLink
        XCTAssertEqual(grant, 16, "two connection events of the simulated controller's 8 buffers")
        XCTAssertEqual(credits(harness, client: attd, link: central).fresh, grant, "a link that comes up is granted at once")
        XCTAssertEqual(harness.credits[0].last?.mtu, 251)

        // The controller's eight buffers taken, so what follows waits in hcid. Three-fragment PDUs (600 bytes at 251 a
        // buffer): five fit in sixteen credits, the sixth is refused.
        for _ in 0..<8 { XCTAssertEqual(harness.hosts[0].submitACL(handle: central, pdu: [0xEE], at: harness.now), .queued) }
        let pdus = (0..<6).map { index in [UInt8](repeating: UInt8(index), count: 600) }
        for pdu in pdus.prefix(5) { XCTAssertEqual(harness.hosts[0].submitACL(handle: central, pdu: pdu, lane: .credited(attd), at: harness.now), .queued) }
        XCTAssertEqual(harness.hosts[0].submitACL(handle: central, pdu: pdus[5], lane: .credited(attd), at: harness.now), .busy,
                       "sent past its credits")
        harness.route(0)
        XCTAssertTrue(harness.run(until: { harness.acl[1].reduce(0) { $0 + $1.data.count } == 8 + 5 * 600 }, timeout: .seconds(2)))
        XCTAssertTrue(harness.acl[1].flatMap(\.data) == [UInt8](repeating: 0xEE, count: 8) + pdus.prefix(5).flatMap { $0 }, "in order, whole")
        XCTAssertTrue(harness.acl[1].allSatisfy { $0.handle == peripheral })
        XCTAssertEqual(credits(harness, client: attd, link: central).returned, 15, "every fragment's buffer came back")
        XCTAssertEqual(harness.hosts[0].submitACL(handle: central, pdu: pdus[5], lane: .credited(attd), at: harness.now), .queued)
    }

    func testCreditsComeBackInBatchesNotOnePerFragment() {
        let harness = HostHarness()
        harness.startAll()
        harness.hosts[0].attachCreditedClient(attd)
        let (central, _) = harness.connect()
        let reportsBefore = harness.credits[0].count
        for _ in 0..<16 { XCTAssertEqual(harness.hosts[0].submitACL(handle: central, pdu: [1, 2, 3], lane: .credited(attd), at: harness.now), .queued) }
        harness.route(0)
        harness.run(for: .milliseconds(100))
        XCTAssertEqual(credits(harness, client: attd, link: central).returned, 16)
        XCTAssertLessThanOrEqual(harness.credits[0].count - reportsBefore, 4, "one report per call into the core, not one per fragment")
    }

    /// Answers a peer waits on (here an ATT response) go ahead of the credited PDUs queued on the link, after the one
    /// being fragmented: an LE link carries one PDU's fragments in a row.
    func testAnUrgentPDUGoesAheadOfQueuedCreditedOnesButNotIntoOneBeingSent() {
        let harness = HostHarness()
        harness.startAll()
        harness.hosts[0].attachCreditedClient(attd)
        let (central, _) = harness.connect()
        // Seven of the controller's eight buffers taken: the long PDU's first fragment takes the last one, and the rest
        // waits here with everything after it.
        for _ in 0..<7 { XCTAssertEqual(harness.hosts[0].submitACL(handle: central, pdu: [0xEE], at: harness.now), .queued) }
        let long = [UInt8](repeating: 0xA0, count: 600)
        XCTAssertEqual(harness.hosts[0].submitACL(handle: central, pdu: long, lane: .credited(attd), at: harness.now), .queued)
        for index in 1...3 {
            XCTAssertEqual(harness.hosts[0].submitACL(handle: central, pdu: [UInt8(index)], lane: .credited(attd), at: harness.now), .queued)
        }
        XCTAssertEqual(harness.hosts[0].submitACL(handle: central, pdu: [0x0B, 0x55], lane: .urgent, at: harness.now), .queued)
        harness.route(0)
        let starts = { harness.acl[1].filter { $0.boundary != .continuing } }
        XCTAssertTrue(harness.run(until: { starts().count == 7 + 1 + 1 + 3 }, timeout: .seconds(2)))
        XCTAssertEqual(Array(starts().map { $0.data.first ?? 0 }.dropFirst(7)), [0xA0, 0x0B, 1, 2, 3])
    }

    /// attd restarted: its successor is granted afresh what its predecessor's queued PDUs do not hold; the one that went
    /// gets nothing back.
    func testAClientThatGoesLeavesItsPDUsToGoAndItsSuccessorStartsAfresh() {
        let harness = HostHarness()
        harness.startAll()
        harness.hosts[0].attachCreditedClient(attd)
        let (central, _) = harness.connect()
        for _ in 0..<16 { _ = harness.hosts[0].submitACL(handle: central, pdu: [9], lane: .credited(attd), at: harness.now) }
        harness.hosts[0].clientGone(attd)
        harness.hosts[0].attachCreditedClient(8)
        harness.route(0)
        XCTAssertEqual(credits(harness, client: 8, link: central).fresh, 16)
        let reportsToGone = harness.credits[0].filter { $0.client == attd }.count
        harness.run(for: .milliseconds(100))
        XCTAssertEqual(harness.acl[1].count, 16, "what the first client queued still reached the peer")
        XCTAssertEqual(harness.credits[0].filter { $0.client == attd }.count, reportsToGone, "no credit goes back to a client that left")
        XCTAssertEqual(harness.hosts[0].submitACL(handle: central, pdu: [1], lane: .credited(attd), at: harness.now), .busy)
    }

    /// A controller with few small buffers: the grant is never below the largest PDU, so a credited PDU always fits.
    func testTheGrantCoversTheLargestPDUWhateverTheBuffers() {
        var config = SimConfig()
        config.aclBufferSize = 27
        config.aclBufferCount = 2
        let harness = HostHarness(config: config)
        harness.startAll()
        XCTAssertEqual(harness.hosts[0].creditsPerLink, 20, "521 bytes at 27 a buffer")
    }
}
