import FoundationEssentials
import Glibc

extension Beryl_Ipc_V1_CommandResult {
    /// The controller's status followed by the command's return parameters, whichever event answered it: a Command
    /// Complete carries Num_HCI_Command_Packets and the opcode first (Core Vol 4 Part E §7.7.14), a Command Status
    /// only its status (§7.7.15). Empty when the answer is too short to say.
    public var statusAndReturnParameters: [UInt8] {
        let bytes = Array(parameters)
        return eventCode == Self.commandCompleteCode ? Array(bytes.dropFirst(3)) : Array(bytes.prefix(1))
    }

    /// The controller's status for the command; nil when the answer carries none.
    public var status: UInt8? { statusAndReturnParameters.first }

    static let commandCompleteCode: UInt32 = 0x0E
}
