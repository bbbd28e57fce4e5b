import BerylCore
import BerylHCI

extension SimController {
    /// LE encryption start (Core Vol 6 Part B §5.1.3): the central's host gives the LTK, the peripheral's
    /// controller asks its host for the key, and the link encrypts only when both keys are the same.
    func runSecurityCommand(_ opcode: HCIOpcode, _ reader: inout ByteReader) throws(DecodeError) {
        switch opcode {
        case .leEnableEncryption:
            let handle = try reader.u16()
            let random = try reader.take(8)
            let ediv = try reader.take(2)
            let ltk = try reader.take(16)
            guard let link = links[handle] else { return status(opcode, .unknownConnectionIdentifier) }
            guard link.central === self, link.pendingEncryption == nil else { return status(opcode, .commandDisallowed) }
            status(opcode, .success)
            link.pendingEncryption = (ltk, random, ediv)
            link.encryptionRequestedAt = air.now
            air.atNextEvent(of: link) { [weak link] in
                guard let link, link.isOpen, link.pendingEncryption != nil else { return }
                let peripheral = link.peripheral
                guard peripheral.isLEEventEnabled(.longTermKeyRequest) else {
                    // With the LTK request masked the peripheral's controller can only refuse.
                    link.pendingEncryption = nil
                    link.central.emit(EventWriter.encryptionChange(status: .pinOrKeyMissing, handle: link.centralHandle, enabled: link.encrypted))
                    return
                }
                var body = ByteWriter()
                body.u16(link.peripheralHandle)
                body.append(random)
                body.append(ediv)
                peripheral.emitLE(.longTermKeyRequest, body.bytes)
            }
            air.expireEncryptionRequest(link)
        case .leLongTermKeyRequestReply, .leLongTermKeyRequestNegativeReply:
            let handle = try reader.u16()
            let ltk = opcode == .leLongTermKeyRequestReply ? try reader.take(16) : nil
            var body = ByteWriter()
            body.u16(handle)
            guard let link = links[handle], link.peripheral === self, let pending = link.pendingEncryption else {
                return complete(opcode, .unknownConnectionIdentifier, body.bytes)
            }
            complete(opcode, .success, body.bytes)
            link.pendingEncryption = nil
            link.encryptionRequestedAt = nil
            air.atNextEvent(of: link) { [weak link] in
                guard let link, link.isOpen else { return }
                guard let ltk else {
                    link.central.emit(EventWriter.encryptionChange(status: .pinOrKeyMissing, handle: link.centralHandle, enabled: link.encrypted))
                    return
                }
                guard ltk == pending.ltk else {
                    // Different keys mean the first encrypted PDU fails its MIC and the link is dropped.
                    link.central.air.close(link, centralReason: HCIStatus.connectionTerminatedDueToMICFailure.rawValue,
                                           peripheralReason: HCIStatus.connectionTerminatedDueToMICFailure.rawValue)
                    return
                }
                let refresh = link.encrypted
                link.encrypted = true
                link.ltk = ltk
                for end in [link.central, link.peripheral] {
                    let handle = link.handle(at: end)
                    end.emit(refresh ? EventWriter.keyRefreshComplete(handle: handle)
                                     : EventWriter.encryptionChange(status: .success, handle: handle, enabled: true))
                }
            }
        default:
            answerInvalid(opcode)
        }
    }
}
