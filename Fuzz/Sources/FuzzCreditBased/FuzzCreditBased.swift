import BerylCore
import BerylL2CAP

/// Input: what a remote device sends on one link, as records [kind][length][bytes]: kind bit 0 clear is a signalling
/// packet for CID 0x0005 (code, identifier, length, body), set is a K-frame for the channel chosen by bits 1–3; the
/// app takes every SDU it receives, and sends one back per record. Beyond not crashing: a decoded packet encodes back
/// to the same body, every signalling answer fits the LE signalling MTU (23), no K-frame sent is longer than the
/// peer's MPS, and no channel holds more K-frames than its window.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzCreditBased(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    var channels = CreditBasedChannels(settings: .init(mtu: 100, mps: 30, window: 4, maxChannels: 6))
    let listeners: (UInt16) -> CreditBasedChannels.Listener? = { spsm in
        switch spsm {
        case 0x80: .init(spsm: 0x80)
        case 0x81: .init(spsm: 0x81, security: .encryption)
        default: nil
        }
    }
    let security = LinkSecurity(encrypted: bytes.first.map { $0 & 0x80 != 0 } ?? false, authenticated: false, bonded: true)
    if bytes.count > 1, bytes[1] & 1 != 0 { _ = channels.connect(spsm: 0x80, mode: bytes[1] & 2 != 0 ? .enhanced : .le, count: Int(bytes[1] >> 2) & 7) }
    var index = 0
    while index + 1 < bytes.count {
        let kind = bytes[index]
        let length = Int(bytes[index + 1])
        index += 2
        let record = Array(bytes[index..<min(index + length, bytes.count)])
        index += length
        var outputs: [CreditBasedChannels.Output] = []
        if kind & 1 == 0 {
            guard record.count >= 4, record[1] != 0 else { continue }
            let body = Array(record[4...])
            guard let signal = try? CreditBasedSignal(code: record[0], body: body) else { continue }
            precondition(signal.body == body, "a decoded packet encodes back to other bytes")
            outputs = channels.receive(signal, identifier: record[1], listeners: listeners, security: security, keySize: 16)
        } else {
            let open = channels.openCIDs
            guard !open.isEmpty else { continue }
            let cid = open[Int(kind >> 1) % open.count]
            outputs = channels.receiveFrame(record, on: cid)
            if let first = channels.openCIDs.first, case .success(let sent) = channels.send(Array(record.prefix(40)), on: first) { outputs += sent }
        }
        for output in outputs {
            switch output {
            case .signal(let packet):
                precondition(packet.count <= LESignaling.mtu, "a signalling answer over the MTU")
            case .frame(let frame):
                let mps = channels.openCIDs.compactMap { channels.channel($0) }.first { $0.remote.cid == frame.channel }?.remote.mps
                if let mps { precondition(frame.payload.count <= Int(mps), "a K-frame over the peer's MPS") }
            case .received(let cid, let sdu):
                precondition(sdu.bytes.count <= 100, "an SDU over this end's MTU")
                for output in channels.consumed(sdu, on: cid) {
                    if case .signal(let packet) = output { precondition(packet.count <= LESignaling.mtu) }
                }
            default:
                break
            }
        }
        for cid in channels.openCIDs {
            guard let channel = channels.channel(cid) else { continue }
            precondition(channel.framesHeld + channel.peerCredits <= channel.window, "more K-frames than the window")
        }
    }
    _ = channels.linkClosed()
    precondition(channels.openCIDs.isEmpty)
    return 0
}

@_silgen_name("LLVMFuzzerRunDriver")
func runFuzzerDriver(_ argc: UnsafeMutablePointer<Int32>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
                     _ callback: @convention(c) (UnsafePointer<UInt8>, Int) -> CInt) -> CInt

/// SwiftPM links an executable's entry point as <Module>_main; libFuzzer's driver takes it from there.
@_cdecl("FuzzCreditBased_main")
public func fuzzerEntry(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var count = argc
    var arguments = argv
    return runFuzzerDriver(&count, &arguments) { data, size in fuzzCreditBased(data, size) }
}
