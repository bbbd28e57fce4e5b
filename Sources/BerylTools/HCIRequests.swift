import BerylCore
import BerylHCI
import BerylIPC
import Foundation

extension Request {
    /// An HCI command for hcid, answered with its Command Complete or Command Status.
    public static func hci(_ command: HCICommandPacket) -> Request {
        var request = Request()
        request.hci.sendCommand.opcode = UInt32(command.opcode)
        request.hci.sendCommand.parameters = Data(command.parameters)
        return request
    }
}

extension Event {
    /// The connection or disconnection an hcid event reports, if that is what it is.
    public var linkEvent: LinkEvent? {
        guard case .event(let packet)? = hci.kind else { return nil }
        return LinkEvent(HCIEventPacket(code: UInt8(truncatingIfNeeded: packet.code), parameters: Array(packet.parameters)))
    }
}
