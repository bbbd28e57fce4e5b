import BerylCore
import BerylHCI
import BerylL2CAP
import XCTest

final class L2CAPReassemblyTests: XCTestCase {
    func testFragmentsReassembleIntoOneFrame() {
        var reassembler = L2CAPReassembler()
        let frame = L2CAPFrame(.att, payload: Array(0..<60))
        let pdu = frame.pdu
        XCTAssertEqual(reassembler.feed(boundary: .firstFlushable, data: Array(pdu[0..<2])), [], "header split across fragments")
        XCTAssertEqual(reassembler.feed(boundary: .continuing, data: Array(pdu[2..<27])), [])
        XCTAssertEqual(reassembler.feed(boundary: .continuing, data: Array(pdu[27...])), [.frame(frame)])
        XCTAssertTrue(reassembler.isIdle)
    }

    func testMalformedAndOversizedPDUsFromARemoteDeviceAreDropped() {
        var reassembler = L2CAPReassembler(maxPayload: 100)
        XCTAssertEqual(reassembler.feed(boundary: .continuing, data: [1, 2]), [.dropped("continuation fragment with no PDU started")])
        // An oversized PDU is dropped whole, including its continuations, and the next one is fine.
        let big = L2CAPFrame(.att, payload: [UInt8](repeating: 0, count: 500)).pdu
        guard case .dropped? = reassembler.feed(boundary: .firstFlushable, data: Array(big[0..<27])).first else { return XCTFail() }
        XCTAssertEqual(reassembler.feed(boundary: .continuing, data: Array(big[27..<54])), [])
        let small = L2CAPFrame(.smp, payload: [1, 2, 3])
        XCTAssertEqual(reassembler.feed(boundary: .firstFlushable, data: small.pdu), [.frame(small)])
        // A PDU longer than its header says.
        guard case .dropped? = reassembler.feed(boundary: .firstFlushable, data: [1, 0, 4, 0, 9, 9]).first else { return XCTFail() }
        // A new start abandons an incomplete PDU, and says so.
        _ = reassembler.feed(boundary: .firstFlushable, data: [10, 0, 4, 0, 1])
        let outcomes = reassembler.feed(boundary: .firstFlushable, data: small.pdu)
        XCTAssertEqual(outcomes.count, 2)
        XCTAssertEqual(outcomes.last, .frame(small))
    }
}
