import BerylATT
import BerylAttWire
import BerylCore
import BerylGATT
import BerylLink
import BerylSMP
import BerylWire
import Foundation
import XCTest

/// What attd takes from publishers and clients without a peer's answer (Notify, writes without response), the
/// batches it sends hcid, and the typed errors its requests are refused with.
final class SendingWireTests: XCTestCase {
    private func subscribedLink() throws -> (valueHandle: UInt16, LinkSession) {
        let (valueHandle, link, _) = try subscribedLinkAndDatabase()
        return (valueHandle, link)
    }

    private func subscribedLinkAndDatabase() throws -> (valueHandle: UInt16, LinkSession, AttributeDatabase) {
        let database = AttributeDatabase()
        let start = try database.add(ServiceDefinition(uuid: BluetoothUUID(0x180D), characteristics: [
            CharacteristicDefinition(uuid: BluetoothUUID(0x2A37), properties: [.notify], permissions: [], value: nil),
        ]))
        let valueHandle = start + 2
        let link = LinkSession(handle: 0x40, isCentral: false, database: database)
        link.server.restore(clientConfigurations: [valueHandle + 1: 0x0001], clientFeatures: [])
        return (valueHandle, link, database)
    }

    private func notify(_ handle: UInt16, _ value: [UInt8] = [1], ordered: Bool = false, readySeen: UInt32 = 0) -> Beryl_Ipc_V1_Notify {
        .with { $0.valueHandle = UInt32(handle); $0.value = Data(value); $0.ordered = ordered; $0.readySeen = readySeen; $0.onBehalfOf = 9 }
    }

    func testANotifyIsRefusedWithTheErrorItsSenderActsOn() throws {
        let (valueHandle, link) = try subscribedLink()
        var pacer = TransmitPacer()
        _ = pacer.credited([.init(handle: 0x40, credits: 0, fresh: true)], bufferSize: 27)
        let owns = { (handle: UInt16) in handle == valueHandle }

        XCTAssertEqual(pacer.update(notify(valueHandle + 1), from: 3, owns: owns, on: [link]).failure?.field, "value_handle")
        XCTAssertEqual(pacer.update(notify(0), from: 3, owns: { _ in true }, on: [link]).failure?.code, .notFound)
        let long = pacer.update(notify(valueHandle, [UInt8](repeating: 0, count: 513)), from: 3, owns: owns, on: [link]).failure
        XCTAssertEqual(long?.code, .invalidArgument)
        XCTAssertEqual(long?.field, "value")

        for index in 0..<TransmitPacer.capacity {
            XCTAssertEqual(pacer.update(notify(valueHandle, [UInt8(index)]), from: 3, owns: owns, on: [link]).success?.peers, 1)
        }
        XCTAssertEqual(pacer.update(notify(valueHandle, ordered: true), from: 3, owns: owns, on: [link]).failure?.code, .busy)
        // Room again: one ReadyToUpdate (count 1) for app 9 of publisher 3.
        let ready = pacer.credited([.init(handle: 0x40, credits: 1, fresh: false)], bufferSize: 27)
        XCTAssertTrue(ready.contains(.readyToUpdate([.init(sender: UpdateSender(publisher: 3, onBehalfOf: 9), count: 1)])))
        XCTAssertEqual(pacer.update(notify(valueHandle, ordered: true, readySeen: 0), from: 3, owns: owns, on: [link]).failure?.code, .cancelled,
                       "sent before the ready it had not seen")
        XCTAssertEqual(pacer.update(notify(valueHandle, ordered: true, readySeen: 1), from: 3, owns: owns, on: [link]).success?.peers, 1)
    }

    /// updateValue(_:for:onSubscribedCentrals:) naming centrals: only their links, and only their room counts.
    func testANotifyNamingLinksGoesToThoseAlone() throws {
        let (valueHandle, first, database) = try subscribedLinkAndDatabase()
        let second = LinkSession(handle: 0x41, isCentral: false, database: database)
        second.server.restore(clientConfigurations: [valueHandle + 1: 0x0001], clientFeatures: [])
        var pacer = TransmitPacer()
        _ = pacer.credited([.init(handle: 0x40, credits: 8, fresh: true), .init(handle: 0x41, credits: 0, fresh: true)], bufferSize: 27)
        for _ in 0..<TransmitPacer.capacity { _ = pacer.enqueue([0], on: 0x41) }
        var named = notify(valueHandle)
        named.connectionHandles = [0x40]
        let update = try XCTUnwrap(pacer.update(named, from: 3, owns: { _ in true }, on: [first, second]).success, "0x41 is full but not named")
        XCTAssertEqual(update.peers, 1)
        XCTAssertEqual(update.transmissions.compactMap { output -> UInt16? in if case .transmit(let t) = output { t.link } else { nil } }, [0x40])
        XCTAssertEqual(pacer.update(notify(valueHandle), from: 3, owns: { _ in true }, on: [first, second]).failure?.code, .busy, "everyone: 0x41 is full")
    }

    func testAWriteWithoutResponseIsAdmittedSignedOrRefused() throws {
        let (_, link) = try subscribedLink()
        var pacer = TransmitPacer()
        _ = pacer.credited([.init(handle: 0x40, credits: 0, fresh: true)], bufferSize: 27)
        var signed: [UInt16] = []
        let noKey = { (handle: UInt16, _: [UInt8]) -> Result<ATTPDU, SigningRefusal> in
            signed.append(handle)
            return .failure(.noKey)
        }
        func write(_ length: Int, signed: Bool = false, ordered: Bool = false, readySeen: UInt32 = 0) -> Beryl_Ipc_V1_GattWrite {
            .with { $0.handle = 0x21; $0.value = Data(repeating: 7, count: length); $0.signed = signed; $0.ordered = ordered; $0.readySeen = readySeen }
        }

        XCTAssertEqual(pacer.admitWrite(write(20), from: 1, on: link, encrypted: false, sign: noKey).success,
                       .writeCommand(handle: 0x21, value: [UInt8](repeating: 7, count: 20)), "ATT_MTU 23 carries 20 bytes")
        XCTAssertEqual(pacer.admitWrite(write(21), from: 1, on: link, encrypted: false, sign: noKey).failure?.field, "value")
        let unsigned = pacer.admitWrite(write(8, signed: true), from: 1, on: link, encrypted: false, sign: noKey).failure
        XCTAssertEqual(unsigned?.code, .securityFailed)
        XCTAssertEqual(unsigned?.detail.attError, ATTError.insufficientAuthentication.rawValue)
        XCTAssertEqual(signed, [0x21])
        XCTAssertEqual(pacer.admitWrite(write(8, signed: true), from: 1, on: link, encrypted: true, sign: noKey).success,
                       .writeCommand(handle: 0x21, value: [UInt8](repeating: 7, count: 8)), "an encrypted link needs no signature")
        XCTAssertEqual(signed, [0x21])

        for _ in 0..<TransmitPacer.capacity { _ = pacer.enqueue([0x52], on: 0x40) }
        XCTAssertEqual(pacer.admitWrite(write(4, ordered: true), from: 1, on: link, encrypted: false, sign: noKey).failure?.code, .busy)
        XCTAssertTrue(pacer.holdsBackWrites(from: UpdateSender(publisher: 1), on: 0x40))
        _ = pacer.credited([.init(handle: 0x40, credits: 1, fresh: false)], bufferSize: 27)
        XCTAssertEqual(pacer.admitWrite(write(4, ordered: true, readySeen: 0), from: 1, on: link, encrypted: false, sign: noKey).failure?.code,
                       .cancelled)
        XCTAssertNotNil(pacer.admitWrite(write(4, ordered: true, readySeen: 1), from: 1, on: link, encrypted: false, sign: noKey).success)
    }

    func testAWakeUpsACLGoesAsOneRequestUnderTheCap() throws {
        var batch = ACLBatch()
        XCTAssertNil(batch.take())
        XCTAssertNil(batch.add([1], on: 0x40, lane: .credited))
        XCTAssertEqual(batch.take()?.hci.sendAcl.pdu, Data([1]), "one PDU goes as a SendAcl")
        XCTAssertTrue(batch.isEmpty)

        XCTAssertNil(batch.add([1], on: 0x40, lane: .credited))
        XCTAssertNil(batch.add([2], on: 0x41, lane: .urgent))
        XCTAssertNil(batch.add([3], on: 0x40, lane: .credited))
        batch.drop(link: 0x40)
        XCTAssertNil(batch.add([4], on: 0x42, lane: .credited))
        let pdus = try XCTUnwrap(batch.take()).hci.sendAclBatch.pdus
        XCTAssertEqual(pdus.map(\.pdu), [Data([2]), Data([4])], "a closed link's PDUs go nowhere; the rest keep their order")
        XCTAssertEqual(pdus.map(\.lane), [.urgent, .credited])

        let big = [UInt8](repeating: 0, count: 20_000)
        XCTAssertNil(batch.add(big, on: 0x40, lane: .credited))
        XCTAssertNil(batch.add(big, on: 0x40, lane: .credited))
        let full = try XCTUnwrap(batch.add(big, on: 0x40, lane: .credited), "a third would pass 48 KiB: the first two go first")
        XCTAssertEqual(full.hci.sendAclBatch.pdus.count, 2)
        XCTAssertEqual(batch.take()?.hci.sendAcl.pdu.count, 20_000)
    }

    func testAPeersRequestGoesToItsOneLivePublisherAsAnEvent() {
        var router = ServiceRouter(answerTimeout: .seconds(5))
        router.published(0x10...0x18, by: 5)
        router.published(0x20...0x28, by: 6)
        let live = { (owner: UpdateSender) in owner.publisher == 5 }

        let read = router.route(.readRequested(id: 77, handle: 0x12, offset: 4), on: 0x40, isLive: live, at: .zero)
        XCTAssertEqual(read?.owner.publisher, 5)
        XCTAssertEqual(read?.event.att.readRequested.handle, 0x12)
        XCTAssertEqual(read?.event.att.readRequested.offset, 4)
        let answerID = try? XCTUnwrap(read?.event.att.readRequested.id)
        XCTAssertEqual(try? router.answer(answerID ?? 0, isRead: true).serverID, 77, "the answer is owed under the event's id")

        let command = router.route(.writeRequested(id: 78, writes: [.init(handle: 0x12, offset: 0, value: [1])], withResponse: false),
                                   on: 0x40, isLive: live, at: .zero)
        XCTAssertEqual(command?.event.att.writeRequested.id, 0, "a write command owes no answer")
        XCTAssertNil(router.route(.readRequested(id: 79, handle: 0x22, offset: 0), on: 0x40, isLive: live, at: .zero), "its publisher is gone")
        XCTAssertNil(router.route(.writeRequested(id: 80, writes: [.init(handle: 0x12, offset: 0, value: [1]), .init(handle: 0x22, offset: 0, value: [2])],
                                                  withResponse: true), on: 0x40, isLive: { _ in true }, at: .zero),
                     "one publisher is never handed another's values")
    }

    func testSecurityRefusalsAndLinkPairingAddressesAreTyped() throws {
        XCTAssertEqual(WireFailure(.noLink, link: 0x40).field, "connection_handle")
        XCTAssertEqual(WireFailure(.noPairingUnderWay, link: 0x40).code, .notFound)
        let busy = WireFailure(.pairingUnderWay, link: 0x40)
        XCTAssertEqual(busy.code, .busy)
        XCTAssertEqual(busy.detail.managerReason, .pairingUnderWay)
        XCTAssertEqual(WireFailure(.identityUnknown).code, .notReady)
        XCTAssertEqual(WireFailure(.noBond, identity: "AA:BB:CC:DD:EE:FF").field, "identity")
        XCTAssertEqual(WireFailure(.storage("disk full")).code, .internal)

        XCTAssertThrowsError(try LinkPairingOptions(wire: .with { $0.forNextLink = true; $0.peer = "nope" })) {
            XCTAssertEqual(($0 as? WireFailure)?.field, "peer")
        }
        XCTAssertThrowsError(try LinkPairingOptions(wire: .with { $0.localAddress = "11:22" })) {
            XCTAssertEqual(($0 as? WireFailure)?.field, "local_address")
        }
        let options = try? LinkPairingOptions(wire: .with { $0.forNextLink = true; $0.peer = "AA:BB:CC:DD:EE:FF/random"; $0.localAddress = "" })
        XCTAssertEqual(options?.peer, DeviceAddress("AA:BB:CC:DD:EE:FF/random"))
        XCTAssertNil(options?.localAddress)
        XCTAssertNil(try LinkPairingOptions(wire: .with { $0.peer = "ignored without for_next_link" }).peer)
    }

    func testAPublishedServiceListsEachValueHandle() throws {
        let database = AttributeDatabase()
        let start = try database.add(ServiceDefinition(uuid: BluetoothUUID(0x180F), characteristics: [
            CharacteristicDefinition(uuid: BluetoothUUID(0x2A19), properties: [.read], permissions: [.readable], value: [90]),
            CharacteristicDefinition(uuid: BluetoothUUID(0x2A1A), properties: [.notify], permissions: [], value: nil),
        ]))
        let end = try XCTUnwrap(database.attribute(at: start)?.groupEnd)
        let published = Beryl_Ipc_V1_ServicePublished(start...end, in: database)
        XCTAssertEqual(published.startHandle, UInt32(start))
        XCTAssertEqual(published.endHandle, UInt32(end))
        XCTAssertEqual(published.valueHandles, [UInt32(start + 2), UInt32(start + 4)])
        let bearer = Beryl_Ipc_V1_Bearer(link: 0x40, mtu: 247, central: true, peer: DeviceAddress("AA:BB:CC:DD:EE:FF"))
        XCTAssertEqual([bearer.connectionHandle, bearer.attMtu], [0x40, 247])
        XCTAssertEqual(bearer.peerAddress, "AA:BB:CC:DD:EE:FF")
    }
}

private extension Result {
    var success: Success? { try? get() }
    var failure: Failure? { if case .failure(let error) = self { error } else { nil } }
}
