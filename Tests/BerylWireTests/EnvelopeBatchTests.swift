import BerylWire
import XCTest

final class EnvelopeBatchTests: XCTestCase {
    func testTheFramingIsABatchEnvelopeAndOneEnvelopeGoesAsItIs() throws {
        var batch = EnvelopeBatch(capacity: 65536)
        let envelopes = (1...3).map { Envelope.request(.with { $0.ping = .init() }, id: UInt64($0)) }
        batch.append(envelopes[0].encoded())
        XCTAssertEqual(batch.take(), envelopes[0].encoded(), "a lone envelope is not wrapped")
        for envelope in envelopes { batch.append(envelope.encoded()) }
        let decoded = try Envelope(serializedBytes: batch.take())
        XCTAssertEqual(decoded.batch.envelopes, envelopes)
        XCTAssertEqual(decoded.unbatched, envelopes)
        XCTAssertTrue(batch.isEmpty)
        // A batch stays within its datagram: what does not fit waits for the next.
        var small = EnvelopeBatch(capacity: 64)
        let large = Envelope.request(.with { $0.manager.hello.appID = String(repeating: "x", count: 40) }, id: 9).encoded()
        XCTAssertTrue(small.fits(large), "an empty batch takes anything (the cap is the socket's to enforce)")
        small.append(large)
        XCTAssertFalse(small.fits(large))
        // A batch inside a batch is not unpacked.
        var nested = Envelope()
        nested.batch.envelopes = [envelopes[0], decoded]
        XCTAssertEqual(nested.unbatched, [envelopes[0]])
    }

    /// A field this build does not know (a newer peer's) is noticed wherever it sits, so that a server can refuse
    /// what it would otherwise half-understand.
    func testUnknownFieldsAreNoticedInTheEnvelopeAndItsPayloads() throws {
        let plain = Envelope.request(.with { $0.ping = .init() }, id: 1)
        XCTAssertFalse(try Envelope(serializedBytes: plain.encoded()).hasUnknownFields)
        // Field 2047, varint 1: tag (2047 << 3 | 0) as a varint, then the value.
        let unknownField: [UInt8] = [0xF8, 0x7F, 0x01]
        XCTAssertTrue(try Envelope(serializedBytes: plain.encoded() + unknownField).hasUnknownFields, "in the envelope")
        var request = try Request(serializedBytes: Request.with { $0.ping = .init() }.serializedBytes() as [UInt8])
        request = try Request(serializedBytes: (try request.serializedBytes() as [UInt8]) + unknownField)
        XCTAssertTrue(Envelope.request(request, id: 2).hasUnknownFields, "in the request")
    }

    func testBytesThatAreNoEnvelopeFailToDecode() {
        XCTAssertThrowsError(try Envelope(serializedBytes: [0xFF, 0xFF, 0xFF]), "a truncated varint tag")
        XCTAssertThrowsError(try Envelope(serializedBytes: EnvelopeBatchTests.batchClaimingMoreThanItHas), "a length past the end")
    }

    /// Envelope.batch (field 5, length-delimited) claiming 100 bytes and carrying 2.
    private static let batchClaimingMoreThanItHas: [UInt8] = [5 << 3 | 2, 100, 0x0A, 0x00]
}
