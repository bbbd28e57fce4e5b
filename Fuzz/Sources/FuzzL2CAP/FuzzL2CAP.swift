import BerylHCI
import BerylL2CAP

/// Input: ACL fragments as [boundary flag][length][bytes], fed to one reassembler; also each fragment to the signalling channel.
/// Beyond not crashing: no frame exceeds the payload limit, and frames are whole (length matches the header).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzL2CAP(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    var reassembler = L2CAPReassembler(maxPayload: 64)
    var central = LESignaling(isCentral: true)
    var peripheral = LESignaling(isCentral: false)
    var index = 0
    while index + 1 < bytes.count {
        let boundary = ACLBoundary(rawValue: bytes[index] & 0x3) ?? .continuing
        let length = Int(bytes[index + 1])
        index += 2
        let fragment = Array(bytes[index..<min(index + length, bytes.count)])
        index += length
        for outcome in reassembler.feed(boundary: boundary, data: fragment) {
            if case .frame(let frame) = outcome {
                precondition(frame.payload.count <= 64, "frame over the limit")
                precondition(frame.pdu.count == frame.payload.count + 4)
            }
        }
        for output in central.receive(fragment) + peripheral.receive(fragment) {
            if case .send(let packet) = output { precondition(packet.count <= LESignaling.mtu, "signalling reply over the MTU") }
        }
    }
    return 0
}

@_silgen_name("LLVMFuzzerRunDriver")
func runFuzzerDriver(_ argc: UnsafeMutablePointer<Int32>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
                     _ callback: @convention(c) (UnsafePointer<UInt8>, Int) -> CInt) -> CInt

/// SwiftPM links an executable's entry point as <Module>_main; libFuzzer's driver takes it from there.
@_cdecl("FuzzL2CAP_main")
public func fuzzerEntry(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var count = argc
    var arguments = argv
    return runFuzzerDriver(&count, &arguments) { data, size in fuzzL2CAP(data, size) }
}
