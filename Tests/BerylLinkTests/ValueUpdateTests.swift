import BerylATT
import BerylCore
import BerylGATT
import BerylLink
import XCTest

/// updateValue over several links: all subscribed peers or none, and ReadyToUpdate once every link has room.
final class ValueUpdateTests: XCTestCase {
    private func links() throws -> (valueHandle: UInt16, [LinkSession]) {
        let database = AttributeDatabase()
        let start = try database.add(ServiceDefinition(uuid: BluetoothUUID(0x180D), characteristics: [
            CharacteristicDefinition(uuid: BluetoothUUID(0x2A37), properties: [.notify, .indicate], permissions: [], value: nil),
        ]))
        let valueHandle = start + 2
        let sessions = (0..<3).map { LinkSession(handle: UInt16(0x40 + $0), isCentral: false, database: database) }
        sessions[0].server.restore(clientConfigurations: [valueHandle + 1: 0x0001], clientFeatures: [])
        sessions[1].server.restore(clientConfigurations: [valueHandle + 1: 0x0001], clientFeatures: [])
        sessions[2].server.restore(clientConfigurations: [valueHandle + 1: 0x0002], clientFeatures: [])
        return (valueHandle, sessions)
    }

    func testANotificationGoesToEverySubscribedLinkOrToNone() throws {
        let (valueHandle, links) = try links()
        var pacer = TransmitPacer()
        _ = pacer.credited(links.map { TransmitPacer.Grant(handle: $0.handle, credits: 1, fresh: true) }, bufferSize: 27)
        let first = try XCTUnwrap(pacer.update(valueHandle: valueHandle, value: [60], indicate: false, from: 7, on: links))
        XCTAssertEqual(first.peers, 2, "the third subscribed to indications only")
        XCTAssertEqual(first.transmissions.compactMap { output -> UInt16? in if case .transmit(let t) = output { t.link } else { nil } }.sorted(), [0x40, 0x41])
        // Fill link 0x41's outbox, its credits spent: the next update is refused whole, though 0x40 has room.
        for _ in 0..<(TransmitPacer.capacity) { _ = pacer.enqueue([0], on: 0x41) }
        XCTAssertFalse(pacer.hasRoom(on: 0x41))
        XCTAssertNil(pacer.update(valueHandle: valueHandle, value: [61], indicate: false, from: 7, on: links))
        XCTAssertNil(pacer.update(valueHandle: valueHandle, value: [62], indicate: false, from: 7, on: links))
        // The full link closes: the publisher that was refused hears it may send again, once.
        XCTAssertEqual(pacer.linkClosed(0x41), [.readyToUpdate([.init(sender: 7, count: 1)])])
        XCTAssertEqual(try XCTUnwrap(pacer.update(valueHandle: valueHandle, value: [63], indicate: false, from: 7, on: [links[0], links[2]])).peers, 1)
    }

    /// After a refusal everything waits for the ReadyToUpdate; a pipelining (ordered) publisher's values sent before it
    /// saw that ReadyToUpdate are told so, and no other ReadyToUpdate is owed for them.
    func testAfterARefusalValuesWaitForTheReadyAndOnesSentBeforeItAreStale() throws {
        let (valueHandle, links) = try links()
        var pacer = TransmitPacer()
        _ = pacer.credited([TransmitPacer.Grant(handle: 0x40, credits: 0, fresh: true)], bufferSize: 27)
        let subscribed = [links[0]]
        for index in 0..<TransmitPacer.capacity {
            XCTAssertNotNil(pacer.update(valueHandle: valueHandle, value: [UInt8(index)], indicate: false, from: 7, on: subscribed))
        }
        XCTAssertNil(pacer.update(valueHandle: valueHandle, value: [100], indicate: false, from: 7, on: subscribed), "full")
        let room = pacer.credited([TransmitPacer.Grant(handle: 0x40, credits: 1, fresh: false)], bufferSize: 27)
        XCTAssertTrue(room.contains(.readyToUpdate([.init(sender: 7, count: 1)])))
        XCTAssertNotNil(pacer.update(valueHandle: valueHandle, value: [101], indicate: false, from: 8, on: subscribed), "the one place left")
        XCTAssertNil(pacer.update(valueHandle: valueHandle, value: [102], indicate: false, from: 8, on: subscribed), "full again")
        XCTAssertTrue(pacer.holdsBack(8))
        _ = pacer.credited([TransmitPacer.Grant(handle: 0x40, credits: 0, fresh: false)], bufferSize: 27)
        XCTAssertNil(pacer.update(valueHandle: valueHandle, value: [103], indicate: false, from: 8, on: subscribed), "held back until its ready")
        XCTAssertEqual(pacer.sentBeforeReady(7, readySeen: 0), 1, "sent before ready 1")
        XCTAssertNil(pacer.sentBeforeReady(7, readySeen: 1))
        XCTAssertNil(pacer.sentBeforeReady(9, readySeen: 0), "never refused: nothing is stale")
    }

    /// managerd sends for each of its apps: one app's refusal holds back only that app, each counts its own
    /// ReadyToUpdate, and an app that goes (or managerd) is owed nothing.
    func testSendersOfOnePublisherAreRefusedAndReadiedEachOnTheirOwn() throws {
        let (valueHandle, links) = try links()
        var pacer = TransmitPacer()
        _ = pacer.credited([TransmitPacer.Grant(handle: 0x40, credits: 0, fresh: true)], bufferSize: 27)
        let subscribed = [links[0]]
        let heartRate = UpdateSender(publisher: 5, onBehalfOf: 21), thermostat = UpdateSender(publisher: 5, onBehalfOf: 22)
        let doorlock = UpdateSender(publisher: 5, onBehalfOf: 23)
        for index in 0..<TransmitPacer.capacity - 1 {
            XCTAssertNotNil(pacer.update(valueHandle: valueHandle, value: [UInt8(index)], indicate: false, from: heartRate, on: subscribed))
        }
        XCTAssertNotNil(pacer.update(valueHandle: valueHandle, value: [40], indicate: false, from: thermostat, on: subscribed), "the last place")
        XCTAssertNil(pacer.update(valueHandle: valueHandle, value: [41], indicate: false, from: heartRate, on: subscribed), "full")
        XCTAssertNil(pacer.update(valueHandle: valueHandle, value: [42], indicate: false, from: doorlock, on: subscribed), "full")
        XCTAssertTrue(pacer.holdsBack(heartRate))
        XCTAssertFalse(pacer.holdsBack(thermostat), "the thermostat was never refused")
        pacer.senderGone(doorlock)
        let room = pacer.credited([TransmitPacer.Grant(handle: 0x40, credits: 2, fresh: false)], bufferSize: 27)
        XCTAssertTrue(room.contains(.readyToUpdate([.init(sender: heartRate, count: 1)])), "only the heart-rate app is told: \(room)")
        XCTAssertEqual(pacer.sentBeforeReady(heartRate, readySeen: 0), 1)
        XCTAssertNil(pacer.sentBeforeReady(thermostat, readySeen: 0), "the thermostat's count is its own")
        XCTAssertNil(pacer.sentBeforeReady(UpdateSender(publisher: 6, onBehalfOf: 21), readySeen: 0), "another publisher's sender 21 is another sender")
        // Full again with both refused; managerd goes: no one it sent for is owed a ReadyToUpdate.
        for _ in 0..<3 { _ = pacer.update(valueHandle: valueHandle, value: [43], indicate: false, from: thermostat, on: subscribed) }
        XCTAssertNil(pacer.update(valueHandle: valueHandle, value: [44], indicate: false, from: heartRate, on: subscribed))
        XCTAssertTrue(pacer.holdsBack(thermostat) && pacer.holdsBack(heartRate))
        pacer.publisherGone(5)
        XCTAssertEqual(pacer.linkClosed(0x40), [])
        XCTAssertNil(pacer.sentBeforeReady(heartRate, readySeen: 0), "its counts went with it")
    }

    /// An ordered sender's indication waits behind its refused notifications (it would overtake them on the air);
    /// another sender's indications, and an unordered sender's, go to their bearers as before.
    func testAnOrderedSendersIndicationWaitsBehindItsRefusedNotifications() throws {
        let (valueHandle, links) = try links()
        var pacer = TransmitPacer()
        _ = pacer.credited([TransmitPacer.Grant(handle: 0x40, credits: 0, fresh: true)], bufferSize: 27)
        for _ in 0..<TransmitPacer.capacity { _ = pacer.enqueue([0], on: 0x40) }
        let app = UpdateSender(publisher: 5, onBehalfOf: 21)
        XCTAssertNil(pacer.update(valueHandle: valueHandle, value: [1], indicate: false, ordered: true, from: app, on: [links[0]]), "full")
        XCTAssertNil(pacer.update(valueHandle: valueHandle, value: [2], indicate: true, ordered: true, from: app, on: links), "held back")
        XCTAssertNotNil(pacer.update(valueHandle: valueHandle, value: [3], indicate: true, ordered: false, from: app, on: links))
        XCTAssertNotNil(pacer.update(valueHandle: valueHandle, value: [4], indicate: true, ordered: true, from: UpdateSender(publisher: 5, onBehalfOf: 22), on: links))
    }

    func testAFullLinkWhosePeerDidNotSubscribeRefusesNothing() throws {
        let (valueHandle, links) = try links()
        var pacer = TransmitPacer()
        for _ in 0..<(TransmitPacer.capacity) { _ = pacer.enqueue([0], on: 0x42) }
        XCTAssertEqual(pacer.update(valueHandle: valueHandle, value: [60], indicate: false, from: 7, on: links)?.peers, 2)
    }

    func testIndicationsGoToTheirBearersUnpaced() throws {
        let (valueHandle, links) = try links()
        var pacer = TransmitPacer()
        for _ in 0..<(TransmitPacer.capacity) { _ = pacer.enqueue([0], on: 0x42) }
        let update = try XCTUnwrap(pacer.update(valueHandle: valueHandle, value: [60], indicate: true, from: 7, on: links))
        XCTAssertEqual(update.peers, 1)
        XCTAssertEqual(update.transmissions, [])
        XCTAssertEqual(update.indications.first { $0.link.handle == 0x42 }?.outputs,
                       [.send(ATTPDU.handleValueIndication(handle: valueHandle, value: [60]).encoded)])
    }

    /// One indication is outstanding and up to 32 wait behind it; the next is refused (updateValue's false), and that
    /// sender's ReadyToUpdate waits until a confirmation makes room on that link. A sender refused for a full outbox
    /// elsewhere is not held back by the slow peer.
    func testABackloggedLinkRefusesIndicationsUntilAConfirmationMakesRoom() throws {
        let (valueHandle, links) = try links()
        let indicated = links[2]
        var pacer = TransmitPacer()
        for index in 0...ATTServer.indicationBacklog {
            XCTAssertNotNil(pacer.update(valueHandle: valueHandle, value: [UInt8(index)], indicate: true, from: 7, on: links), "value \(index)")
        }
        XCTAssertFalse(indicated.server.hasIndicationRoom)
        XCTAssertNil(pacer.update(valueHandle: valueHandle, value: [99], indicate: true, from: 7, on: links), "the backlog is full")
        XCTAssertNotNil(pacer.update(valueHandle: valueHandle, value: [60], indicate: false, from: 9, on: links),
                        "notifications do not wait behind indications")

        _ = pacer.credited([TransmitPacer.Grant(handle: 0x40, credits: 0, fresh: true)], bufferSize: 27)
        for _ in 0..<TransmitPacer.capacity { _ = pacer.enqueue([0], on: 0x40) }
        XCTAssertNil(pacer.update(valueHandle: valueHandle, value: [61], indicate: false, from: 8, on: links), "0x40's outbox is full")
        let roomOn40 = pacer.credited([TransmitPacer.Grant(handle: 0x40, credits: 2, fresh: false)], bufferSize: 27)
        XCTAssertEqual(roomOn40.filter { if case .readyToUpdate = $0 { true } else { false } }, [.readyToUpdate([.init(sender: 8, count: 1)])],
                       "the notifier hears at once; the indicator still waits for its peer")

        XCTAssertEqual(pacer.indicationConfirmed(on: indicated.handle, hasRoom: false), [])
        let confirmed = indicated.server.receive(ATTPDU.handleValueConfirmation.encoded)
        XCTAssertEqual(confirmed.last, .send(ATTPDU.handleValueIndication(handle: valueHandle, value: [1]).encoded), "the next goes")
        XCTAssertTrue(indicated.server.hasIndicationRoom)
        XCTAssertEqual(pacer.indicationConfirmed(on: indicated.handle, hasRoom: true), [.readyToUpdate([.init(sender: 7, count: 1)])])
        XCTAssertEqual(pacer.indicationConfirmed(on: indicated.handle, hasRoom: true), [], "once")
    }
}

/// What goes on hcid's urgent lane: what a peer waits on, nothing that must keep its place behind queued notifications.
final class ACLUrgencyTests: XCTestCase {
    private func pdu(channel: UInt16, _ payload: [UInt8]) -> [UInt8] {
        [UInt8(payload.count & 0xFF), UInt8(payload.count >> 8), UInt8(channel & 0xFF), UInt8(channel >> 8)] + payload
    }

    func testAnswersAreUrgentAndRequestsIndicationsAndNotificationsAreNot() {
        for answer: UInt8 in [0x01, 0x03, 0x0B, 0x13, 0x1E] { XCTAssertTrue(ACLUrgency.isAnswer(pdu(channel: 4, [answer, 0, 0])), "0x\(String(answer, radix: 16))") }
        for other: UInt8 in [0x02, 0x0A, 0x12, 0x1B, 0x1D, 0x52] { XCTAssertFalse(ACLUrgency.isAnswer(pdu(channel: 4, [other, 0, 0])), "0x\(String(other, radix: 16))") }
        XCTAssertTrue(ACLUrgency.isAnswer(pdu(channel: 6, [0x01, 3, 0, 1, 16, 7, 7])), "SMP")
        XCTAssertTrue(ACLUrgency.isAnswer(pdu(channel: 5, [0x13, 1, 2, 0, 0, 0])), "LE signalling")
        XCTAssertFalse(ACLUrgency.isAnswer([0x01, 0x00, 0x04]), "too short to say")
    }
}
