import BerylCore
import BerylManager
import XCTest

/// The lab session's part of managerd, as scripted requests and link events on virtual time, with strings for the
/// shell's handles on the requests owed an answer.
final class LabCoreTests: XCTestCase {
    typealias Lab = LabCore<String>
    let peer = DeviceAddress("C0:11:22:33:44:55/random")!
    let other = DeviceAddress("C0:11:22:33:44:66/random")!

    private func opened(session: UInt64 = 7) -> Lab {
        var lab = Lab()
        XCTAssertEqual(lab.open(session: session, saidHello: false, granted: true, uid: 0, otherSessionIsLive: { _ in true }, "open"),
                       [.setRandomAddress, .welcome("open", session: session)])
        return lab
    }

    /// Connects the lab to `address` (known already, identifier `id`) and brings the link up as `handle`.
    private func labLink(_ lab: inout Lab, _ book: inout ConnectionBook, to address: DeviceAddress, id: String, handle: UInt16) {
        let outputs = lab.connect(to: address, ownAddress: .random, book: book, see: { _ in (id, false) }, "connect \(id)")
        guard case .connect(let key, _, _)? = outputs.last else { return XCTFail("no attempt: \(outputs)") }
        _ = book.connect(key, identifier: id, address: address)
        _ = book.connected(identifier: id, handle: handle, address: address, isCentral: true)
        XCTAssertEqual(lab.linkEvent(.connected(handle: handle, central: true, peer: address), madeKnown: nil, book: book),
                       [.pairingForLink(handle: handle, ownAddress: .random), .answer("connect \(id)", .link(handle: handle)),
                        .event(session: lab.session!.session, .linkUp(handle: handle))])
    }

    /// An app's link (session 3) to `other` as 0x41.
    private func appLink(_ book: inout ConnectionBook) {
        _ = book.connect(ManagerKey(.session(3), manager: 1), identifier: "A", address: other)
        _ = book.connected(identifier: "A", handle: 0x41, address: other, isCentral: true)
    }

    func testOnlyAGrantedSessionThatNeverSaidHelloOpensTheLabAndALiveLabIsNotTakenOver() {
        var lab = Lab()
        XCTAssertEqual(lab.open(session: 1, saidHello: true, granted: true, uid: 0, otherSessionIsLive: { _ in true }, "a"),
                       [.refuse("a", .appSessionCannotBecomeLab)])
        XCTAssertEqual(lab.open(session: 1, saidHello: false, granted: false, uid: 1000, otherSessionIsLive: { _ in true }, "b"),
                       [.refuse("b", .notGranted(uid: 1000))])
        XCTAssertNil(lab.session)
        XCTAssertEqual(lab.open(session: 1, saidHello: false, granted: true, uid: 0, otherSessionIsLive: { _ in true }, "c"),
                       [.setRandomAddress, .welcome("c", session: 1)])
        XCTAssertEqual(lab.open(session: 2, saidHello: false, granted: true, uid: 0, otherSessionIsLive: { _ in true }, "d"),
                       [.refuse("d", .anotherLabOpen(session: 1))])
        XCTAssertTrue(lab.isLabSession(1))
        // Session 1 went away and its close was not seen yet: the next lab takes over.
        XCTAssertEqual(lab.open(session: 2, saidHello: false, granted: true, uid: 0, otherSessionIsLive: { _ in false }, "e"),
                       [.setRandomAddress, .welcome("e", session: 2)])
        XCTAssertTrue(lab.isLabSession(2))
        XCTAssertFalse(lab.isLabSession(1))
    }

    func testTheAttemptIsAnsweredByItsLinkOnceAndRefusedWhileOneIsUnderWayOrTheLinkExists() {
        var lab = opened()
        var book = ConnectionBook()
        let key = lab.session!.key
        XCTAssertEqual(lab.connect(to: peer, ownAddress: .random, book: book, see: { _ in ("P", true) }, "connect"),
                       [.recordPeripheral("P"), .pairingForNextLink(central: true, peer: peer, ownAddress: .random),
                        .connect(key, identifier: "P", address: peer)], "an identifier the lab made known is the lab's to take back")
        XCTAssertEqual(lab.ownAddress(connectingTo: peer), .random)
        XCTAssertNil(lab.ownAddress(connectingTo: other), "an app's attempt uses the stack's own address")
        XCTAssertEqual(lab.connect(to: other, ownAddress: .public, book: book, see: { _ in XCTFail("not seen"); return nil }, "again"),
                       [.refuse("again", .connect(.attemptUnderWay(peer)))])
        _ = book.connect(key, identifier: "P", address: peer)
        _ = book.connected(identifier: "P", handle: 0x40, address: peer, isCentral: true)
        XCTAssertEqual(lab.linkEvent(.connected(handle: 0x40, central: true, peer: peer), madeKnown: nil, book: book),
                       [.pairingForLink(handle: 0x40, ownAddress: .random), .answer("connect", .link(handle: 0x40)), .event(session: 7, .linkUp(handle: 0x40))],
                       "the connect is answered before the lab hears the event, as before")
        XCTAssertTrue(lab.owns(0x40, in: book))
        XCTAssertEqual(lab.connect(to: peer, ownAddress: .public, book: book, see: { _ in ("P", false) }, "twice"),
                       [.refuse("twice", .connect(.linkExists(peer, handle: 0x40)))])
        XCTAssertEqual(lab.connect(to: other, ownAddress: .public, book: book, see: { _ in nil }, "no store"),
                       [.refuse("no store", .peripheralStoreUnusable)])
        XCTAssertEqual(lab.cancelConnect("cancel"), [.answer("cancel", .ack)], "nothing to cancel")
    }

    func testCancelTellsTheWaitingConnectAndWithdrawsThePairingAnnounced() {
        var lab = opened()
        let key = lab.session!.key
        _ = lab.connect(to: other, ownAddress: .public, book: ConnectionBook(), see: { _ in ("O", false) }, "connect")
        XCTAssertEqual(lab.cancelConnect("cancel"),
                       [.pairingForNextLink(central: true, peer: other, ownAddress: nil), .cancelConnect(key, identifier: "O"),
                        .refuse("connect", .attemptCancelled(other)), .answer("cancel", .ack)])
        XCTAssertEqual(lab.linkEvent(.connectionFailed(status: 0x02), madeKnown: nil, book: ConnectionBook()),
                       [.event(session: 7, .connectFailed(status: 0x02))])
    }

    func testAnAppsLinkIsNotTheLabsToSecureAndOnlyRealLinksAreDisconnected() {
        var lab = opened()
        var book = ConnectionBook()
        appLink(&book)
        XCTAssertEqual(lab.linkEvent(.connected(handle: 0x41, central: true, peer: other), madeKnown: "A", book: book),
                       [.event(session: 7, .linkUp(handle: 0x41))], "the lab hears of it, but neither pairs on it nor takes its identifier")
        XCTAssertFalse(lab.owns(0x41, in: book))
        XCTAssertEqual(lab.secure(0x41, book: book, attdAttached: true), .failure(.noLabLink(handle: 0x41)))
        XCTAssertEqual(lab.secure(0x1_0041, book: book, attdAttached: true), .failure(.noLabLink(handle: 0x1_0041)), "not truncated onto 0x41")
        XCTAssertEqual(lab.disconnect(0x41, book: book, "d"), [.disconnect(0x41, answering: "d")])
        XCTAssertEqual(lab.disconnect(0x42, book: book, "e"), [.refuse("e", .noLink(handle: 0x42))])
        XCTAssertEqual(lab.disconnect(0x1_0041, book: book, "f"), [.refuse("f", .noLink(handle: 0x1_0041))])
    }

    func testAnAnswerOwedToAnEarlierOpeningIsNotAppliedToTheNext() {
        var lab = opened()
        var book = ConnectionBook()
        labLink(&lab, &book, to: peer, id: "P", handle: 0x40)
        guard case .success(let opening) = lab.secure(0x40, book: book, attdAttached: true) else { return XCTFail("not the lab's link") }
        _ = lab.connect(to: other, ownAddress: .public, book: book, see: { _ in ("O", false) }, "pending")
        // LabOpen again on the same session: the pending connect hears so, and attd's late answer changes nothing.
        XCTAssertEqual(lab.open(session: 7, saidHello: false, granted: true, uid: 0, otherSessionIsLive: { _ in true }, "reopen"),
                       [.refuse("pending", .reopened), .setRandomAddress, .welcome("reopen", session: 7)])
        XCTAssertEqual(lab.secured(0x40, opening: opening, LabSecurity(encrypted: true)), .failure(.labClosed))
        XCTAssertNil(lab.session?.security(of: 0x40))
        guard case .success(let now) = lab.secure(0x40, book: book, attdAttached: true) else { return XCTFail("the link is still the lab's") }
        XCTAssertEqual(lab.secured(0x40, opening: now, LabSecurity(encrypted: true, keySize: 16)), .success(.secured(LabSecurity(encrypted: true, keySize: 16))))
    }

    func testLabSecureAnswersWithHowItFailedAndTheLinkClosingIsAFailureToo() {
        var lab = opened()
        var book = ConnectionBook()
        labLink(&lab, &book, to: peer, id: "P", handle: 0x40)
        guard case .success(let opening) = lab.secure(0x40, book: book, attdAttached: true) else { return XCTFail("not the lab's link") }
        XCTAssertEqual(lab.pairingFinished(0x40, .failure(LabPairingFailure(reason: 0x05, remote: true))),
                       [.event(session: 7, .security(handle: 0x40, .pairingFailed(reason: 0x05, remote: true)))])
        XCTAssertEqual(lab.secured(0x40, opening: opening, nil), .success(.pairingFailed(reason: 0x05, remote: true)),
                       "attd's bare failure is answered with what its events said (Core Vol 3 Part H §3.5.5)")
        XCTAssertEqual(lab.secure(0x40, book: book, attdAttached: false), .failure(.attdNotAttached))
        XCTAssertEqual(lab.secured(0x40, opening: opening, nil), .success(.pairingFailed(reason: 0x05, remote: true)),
                       "a LabSecure refused for want of attd leaves the last failure for one still waiting")
        guard case .success(let again) = lab.secure(0x40, book: book, attdAttached: true) else { return XCTFail("not the lab's link") }
        _ = book.disconnected(handle: 0x40)
        XCTAssertEqual(lab.linkEvent(.disconnected(handle: 0x40, reason: 0x13), madeKnown: nil, book: book),
                       [.event(session: 7, .linkDown(handle: 0x40, reason: 0x13))])
        XCTAssertEqual(lab.secured(0x40, opening: again, nil), .success(.linkClosed(reason: 0x13)))
        XCTAssertEqual(lab.securityChanged(0x40, status: 0x06, encrypted: false, authenticated: false, bonded: false),
                       [.event(session: 7, .security(handle: 0x40, .encryptionFailed(status: 0x06)))], "PIN or Key Missing: the peer lost its bond")
    }

    func testAFactoryResetEndsTheLabsWorkAndEveryLinkThenResetsTheControllerAndAnswersOnce() throws {
        var lab = opened()
        var book = ConnectionBook()
        labLink(&lab, &book, to: peer, id: "P", handle: 0x40)
        appLink(&book)
        let advertising = try LabAdvertising(data: [], scanResponse: [], connectable: true, scannable: true, directedTo: nil, ownAddress: .public, interval: 0)
        XCTAssertEqual(lab.advertise(advertising, "adv"),
                       [.pairingForNextLink(central: false, peer: nil, ownAddress: .public), .advertisingChanged(answering: "adv")])
        let attemptTo = DeviceAddress("C0:11:22:33:44:77/random")!
        _ = lab.connect(to: attemptTo, ownAddress: .public, book: book, see: { _ in ("Q", false) }, "pending")
        let key = lab.session!.key

        XCTAssertEqual(lab.factoryReset(keepBonds: false, recordReadable: false, book: book, at: .seconds(5), "unreadable"),
                       [.refuse("unreadable", .recordUnreadable)], "a damaged record cannot tell the lab's bonds from the apps'")
        XCTAssertEqual(lab.factoryReset(keepBonds: false, recordReadable: true, book: book, at: .seconds(5), "reset"),
                       [.pairingForNextLink(central: false, peer: nil, ownAddress: nil), .cancelConnect(key, identifier: "Q"),
                        .refuse("pending", .attemptEndedByReset), .disconnect(0x40, answering: nil),
                        .advertisingChanged(answering: nil), .scanChanged(restart: false),
                        .removeLabBonds, .disconnect(0x40, answering: nil), .disconnect(0x41, answering: nil)])
        XCTAssertNil(lab.advertising, "the lab's advertising ended")
        XCTAssertEqual(lab.factoryReset(keepBonds: true, recordReadable: true, book: book, at: .seconds(5), "twice"), [.refuse("twice", .resetUnderWay)])
        XCTAssertEqual(lab.linkEnded(0x40, book: book, at: .seconds(5)), [])
        XCTAssertEqual(lab.nextDeadline, .seconds(6))
        XCTAssertEqual(lab.tick(book: book, at: .seconds(6)), [.resetController], "an app's link that outlives the grace does not hold the reset up")
        XCTAssertTrue(lab.isResettingController)
        XCTAssertEqual(lab.controllerReset(failure: nil, book: book), [.forgetLabPeripherals, .answer("reset", .ack)])
        XCTAssertEqual(lab.controllerReset(failure: nil, book: book), [], "answered once")
        XCTAssertTrue(lab.isLabSession(7), "the session stays open")

        XCTAssertEqual(lab.factoryReset(keepBonds: true, recordReadable: true, book: ConnectionBook(), at: .seconds(9), "again"),
                       [.pairingForNextLink(central: false, peer: nil, ownAddress: nil), .advertisingChanged(answering: nil), .scanChanged(restart: false),
                        .resetController])
        XCTAssertEqual(lab.controllerReset(failure: "hcid is not attached", book: book), [.refuse("again", .resetFailed("hcid is not attached"))])
    }

    func testClosingTheSessionEndsItsWorkAndItsLinksButNotTheAppsAndTimingsAreReportedForKnownLinks() {
        var lab = opened()
        var book = ConnectionBook()
        labLink(&lab, &book, to: peer, id: "P", handle: 0x40)
        appLink(&book)
        let timing = LinkTiming(handle: 0x40, interval: 6, latency: 0, supervisionTimeout: 100)
        XCTAssertEqual(lab.timingChanged(timing, isUpdate: false, book: book), [], "a link's first timing comes with its linkUp")
        XCTAssertEqual(lab.timingChanged(timing, isUpdate: true, book: book), [.event(session: 7, .linkUpdated(handle: 0x40))])
        XCTAssertEqual(lab.timings[0x40], timing)
        XCTAssertEqual(lab.timingChanged(LinkTiming(handle: 0x50, interval: 6, latency: 0, supervisionTimeout: 100), isUpdate: true, book: book), [])
        lab.linkGone(0x40)
        XCTAssertNil(lab.timings[0x40])

        _ = lab.scan(.init(passive: true, ownAddress: .public), "scan")
        XCTAssertEqual(lab.sessionClosed(3, book: book), [], "an app's session")
        XCTAssertEqual(lab.sessionClosed(7, book: book),
                       [.pairingForNextLink(central: false, peer: nil, ownAddress: nil), .disconnect(0x40, answering: nil),
                        .advertisingChanged(answering: nil), .scanChanged(restart: false)], "the app's link 0x41 stays")
        XCTAssertNil(lab.session)
        XCTAssertNil(lab.scan)
        XCTAssertEqual(lab.linkEvent(.disconnected(handle: 0x40, reason: 0x16), madeKnown: nil, book: book), [], "no lab to tell")
    }

    // A read-through of managerd: a new attd (kill -9 of the last) had none of the lab's pairing settings, so it asked
    // the user for Just Works on the lab's links and hashed the controller's identity where the lab used its random one.
    func testANewAttdIsToldHowTheLabPairsItsLinksAndItsNextOnes() throws {
        var lab = opened()
        var book = ConnectionBook()
        labLink(&lab, &book, to: peer, id: "P", handle: 0x40)
        appLink(&book)
        let advertising = try LabAdvertising(data: [], scanResponse: [], connectable: true, scannable: true, directedTo: nil,
                                             ownAddress: .resolvableOrRandom, interval: 0)
        _ = lab.advertise(advertising, "adv")
        let central = DeviceAddress("C0:11:22:33:44:88/random")!
        _ = book.connected(identifier: "C", handle: 0x42, address: central, isCentral: false)
        _ = lab.linkEvent(.connected(handle: 0x42, central: false, peer: central), madeKnown: nil, book: book)
        let attemptTo = DeviceAddress("C0:11:22:33:44:77/random")!
        _ = lab.connect(to: attemptTo, ownAddress: .public, book: book, see: { _ in ("Q", false) }, "pending")
        XCTAssertEqual(lab.attdAttached(bearers: [0x40, 0x41, 0x42], book: book),
                       [.pairingForLink(handle: 0x40, ownAddress: .random), .pairingForLink(handle: 0x42, ownAddress: .resolvableOrRandom),
                        .pairingForNextLink(central: false, peer: nil, ownAddress: .resolvableOrRandom),
                        .pairingForNextLink(central: true, peer: attemptTo, ownAddress: .public)], "the app's link 0x41 is not the lab's")
        XCTAssertEqual(lab.attdAttached(bearers: [0x42], book: book).first, .pairingForLink(handle: 0x42, ownAddress: .resolvableOrRandom),
                       "only links the new attd has")
        _ = lab.linkEvent(.disconnected(handle: 0x42, reason: 0x13), madeKnown: nil, book: book)
        _ = lab.stopAdvertising("stop")
        _ = lab.cancelConnect("cancel")
        XCTAssertEqual(lab.attdAttached(bearers: [0x40, 0x42], book: book), [.pairingForLink(handle: 0x40, ownAddress: .random)])
        _ = lab.sessionClosed(7, book: book)
        XCTAssertEqual(lab.attdAttached(bearers: [0x40], book: book), [], "no lab")
    }
}
