import BerylATT
import BerylCore
import BerylCrypto

/// The Signed Write Command (Core Vol 3 Part F §3.4.5.4): what is signed is the PDU before its signature, for the
/// client that signs and the server that verifies alike.
public enum SignedWrite {
    static func signedBytes(handle: UInt16, value: [UInt8]) -> [UInt8] {
        var message = ByteWriter()
        message.u8(ATTOpcode.signedWriteCommand.rawValue)
        message.u16(handle)
        message.append(value)
        return message.bytes
    }

    /// The command a client sends, signed with the CSRK it distributed and its next SignCounter.
    public static func command(handle: UInt16, value: [UInt8], csrk: [UInt8], counter: UInt32) throws(CryptoError) -> ATTPDU {
        let signature = try DataSigning.signature(csrk: csrk, message: signedBytes(handle: handle, value: value), counter: counter)
        return .signedWriteCommand(handle: handle, value: value, signature: signature)
    }
}
