import BerylWire
import Foundation
import XCTest

final class CommandResultTests: XCTestCase {
    func testCommandCompleteDropsCreditsAndOpcode() {
        // Read RSSI's Command Complete: Num_HCI_Command_Packets 1, opcode 0x1405, status 0, handle 0x0040, RSSI -60.
        let result = Beryl_Ipc_V1_CommandResult.with {
            $0.eventCode = 0x0E
            $0.parameters = Data([0x01, 0x05, 0x14, 0x00, 0x40, 0x00, 0xC4])
        }
        XCTAssertEqual(result.statusAndReturnParameters, [0x00, 0x40, 0x00, 0xC4])
        XCTAssertEqual(result.status, 0x00)
    }

    func testCommandStatusIsItsStatus() {
        // LE Create Connection refused with Command Disallowed: status 0x0C, credits 1, opcode 0x200D.
        let result = Beryl_Ipc_V1_CommandResult.with {
            $0.eventCode = 0x0F
            $0.parameters = Data([0x0C, 0x01, 0x0D, 0x20])
        }
        XCTAssertEqual(result.status, 0x0C)
        XCTAssertEqual(result.statusAndReturnParameters, [0x0C], "no return parameters: the credits and opcode are not the command's")
    }

    func testTruncatedCommandCompleteHasNoStatus() {
        let result = Beryl_Ipc_V1_CommandResult.with {
            $0.eventCode = 0x0E
            $0.parameters = Data([0x01, 0x05, 0x14])
        }
        XCTAssertEqual(result.statusAndReturnParameters, [])
        XCTAssertNil(result.status)
    }
}
