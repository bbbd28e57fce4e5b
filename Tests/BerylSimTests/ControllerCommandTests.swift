@testable import BerylSim
import XCTest

final class ControllerCommandTests: XCTestCase {
    func testResetAndLocalInformation() {
        let sim = SimHarness()
        let host = sim[0]
        let reset = host.call(0x0C03)
        XCTAssertEqual(reset, [0x01, 0x03, 0x0C, 0x00], "Command Complete: 1 credit, opcode, success")
        let address = host.address
        XCTAssertEqual(address.count, 6)
        XCTAssertNotEqual(address, sim[1].address, "each controller has its own address")
        let sameSeed = SimHarness(seed: 7)
        let otherSeed = SimHarness(seed: 8)
        XCTAssertEqual(sameSeed[0].address, address, "addresses follow the seed")
        XCTAssertNotEqual(otherSeed[0].address, address)

        let version = host.call(0x1001)
        XCTAssertEqual(Array(version[3...4]), [0x00, 0x0D], "success, HCI version 5.4")
        let commands = host.call(0x1002)
        XCTAssertEqual(commands.count, 3 + 1 + 64)
        let bitmap = Array(commands[4...])
        XCTAssertEqual(bitmap[41] & (1 << 5), 1 << 5, "LE Read Buffer Size v2 is supported")
        XCTAssertEqual(bitmap[5] & 0xC0, 0xC0, "Set Event Mask and Reset are supported")
        XCTAssertEqual(bitmap[1], 0, "no BR/EDR connection commands")

        XCTAssertEqual(Array(host.call(0x2002)[3...]), [0, 251, 0, 8], "LE Read Buffer Size: 251 bytes × 8")
        XCTAssertEqual(Array(host.call(0x2060)[3...]), [0, 251, 0, 8, 0, 0, 0], "v2 adds no ISO buffers")
        XCTAssertEqual(Array(host.call(0x2003)[4...5]), [0x2F, 0x01], "LE features: encryption, conn param request, DLE, 2M")
        XCTAssertEqual(host.call(0x1003)[8], 0b0110_0000, "LE supported, BR/EDR not supported")
        XCTAssertEqual(Array(host.call(0x200F)[3...]), [0, 16], "filter accept list of 16")
    }

    func testUnknownCommandIsAnsweredWithUnknownHCICommand() {
        let sim = SimHarness()
        XCTAssertEqual(sim[0].call(0xFC01, [1, 2, 3]), [0x01, 0x01, 0xFC, 0x01])
        XCTAssertEqual(sim[0].call(0x0C7F), [0x01, 0x7F, 0x0C, 0x01])
    }

    func testTruncatedParametersAreInvalidParameters() {
        let sim = SimHarness()
        XCTAssertEqual(sim[0].status(0x2006, [0x20, 0x00, 0x20]), 0x12)
        XCTAssertEqual(sim[0].status(0x0406, [0x40]), 0x12, "Disconnect answers with Command Status 0x12")
        XCTAssertEqual(sim[0].status(0x2006, le16(0x0800) + le16(0x0400) + [0, 0, 0, 0, 0, 0, 0, 0, 0, 0x07, 0]), 0x12,
                       "min interval above max")
        XCTAssertEqual(sim[0].status(0x2006, le16(0x0800) + le16(0x0800) + [0, 0, 0, 0, 0, 0, 0, 0, 0, 0x00, 0]), 0x12,
                       "no advertising channel")
    }

    func testACommandSentWithoutACreditIsCountedAndStillAnswered() {
        let sim = SimHarness()
        let controller = sim.air.controllers[0]
        sim[0].send(RawHost.commandBytes(0x1009, []) + RawHost.commandBytes(0x1001, []))
        sim.run(for: .milliseconds(5))
        XCTAssertEqual(controller.commandFlowViolations, 1)
        XCTAssertEqual(sim[0].events(0x0E).count, 2)
        XCTAssertTrue(sim[0].events(0x0E).allSatisfy { $0[0] == 1 }, "Num_HCI_Command_Packets is 1")
        sim[0].call(0x1009)
        XCTAssertEqual(controller.commandFlowViolations, 1, "waiting for the answer is within flow control")
    }

    func testLEMetaEventsStayMaskedUntilTheHostAsks() {
        let sim = SimHarness()
        XCTAssertEqual(sim[0].status(0x0C03), 0)
        sim.advertise(1)
        sim.scan(0, active: false)
        sim.run(for: .seconds(1))
        XCTAssertTrue(sim[0].events(0x3E).isEmpty, "bit 61 (LE Meta) is off in the default event mask")
        sim[0].powerOn()
        sim.scan(0, active: false)
        sim.run(for: .seconds(1))
        XCTAssertFalse(sim[0].leEvents(0x02).isEmpty)
    }

    func testLEEncryptIsAES128InHCIByteOrderAndRandIsEightBytes() {
        let sim = SimHarness()
        // FIPS-197 Appendix C.1, sent little-endian as HCI does.
        let key: [UInt8] = Array((0x00...0x0F).map { UInt8($0) }.reversed())
        let plaintext: [UInt8] = Array([0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xAA, 0xBB, 0xCC, 0xDD, 0xEE, 0xFF].reversed())
        let answer = sim[0].call(0x2017, key + plaintext)
        XCTAssertEqual(answer[3], 0)
        XCTAssertEqual(Array(answer[4...]), Array([0x69, 0xC4, 0xE0, 0xD8, 0x6A, 0x7B, 0x04, 0x30, 0xD8, 0xCD, 0xB7, 0x80, 0x70, 0xB4, 0xC5, 0x5A].reversed()))
        let first = sim[0].call(0x2018)
        let second = sim[0].call(0x2018)
        XCTAssertEqual(first.count, 12)
        XCTAssertNotEqual(Array(first[4...]), Array(second[4...]))
    }

    func testGarbageOnTheStreamRaisesAHardwareError() {
        let sim = SimHarness()
        sim[0].send([0x7F, 0x7F])
        sim[0].sendCommand(0x1009)
        sim.run(for: .milliseconds(5))
        XCTAssertEqual(sim[0].events(0x10), [[0x01]])
        XCTAssertEqual(sim[0].events(0x0E).count, 1, "the framer resynchronised on the next command")
        XCTAssertEqual(sim.air.controllers[0].invalidPackets, 2)
    }
}
