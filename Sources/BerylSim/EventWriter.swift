import BerylCore
import BerylHCI

/// Builds the parameter bytes of the events a controller sends (Core Vol 4 Part E §7.7).
enum EventWriter {
    static func commandComplete(_ opcode: UInt16, _ returnParameters: [UInt8], credits: UInt8 = 1) -> HCIEventPacket {
        var writer = ByteWriter()
        writer.u8(credits)
        writer.u16(opcode)
        writer.append(returnParameters)
        return HCIEventPacket(.commandComplete, parameters: writer.bytes)
    }

    static func commandStatus(_ opcode: UInt16, _ status: HCIStatus, credits: UInt8 = 1) -> HCIEventPacket {
        var writer = ByteWriter()
        writer.u8(status.rawValue)
        writer.u8(credits)
        writer.u16(opcode)
        return HCIEventPacket(.commandStatus, parameters: writer.bytes)
    }

    static func disconnectionComplete(handle: UInt16, reason: UInt8) -> HCIEventPacket {
        var writer = ByteWriter()
        writer.u8(0)
        writer.u16(handle)
        writer.u8(reason)
        return HCIEventPacket(.disconnectionComplete, parameters: writer.bytes)
    }

    static func encryptionChange(status: HCIStatus, handle: UInt16, enabled: Bool) -> HCIEventPacket {
        var writer = ByteWriter()
        writer.u8(status.rawValue)
        writer.u16(handle)
        writer.u8(enabled ? 1 : 0)
        return HCIEventPacket(.encryptionChange, parameters: writer.bytes)
    }

    static func keyRefreshComplete(handle: UInt16) -> HCIEventPacket {
        var writer = ByteWriter()
        writer.u8(0)
        writer.u16(handle)
        return HCIEventPacket(.encryptionKeyRefreshComplete, parameters: writer.bytes)
    }

    static func numberOfCompletedPackets(_ counts: [(handle: UInt16, count: UInt16)]) -> HCIEventPacket {
        var writer = ByteWriter()
        writer.u8(UInt8(counts.count))
        for entry in counts {
            writer.u16(entry.handle)
            writer.u16(entry.count)
        }
        return HCIEventPacket(.numberOfCompletedPackets, parameters: writer.bytes)
    }

    static func dataBufferOverflow() -> HCIEventPacket {
        HCIEventPacket(.dataBufferOverflow, parameters: [0x01])  // Link_Type: ACL
    }

    static func hardwareError(code: UInt8) -> HCIEventPacket {
        HCIEventPacket(.hardwareError, parameters: [code])
    }

    static func leMeta(_ subevent: LESubevent, _ body: [UInt8]) -> HCIEventPacket {
        HCIEventPacket(.leMeta, parameters: [subevent.rawValue] + body)
    }
}
