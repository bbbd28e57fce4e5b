import BerylATT
import BerylCore
import BerylGATT
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
        _ = pacer.credited(links.map { TransmitPacer.Grant(link: $0.handle, credits: 1, fresh: true) }, bufferSize: 27)
        let first = try XCTUnwrap(pacer.update(valueHandle: valueHandle, value: [60], indicate: false, from: 7, on: links))
        XCTAssertEqual(first.peers, 2, "the third subscribed to indications only")
        XCTAssertEqual(first.transmissions.compactMap { output -> UInt16? in if case .transmit(let t) = output { t.link } else { nil } }.sorted(), [0x40, 0x41])
        // Fill link 0x41's outbox, its credits spent: the next update is refused whole, though 0x40 has room.
        for _ in 0..<(TransmitPacer.capacity) { _ = pacer.enqueue([0], on: 0x41) }
        XCTAssertFalse(pacer.hasRoom(on: 0x41))
        XCTAssertNil(pacer.update(valueHandle: valueHandle, value: [61], indicate: false, from: 7, on: links))
        XCTAssertNil(pacer.update(valueHandle: valueHandle, value: [62], indicate: false, from: 7, on: links))
        // The full link closes: the publisher that was refused hears it may send again, once.
        XCTAssertEqual(pacer.linkClosed(0x41), [.readyToUpdate([.init(publisher: 7, count: 1)])])
        XCTAssertEqual(try XCTUnwrap(pacer.update(valueHandle: valueHandle, value: [63], indicate: false, from: 7, on: [links[0], links[2]])).peers, 1)
    }

    /// A publisher that pipelines: what it sent before it saw the ReadyToUpdate answering a refusal is refused too,
    /// though there is room by then, so what it sends again lands before it, not after.
    func testAnOrderedPublishersValuesSentBeforeItSawTheReadyAreRefused() throws {
        let (valueHandle, links) = try links()
        var pacer = TransmitPacer()
        _ = pacer.credited([TransmitPacer.Grant(link: 0x40, credits: 0, fresh: true)], bufferSize: 27)
        let subscribed = [links[0]]
        for index in 0..<TransmitPacer.capacity {
            XCTAssertNotNil(pacer.update(valueHandle: valueHandle, value: [UInt8(index)], indicate: false, from: 7, readySeen: 0, on: subscribed))
        }
        XCTAssertNil(pacer.update(valueHandle: valueHandle, value: [100], indicate: false, from: 7, readySeen: 0, on: subscribed), "full")
        XCTAssertNil(pacer.update(valueHandle: valueHandle, value: [101], indicate: false, from: 7, readySeen: 0, on: subscribed), "owed a ready")
        let ready = pacer.credited([TransmitPacer.Grant(link: 0x40, credits: 10, fresh: false)], bufferSize: 27)
        XCTAssertTrue(ready.contains(.readyToUpdate([.init(publisher: 7, count: 1)])))
        XCTAssertNil(pacer.update(valueHandle: valueHandle, value: [102], indicate: false, from: 7, readySeen: 0, on: subscribed),
                     "sent before the publisher saw ready 1: refused though there is room, and no new ready is owed")
        XCTAssertNotNil(pacer.update(valueHandle: valueHandle, value: [100], indicate: false, from: 7, readySeen: 1, on: subscribed))
        XCTAssertNotNil(pacer.update(valueHandle: valueHandle, value: [103], indicate: false, from: 8, on: subscribed), "unordered publishers are not held")
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
}
