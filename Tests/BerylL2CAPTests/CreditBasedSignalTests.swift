import BerylL2CAP
import XCTest

/// The credit-based signalling packets, byte for byte as Core Vol 3 Part A §4 lays them out (little-endian fields).
final class CreditBasedSignalTests: XCTestCase {
    private func roundTrip(_ signal: CreditBasedSignal, identifier: UInt8 = 7, _ bytes: [UInt8], file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(signal.packet(identifier: identifier), bytes, file: file, line: line)
        XCTAssertEqual(try CreditBasedSignal(code: bytes[0], body: Array(bytes[4...])), signal, file: file, line: line)
    }

    /// §4.22 and §4.23: the LE request's five fields and the response's, 10 octets each.
    func testLECreditBasedConnectionRequestAndResponse() {
        roundTrip(.leConnectionRequest(spsm: 0x0080, sourceCID: 0x0040, mtu: 512, mps: 247, credits: 16),
                  [0x14, 0x07, 0x0A, 0x00, 0x80, 0x00, 0x40, 0x00, 0x00, 0x02, 0xF7, 0x00, 0x10, 0x00])
        roundTrip(.leConnectionResponse(destinationCID: 0x0041, mtu: 23, mps: 23, credits: 1, result: 0),
                  [0x15, 0x07, 0x0A, 0x00, 0x41, 0x00, 0x17, 0x00, 0x17, 0x00, 0x01, 0x00, 0x00, 0x00])
    }

    /// §4.24: the sender's CID and the credits it grants.
    func testFlowControlCreditIndication() {
        roundTrip(.flowControlCredit(cid: 0x0042, credits: 0xFFFF), [0x16, 0x07, 0x04, 0x00, 0x42, 0x00, 0xFF, 0xFF])
    }

    /// §4.25 to §4.28: the enhanced request carries one to five source CIDs after its four fields.
    func testEnhancedRequestResponseAndReconfigure() {
        roundTrip(.connectionRequest(spsm: 0x0027, mtu: 100, mps: 64, credits: 5, sourceCIDs: [0x40, 0x41]),
                  [0x17, 0x07, 0x0C, 0x00, 0x27, 0x00, 0x64, 0x00, 0x40, 0x00, 0x05, 0x00, 0x40, 0x00, 0x41, 0x00])
        roundTrip(.connectionResponse(mtu: 100, mps: 64, credits: 5, result: 0x0004, destinationCIDs: [0x45, 0x00]),
                  [0x18, 0x07, 0x0C, 0x00, 0x64, 0x00, 0x40, 0x00, 0x05, 0x00, 0x04, 0x00, 0x45, 0x00, 0x00, 0x00])
        roundTrip(.reconfigureRequest(mtu: 200, mps: 80, destinationCIDs: [0x40]), [0x19, 0x07, 0x06, 0x00, 0xC8, 0x00, 0x50, 0x00, 0x40, 0x00])
        roundTrip(.reconfigureResponse(result: 0x0001), [0x1A, 0x07, 0x02, 0x00, 0x01, 0x00])
    }

    /// §4.6 and §4.7.
    func testDisconnectionRequestAndResponse() {
        roundTrip(.disconnectionRequest(destinationCID: 0x0040, sourceCID: 0x0041), [0x06, 0x07, 0x04, 0x00, 0x40, 0x00, 0x41, 0x00])
        roundTrip(.disconnectionResponse(destinationCID: 0x0040, sourceCID: 0x0041), [0x07, 0x07, 0x04, 0x00, 0x40, 0x00, 0x41, 0x00])
    }

    /// A peer's packet whose length does not fit its code is malformed (answered Command Not Understood by the
    /// caller); an enhanced request with no CID, six CIDs or half a CID too.
    func testMalformedBodiesAreRefusedAndOtherCodesLeftToTheCaller() {
        let cases: [(UInt8, [UInt8])] = [
            (0x14, [0x80, 0x00, 0x40, 0x00, 0x17, 0x00, 0x17, 0x00, 0x01]),
            (0x15, Array(repeating: 0, count: 11)),
            (0x16, [0x40, 0x00, 0x01]),
            (0x06, [0x40, 0x00]),
            (0x17, [0x27, 0x00, 0x64, 0x00, 0x40, 0x00, 0x05, 0x00]),
            (0x17, [0x27, 0x00, 0x64, 0x00, 0x40, 0x00, 0x05, 0x00] + Array(repeating: 0x40, count: 12)),
            (0x17, [0x27, 0x00, 0x64, 0x00, 0x40, 0x00, 0x05, 0x00, 0x40]),
            (0x18, [0x64, 0x00]),
            (0x19, [0xC8, 0x00, 0x50, 0x00]),
            (0x1A, [0x00]),
        ]
        for (code, body) in cases {
            XCTAssertThrowsError(try CreditBasedSignal(code: code, body: body), "code 0x\(String(code, radix: 16)), \(body.count) octets") { error in
                XCTAssertEqual(error as? CreditBasedSignal.DecodeFailure, .malformed)
            }
        }
        XCTAssertThrowsError(try CreditBasedSignal(code: 0x12, body: Array(repeating: 0, count: 8))) { error in
            XCTAssertEqual(error as? CreditBasedSignal.DecodeFailure, .otherCode)
        }
        XCTAssertEqual(try CreditBasedSignal(code: 0x17, body: [0x27, 0x00, 0x64, 0x00, 0x40, 0x00, 0x05, 0x00] + Array(repeating: 0x40, count: 10)),
                       .connectionRequest(spsm: 0x27, mtu: 100, mps: 64, credits: 5, sourceCIDs: Array(repeating: 0x4040, count: 5)),
                       "five CIDs is the most one request carries")
    }
}
