import BerylCore
import BerylHCI
import XCTest

final class LinkEventTests: XCTestCase {
    func testConnectionEventsDecodeFromTheirWireBytes() {
        let enhanced = HCIEventPacket(code: 0x3E, parameters: [0x0A, 0x00, 0x41, 0x00, 0x01, 0x01, 0x06, 0x05, 0x04, 0x03, 0x02, 0xC1] + [UInt8](repeating: 0, count: 19))
        XCTAssertEqual(LinkEvent(enhanced), .connected(handle: 0x41, central: false, peer: DeviceAddress(BDAddress("C1:02:03:04:05:06")!, type: .random)))
        let legacy = HCIEventPacket(code: 0x3E, parameters: [0x01, 0x00, 0x40, 0x10, 0x00, 0x00, 1, 2, 3, 4, 5, 6] + [UInt8](repeating: 0, count: 7))
        XCTAssertEqual(LinkEvent(legacy), .connected(handle: 0x40, central: true, peer: DeviceAddress(BDAddress("06:05:04:03:02:01")!, type: .public)),
                       "the flag bits above the 12-bit handle are masked off")
        let cancelled = HCIEventPacket(code: 0x3E, parameters: [0x01, 0x02] + [UInt8](repeating: 0, count: 17))
        XCTAssertEqual(LinkEvent(cancelled), .connectionFailed(status: 0x02))
        XCTAssertEqual(LinkEvent(HCIEventPacket(code: 0x05, parameters: [0x00, 0x40, 0x00, 0x13])), .disconnected(handle: 0x40, reason: 0x13))
        XCTAssertNil(LinkEvent(HCIEventPacket(code: 0x05, parameters: [0x0C, 0x40, 0x00, 0x13])), "a failed Disconnect leaves the link up")
        XCTAssertNil(LinkEvent(HCIEventPacket(code: 0x3E, parameters: [0x0A, 0x00, 0x40])), "too short")
        XCTAssertNil(LinkEvent(HCIEventPacket(code: 0x3E, parameters: [0x02, 0x01] + [UInt8](repeating: 0, count: 12))), "an advertising report")
    }

    func testEncryptionEventsDecode() {
        XCTAssertEqual(LinkEvent(HCIEventPacket(code: 0x08, parameters: [0x00, 0x40, 0x00, 0x01])), .encryptionChanged(handle: 0x40, status: 0, enabled: true))
        XCTAssertEqual(LinkEvent(HCIEventPacket(code: 0x08, parameters: [0x06, 0x40, 0x00, 0x00])), .encryptionChanged(handle: 0x40, status: 6, enabled: false),
                       "PIN or Key Missing")
        XCTAssertEqual(LinkEvent(HCIEventPacket(code: 0x30, parameters: [0x00, 0x41, 0x00])), .encryptionChanged(handle: 0x41, status: 0, enabled: true))
        XCTAssertEqual(LinkEvent(HCIEventPacket(code: 0x3E, parameters: [0x05, 0x40, 0x00, 1, 2, 3, 4, 5, 6, 7, 8, 0x34, 0x12])),
                       .longTermKeyRequested(handle: 0x40, rand: [1, 2, 3, 4, 5, 6, 7, 8], ediv: 0x1234))
        XCTAssertNil(LinkEvent(HCIEventPacket(code: 0x3E, parameters: [0x05, 0x40, 0x00, 1])), "too short")
        XCTAssertNil(LinkEvent(HCIEventPacket(code: 0x08, parameters: [0x00, 0x40])))
        XCTAssertEqual(HCICommands.leEnableEncryption(handle: 0x40, rand: [UInt8](repeating: 0xAA, count: 8), ediv: 0x1234, ltk: [UInt8](repeating: 7, count: 16)).parameters,
                       [0x40, 0] + [UInt8](repeating: 0xAA, count: 8) + [0x34, 0x12] + [UInt8](repeating: 7, count: 16))
        XCTAssertEqual(HCICommands.leLongTermKeyReply(handle: 0x40, ltk: nil).opcode, HCIOpcode.leLongTermKeyRequestNegativeReply.rawValue)
        XCTAssertEqual(HCICommands.leLongTermKeyReply(handle: 0x40, ltk: [UInt8](repeating: 1, count: 16)).parameters.count, 18)
    }

    func testCommandBuildersLayOutTheirParameters() {
        let peer = DeviceAddress(BDAddress("C1:02:03:04:05:06")!, type: .random)
        XCTAssertEqual(HCIPacket.command(HCICommands.leCreateConnection(peer: peer, interval: 24, supervisionTimeout: 200)).h4Bytes,
                       [0x01, 0x0D, 0x20, 25, 0x60, 0x00, 0x30, 0x00, 0x00, 0x01, 6, 5, 4, 3, 2, 0xC1, 0x00,
                        24, 0, 24, 0, 0, 0, 200, 0, 0, 0, 0, 0])
        XCTAssertEqual(HCICommands.leSetAdvertisingParameters(interval: 0xA0).parameters, [0xA0, 0, 0xA0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x07, 0])
        XCTAssertEqual(HCICommands.disconnect(handle: 0x41).parameters, [0x41, 0x00, 0x13])
        let advertising = HCICommands.leSetAdvertisingData([2, 0x01, 0x06])
        XCTAssertEqual(advertising.opcode, HCIOpcode.leSetAdvertisingData.rawValue)
        XCTAssertEqual(advertising.parameters, [3, 2, 0x01, 0x06] + [UInt8](repeating: 0, count: 28), "length, data, zero padding to 31")
        XCTAssertEqual(HCICommands.leSetAdvertisingData([], scanResponse: true).opcode, HCIOpcode.leSetScanResponseData.rawValue)
        XCTAssertEqual(HCICommands.leConnectionUpdate(handle: 0x41, intervalMin: 24, intervalMax: 40, latency: 0, supervisionTimeout: 200).parameters,
                       [0x41, 0, 24, 0, 40, 0, 0, 0, 200, 0, 0, 0, 0, 0])
        // The scan managerd runs for background apps: 30 ms every 1.28 s, active, random own address.
        XCTAssertEqual(HCIPacket.command(HCICommands.leSetScanParameters(active: true, interval: 0x0800, window: 0x0030, ownAddressType: 1)).h4Bytes,
                       [0x01, 0x0B, 0x20, 7, 0x01, 0x00, 0x08, 0x30, 0x00, 0x01, 0x00])
        XCTAssertEqual(HCIPacket.command(HCICommands.leSetScanEnable(true)).h4Bytes, [0x01, 0x0C, 0x20, 2, 0x01, 0x00])
        XCTAssertEqual(HCIPacket.command(HCICommands.leSetAdvertisingEnable(false)).h4Bytes, [0x01, 0x0A, 0x20, 1, 0x00])
        XCTAssertEqual(HCIPacket.command(HCICommands.readRSSI(handle: 0x0041)).h4Bytes, [0x01, 0x05, 0x14, 2, 0x41, 0x00])
        XCTAssertEqual(HCIPacket.command(HCICommands.leAddDeviceToFilterAcceptList(peer)).h4Bytes, [0x01, 0x11, 0x20, 7, 0x01, 6, 5, 4, 3, 2, 0xC1])
        XCTAssertEqual(HCIPacket.command(HCICommands.leClearFilterAcceptList).h4Bytes, [0x01, 0x10, 0x20, 0])
        XCTAssertEqual(HCIPacket.command(HCICommands.leCreateConnectionCancel).h4Bytes, [0x01, 0x0E, 0x20, 0])
        XCTAssertEqual(HCIPacket.command(HCICommands.leSetDataLength(handle: 0x41, octets: 251, time: 2120)).h4Bytes,
                       [0x01, 0x22, 0x20, 6, 0x41, 0x00, 251, 0x00, 0x48, 0x08])
        XCTAssertEqual(HCIPacket.command(HCICommands.leRand).h4Bytes, [0x01, 0x18, 0x20, 0])
    }

    /// A peripheral's Connection Parameters Request reaches the central's host as an LE meta event (Core Vol 4 Part E
    /// §7.7.65.6); the host answers with the Reply (§7.8.31) or, for parameters out of range, the Negative Reply
    /// (§7.8.32) with Unacceptable Connection Parameters.
    func testARemoteConnectionParameterRequestIsAnsweredByItsValidity() throws {
        // Handle 0x41, interval 72–96 (90–120 ms), latency 4, timeout 600 (6 s).
        let event = HCIEventPacket(code: 0x3E, parameters: [0x06, 0x41, 0x00, 72, 0, 96, 0, 4, 0, 0x58, 0x02])
        let request = try XCTUnwrap(RemoteConnectionParameterRequest(event))
        XCTAssertEqual(request.handle, 0x41)
        XCTAssertEqual(request.parameters, ConnectionParameters(intervalMin: 72, intervalMax: 96, latency: 4, timeout: 600))
        XCTAssertEqual(request.answer.opcode, 0x2020)
        XCTAssertEqual(request.answer.parameters, [0x41, 0x00, 72, 0, 96, 0, 4, 0, 0x58, 0x02, 0, 0, 0, 0])
        XCTAssertNil(LinkEvent(event), "not a link event")

        // A timeout too short for the interval and latency asked (Core Vol 6 Part B §4.5.2).
        let tooShort = RemoteConnectionParameterRequest(handle: 0x41, parameters: ConnectionParameters(intervalMin: 72, intervalMax: 96, latency: 4, timeout: 100))
        XCTAssertEqual(tooShort.answer.opcode, 0x2021)
        XCTAssertEqual(tooShort.answer.parameters, [0x41, 0x00, 0x3B])
        XCTAssertNil(RemoteConnectionParameterRequest(HCIEventPacket(code: 0x3E, parameters: [0x06, 0x41, 0x00, 72])), "too short")
        XCTAssertNil(RemoteConnectionParameterRequest(HCIEventPacket(code: 0x3E, parameters: [0x03] + [UInt8](repeating: 0, count: 10))), "another subevent")
    }
}
