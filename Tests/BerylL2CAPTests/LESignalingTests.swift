import BerylCore
import BerylHCI
import BerylL2CAP
import XCTest

final class LESignalingTests: XCTestCase {
    let request: [UInt8] = [0x12, 0x07, 0x08, 0x00, 0x18, 0x00, 0x28, 0x00, 0x00, 0x00, 0xC8, 0x00]

    /// L2CAP/LE/CPU/BV-02-C: the central's host is asked and its answer goes back with the request's identifier.
    func testL2CAP_LE_CPU_BV_02_C_centralAcceptsAParameterUpdate() {
        var central = LESignaling(isCentral: true)
        XCTAssertEqual(central.receive(request), [.parameterUpdateRequested(identifier: 7, ConnectionParameters(intervalMin: 24, intervalMax: 40, latency: 0, timeout: 200))])
        XCTAssertEqual(central.respondToParameterUpdate(identifier: 7, accepted: true), .send([0x13, 0x07, 0x02, 0x00, 0x00, 0x00]))
    }

    /// L2CAP/LE/CPU/BI-01-C: a peripheral receiving the request rejects it as not understood.
    func testL2CAP_LE_CPU_BI_01_C_peripheralRejectsAParameterUpdateRequest() {
        var peripheral = LESignaling(isCentral: false)
        XCTAssertEqual(peripheral.receive(request), [.send([0x01, 0x07, 0x02, 0x00, 0x00, 0x00])])
    }

    /// L2CAP/LE/CPU/BI-02-C: invalid parameters are refused without asking the host.
    func testL2CAP_LE_CPU_BI_02_C_invalidParametersAreRejected() {
        var central = LESignaling(isCentral: true)
        let invalid: [UInt8] = [0x12, 0x08, 0x08, 0x00, 0x50, 0x00, 0x50, 0x00, 0x00, 0x00, 0x0A, 0x00]  // 100 ms interval, 100 ms timeout
        XCTAssertEqual(central.receive(invalid), [.send([0x13, 0x08, 0x02, 0x00, 0x01, 0x00])])
    }

    /// L2CAP/LE/REJ/BI-01-C and BI-02-C: unknown commands and oversized signalling packets get Command Reject.
    func testL2CAP_LE_REJ_BI_01_C_unknownCommandsAreRejected() {
        var central = LESignaling(isCentral: true)
        XCTAssertEqual(central.receive([0x7E, 0x09, 0x00, 0x00]), [.send([0x01, 0x09, 0x02, 0x00, 0x00, 0x00])])
        XCTAssertEqual(central.receive([0x14, 0x0A, 0x14, 0x00] + [UInt8](repeating: 0, count: 20)),
                       [.send([0x01, 0x0A, 0x04, 0x00, 0x01, 0x00, 23, 0])], "Signaling MTU exceeded")
        XCTAssertEqual(central.receive([0x12, 0x00, 0x00, 0x00]).count, 1, "identifier 0 is dropped")
        guard case .log? = central.receive([0x12]).first else { return XCTFail() }
    }

    /// A Disconnection Request names a channel that is not open: Invalid CID in Request, with the request's
    /// destination and source CIDs (Core Vol 3 Part A §4.1).
    func testADisconnectionRequestForNoChannelIsAnInvalidCID() {
        var peripheral = LESignaling(isCentral: false)
        XCTAssertEqual(peripheral.receive([0x06, 0x0B, 0x04, 0x00, 0x41, 0x00, 0x52, 0x00]),
                       [.send([0x01, 0x0B, 0x06, 0x00, 0x02, 0x00, 0x41, 0x00, 0x52, 0x00])])
        XCTAssertEqual(peripheral.receive([0x06, 0x0C, 0x02, 0x00, 0x41, 0x00]), [.send([0x01, 0x0C, 0x02, 0x00, 0x00, 0x00])])
    }

    /// L2CAP/LE/CFC/BV-11-C's shape: a connection on an SPSM nobody serves is refused, SPSM Not Supported (0x0002).
    func testACreditBasedConnectionOnAnUnknownSPSMIsRefused() {
        var central = LESignaling(isCentral: true)
        let request: [UInt8] = [0x14, 0x0D, 0x0A, 0x00, 0x81, 0x00, 0x40, 0x00, 0x17, 0x00, 0x17, 0x00, 0x01, 0x00]
        XCTAssertEqual(central.receive(request), [.send([0x15, 0x0D, 0x0A, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, 0x00])])
    }

    func testUnsolicitedResponsesAndCreditsAreNotAnswered() {
        var central = LESignaling(isCentral: true)
        for packet: [UInt8] in [[0x07, 0x03, 0x04, 0x00, 0x41, 0x00, 0x41, 0x00], [0x15, 0x04, 0x0A, 0x00] + [UInt8](repeating: 0, count: 10),
                                [0x16, 0x05, 0x04, 0x00, 0x41, 0x00, 0x05, 0x00]] {
            XCTAssertFalse(central.receive(packet).contains { if case .send = $0 { true } else { false } }, "\(packet)")
        }
    }

    func testAPeripheralsRequestAndTheCentralsAnswer() {
        var peripheral = LESignaling(isCentral: false)
        let parameters = ConnectionParameters(intervalMin: 24, intervalMax: 40, latency: 0, timeout: 200)
        guard case .send(let packet)? = peripheral.requestParameterUpdate(parameters) else { return XCTFail() }
        XCTAssertNil(peripheral.requestParameterUpdate(parameters), "one request at a time")
        XCTAssertEqual(peripheral.receive([0x13, packet[1], 0x02, 0x00, 0x01, 0x00]), [.parameterUpdateAnswered(accepted: false)])
    }
}
