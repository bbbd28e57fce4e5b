import BerylCore
import BerylHCI
import BerylManager
import XCTest

/// The lab session's sans-IO rules: who may open one, what its advertising puts on the wire, what a link's timing is.
final class LabSessionTests: XCTestCase {
    func testOnlyRootAndTheLabGroupMayOpenALabSession() {
        let lab = (gid: UInt32(990), members: ["alice"])
        XCTAssertTrue(LabAccess.isGranted(uid: 0, primaryGroup: 0, userName: "root", labGroup: nil))
        XCTAssertTrue(LabAccess.isGranted(uid: 1000, primaryGroup: 1000, userName: "alice", labGroup: lab), "a member")
        XCTAssertTrue(LabAccess.isGranted(uid: 1001, primaryGroup: 990, userName: "bob", labGroup: lab), "the lab group is bob's primary group")
        XCTAssertFalse(LabAccess.isGranted(uid: 1001, primaryGroup: 1001, userName: "bob", labGroup: lab))
        XCTAssertFalse(LabAccess.isGranted(uid: 1000, primaryGroup: 1000, userName: "alice", labGroup: nil), "no such group on this board")
    }

    // A controller without a public address has hcid's static random identity as its one random address, which the
    // apps advertise and connect with: the lab uses it rather than replacing it with its own.
    func testTheLabKeepsARandomIdentityAsTheControllersRandomAddress() {
        let made = BDAddress(wire: [1, 2, 3, 4, 5, 0xC6])
        let randomIdentity = DeviceAddress("C0:FF:EE:00:00:09/random")!
        XCTAssertEqual(LabOwnAddress.labRandomAddress(identity: randomIdentity, made: made).address, randomIdentity.address)
        XCTAssertFalse(LabOwnAddress.labRandomAddress(identity: randomIdentity, made: made).set)
        XCTAssertEqual(LabOwnAddress.labRandomAddress(identity: DeviceAddress("00:1B:DC:00:00:01")!, made: made).address, made)
        XCTAssertTrue(LabOwnAddress.labRandomAddress(identity: nil, made: made).set)
    }

    func testAdvertisingParametersOnTheWire() throws {
        let peer = try XCTUnwrap(DeviceAddress("C0:11:22:33:44:55/random"))
        let directed = try LabAdvertising(data: [2, 1, 6], scanResponse: [], connectable: false, scannable: false, directedTo: peer,
                                          ownAddress: .random, interval: 0)
        XCTAssertEqual(directed.kind, .connectableDirectedLowDuty, "ADV_DIRECT_IND is connectable by its PDU type")
        let parameters = directed.commands[1]
        XCTAssertEqual(parameters.opcode, HCIOpcode.leSetAdvertisingParameters.rawValue)
        // Interval 100 ms twice, ADV_DIRECT_IND (low duty), own random, peer random, the peer's address (wire order), all channels.
        XCTAssertEqual(parameters.parameters, [0xA0, 0x00, 0xA0, 0x00, 0x04, 0x01, 0x01, 0x55, 0x44, 0x33, 0x22, 0x11, 0xC0, 0x07, 0x00])
        XCTAssertEqual(directed.commands.first?.parameters, [0], "advertising off before its parameters change")
        XCTAssertEqual(directed.commands.last?.parameters, [1])

        let scannable = try LabAdvertising(data: [], scanResponse: [3, 0xFF, 1, 2], connectable: false, scannable: true, directedTo: nil,
                                           ownAddress: .public, interval: 0x0800)
        XCTAssertEqual(scannable.kind, .scannableUndirected)
        XCTAssertEqual(scannable.commands[3].parameters.prefix(5), [4, 3, 0xFF, 1, 2], "the scan response, length first")
        XCTAssertEqual(try LabAdvertising(data: [], scanResponse: [], connectable: false, scannable: false, directedTo: nil,
                                          ownAddress: .public, interval: 0).kind, .nonConnectable)
    }

    func testAdvertisingRefusalsAreTyped() {
        XCTAssertThrowsError(try LabAdvertising(data: Array(repeating: 0, count: 32), scanResponse: [], connectable: true, scannable: true,
                                                directedTo: nil, ownAddress: .public, interval: 0)) {
            XCTAssertEqual($0 as? LabAdvertising.Refusal, .dataTooLong(field: "data", length: 32))
        }
        XCTAssertThrowsError(try LabAdvertising(data: [], scanResponse: [], connectable: true, scannable: true, directedTo: nil,
                                                ownAddress: .public, interval: 0x001F)) {
            XCTAssertEqual($0 as? LabAdvertising.Refusal, .intervalOutOfRange(0x001F))
        }
    }

    func testLinkTimingFromConnectionAndUpdateEvents() {
        // LE Connection Complete (§7.7.65.1): handle 0x0040, interval 0x0018, latency 0, timeout 0x00C8.
        let complete = HCIEventPacket(code: 0x3E, parameters: [0x01, 0x00, 0x40, 0x00, 0x00, 0x00, 1, 2, 3, 4, 5, 6, 0x18, 0x00, 0x00, 0x00, 0xC8, 0x00, 0x00])
        XCTAssertEqual(LinkTiming(complete), LinkTiming(handle: 0x40, interval: 0x18, latency: 0, supervisionTimeout: 0xC8))
        // LE Connection Update Complete (§7.7.65.3).
        let update = HCIEventPacket(code: 0x3E, parameters: [0x03, 0x00, 0x40, 0x00, 0x28, 0x00, 0x02, 0x00, 0x90, 0x01])
        XCTAssertEqual(LinkTiming(update), LinkTiming(handle: 0x40, interval: 0x28, latency: 2, supervisionTimeout: 0x190))
        XCTAssertNil(LinkTiming(HCIEventPacket(code: 0x3E, parameters: [0x03, 0x00, 0x40])), "too short")
        XCTAssertNil(LinkTiming(HCIEventPacket(code: 0x3E, parameters: [0x03, 0x3B, 0x40, 0x00, 0x28, 0x00, 0x02, 0x00, 0x90, 0x01])), "failed")
    }

    func testStaticRandomAddressesHaveTheirTopBitsSet() {
        var values: [UInt8] = [0, 0, 0, 0, 0, 0, 0xAB, 0xCD, 0xEF, 0x01, 0x23, 0x45]
        let address = makeStaticRandomAddress { values.removeFirst() }
        // All zeros with the top bits set is refused (§1.3.2.1); the next draw is taken.
        XCTAssertEqual(address.bytes, [0xAB, 0xCD, 0xEF, 0x01, 0x23, 0xC5])
        XCTAssertEqual(address.randomKind, .static)
    }

    private static let peer = DeviceAddress("C0:11:22:33:44:55/random")!
    private static let other = DeviceAddress("C0:11:22:33:44:66/random")!

    func testALinkIsTheLabsWhenItAdvertisedForItOrHoldsIt() throws {
        var lab = LabSession(session: 7)
        XCTAssertFalse(lab.linkUp(0x40, central: false, peer: Self.peer, holders: nil).isLab, "not advertising: an app's")
        lab.advertising = try LabAdvertising(data: [], scanResponse: [], connectable: true, scannable: true, directedTo: nil, ownAddress: .random, interval: 0)
        let up = lab.linkUp(0x41, central: false, peer: Self.peer, holders: nil)
        XCTAssertEqual(up, .init(isLab: true, ownAddress: .random, answers: nil), "pairing hashes the random address it advertised from")
        XCTAssertTrue(lab.owns(0x42, holders: [lab.key]), "a central link the lab holds in the book")
        XCTAssertFalse(lab.owns(0x42, holders: [ManagerKey(session: 3, manager: 1)]))
        lab.linkDown(0x41, reason: 0x13)
        XCTAssertFalse(lab.owns(0x41, holders: nil), "a handle the controller may hand out again is not the lab's")
    }

    func testTheAttemptIsAnsweredByItsOwnLinkOnly() throws {
        var lab = LabSession(session: 7)
        try lab.startConnecting(identifier: "P1", address: Self.peer, ownAddress: .resolvableOrRandom)
        XCTAssertThrowsError(try lab.startConnecting(identifier: "P2", address: Self.other, ownAddress: .public)) {
            XCTAssertEqual($0 as? LabSession.Refusal, .attemptUnderWay(Self.peer))
        }
        XCTAssertEqual(lab.ownAddress(connectingTo: Self.peer), .resolvableOrRandom)
        XCTAssertNil(lab.ownAddress(connectingTo: Self.other), "an app's attempt uses managerd's own address type")
        XCTAssertNil(lab.linkUp(0x40, central: true, peer: Self.other, holders: nil).answers, "an app's link to another peer")
        let up = lab.linkUp(0x41, central: true, peer: Self.peer, holders: [lab.key])
        XCTAssertEqual(up.answers?.identifier, "P1")
        XCTAssertEqual(up.ownAddress, .resolvableOrRandom)
        XCTAssertNil(lab.attempt, "answered once")
        try lab.startConnecting(identifier: "P2", address: Self.other, ownAddress: .public)
        XCTAssertEqual(lab.endWork()?.identifier, "P2", "ending the lab's work ends its attempt")
        XCTAssertNil(lab.attempt)
    }

    func testAConnectWaitsForNoAttemptAndNoLinkToThePeer() throws {
        var lab = LabSession(session: 7)
        var connections = CentralConnections()
        _ = connections.controller(poweredOn: true)
        XCTAssertNoThrow(try lab.mayConnect(to: Self.peer, in: connections.book))
        _ = connections.connect(ManagerKey(session: 3, manager: 1), identifier: "P1", address: Self.peer)
        _ = connections.linkUp(handle: 0x40, identifier: "P1", address: Self.peer, isCentral: true)
        XCTAssertThrowsError(try lab.mayConnect(to: Self.peer, in: connections.book)) {
            XCTAssertEqual($0 as? LabSession.Refusal, .linkExists(Self.peer, handle: 0x40), "an app's link to the peer")
        }
        try lab.startConnecting(identifier: "P2", address: Self.other, ownAddress: .public)
        XCTAssertThrowsError(try lab.mayConnect(to: Self.other, in: connections.book)) {
            XCTAssertEqual($0 as? LabSession.Refusal, .attemptUnderWay(Self.other))
        }
    }

    // A factory reset or a closed lab session takes down the lab's links, never an app's (even one the lab shares).
    func testTheLabsWorkEndingTakesOnlyItsOwnLinks() {
        var lab = LabSession(session: 7)
        var connections = CentralConnections()
        _ = connections.controller(poweredOn: true)
        let app = ManagerKey(session: 3, manager: 1)
        for (handle, identifier, address, holders) in [(UInt16(0x40), "P1", Self.peer, [lab.key]), (0x41, "P2", Self.other, [lab.key, app])] {
            for holder in holders { _ = connections.connect(holder, identifier: identifier, address: address) }
            _ = connections.linkUp(handle: handle, identifier: identifier, address: address, isCentral: true)
        }
        lab.advertising = try? LabAdvertising(data: [], scanResponse: [], connectable: true, scannable: false, directedTo: nil,
                                              ownAddress: .public, interval: 0x0800)
        let central = DeviceAddress("C0:FF:EE:00:00:09/random")!
        _ = connections.linkUp(handle: 0x42, identifier: "C", address: central, isCentral: false)
        _ = lab.linkUp(0x42, central: false, peer: central, holders: nil)
        XCTAssertEqual(lab.links(endingWithWorkIn: connections.book), [0x40, 0x42])
    }

    /// attd answers a failed LabSecure only with an error; the events before it say how it failed, and that is the answer.
    func testLabSecureAnswersHowTheLinksSecurityFailed() {
        var lab = LabSession(session: 7)
        lab.securing(0x40)
        XCTAssertEqual(lab.securingFailed(0x40), .pairingFailed(reason: 0x08, remote: false), "nothing said how: Unspecified Reason")
        XCTAssertEqual(lab.pairingFinished(0x40, .failure(LabPairingFailure(reason: 0x04, remote: true))), .pairingFailed(reason: 0x04, remote: true))
        XCTAssertEqual(lab.securingFailed(0x40), .pairingFailed(reason: 0x04, remote: true))
        lab.securing(0x40)
        XCTAssertEqual(lab.securingFailed(0x40), .pairingFailed(reason: 0x08, remote: false), "a new LabSecure forgets the last failure")
        XCTAssertEqual(lab.securityChanged(0x40, status: 0x06, encrypted: false, authenticated: false, bonded: true), .encryptionFailed(status: 0x06))
        XCTAssertEqual(lab.securingFailed(0x40), .encryptionFailed(status: 0x06))
        lab.linkDown(0x40, reason: 0x3D)
        XCTAssertEqual(lab.securingFailed(0x40), .linkClosed(reason: 0x3D))
    }

    func testAnEncryptionChangeKeepsWhatPairingSaid() {
        var lab = LabSession(session: 7)
        let paired = LabSecurity(encrypted: true, authenticated: true, bonded: true, secureConnections: true, keySize: 16)
        XCTAssertEqual(lab.pairingFinished(0x40, .success(paired)), .secured(paired))
        XCTAssertEqual(lab.securityChanged(0x40, status: 0, encrypted: false, authenticated: false, bonded: true),
                       .secured(LabSecurity(encrypted: false, authenticated: false, bonded: true, secureConnections: true, keySize: 16)))
        XCTAssertEqual(lab.secured(0x40, paired), .secured(paired))
        XCTAssertEqual(lab.security(of: 0x40), paired)
        lab.linkDown(0x40, reason: 0x13)
        XCTAssertNil(lab.security(of: 0x40))
    }
}
