import BerylATT
import BerylCore
import BerylGATT

/// Input: a sequence of ATT PDUs, each as [length][bytes], sent to one server bearer in order.
/// Beyond not crashing: each request is answered at most once, and nothing sent exceeds the ATT MTU.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzATTServer(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let database = AttributeDatabase()
    _ = try? database.add(ServiceDefinition(uuid: BluetoothUUID(0x1800), characteristics: [
        CharacteristicDefinition(uuid: BluetoothUUID(0x2A00), properties: [.read, .write], permissions: [.readable, .writeable], value: [1, 2, 3]),
        CharacteristicDefinition(uuid: BluetoothUUID(0x2A01), properties: [.notify, .indicate], permissions: .readEncryptionRequired, value: [4]),
        CharacteristicDefinition(uuid: BluetoothUUID(0x2A02), properties: [.read, .write], permissions: [.readable, .writeable]),
    ]))
    let server = ATTServer(database: database)
    var index = 0
    while index < bytes.count {
        let length = Int(bytes[index])
        index += 1
        let pdu = Array(bytes[index..<min(index + length, bytes.count)])
        index += length
        var outputs = server.receive(pdu)
        // Answer anything dynamic at once, as an app would, so the bearer keeps moving.
        for output in outputs {
            switch output {
            case .readRequested(let id, _, let offset): outputs += server.completeRead(id: id, with: .success([9, 9, 9, 9]), offset: offset)
            case .writeRequested(let id, _, _): outputs += server.completeWrite(id: id, error: nil)
            default: break
            }
        }
        let sent = outputs.compactMap { if case .send(let packet) = $0 { return packet } else { return nil } }
        let isRequest = pdu.first.flatMap(ATTOpcode.init(rawValue:))?.isRequest ?? false
        let indications = sent.filter { $0.first == ATTOpcode.handleValueIndication.rawValue }.count
        precondition(sent.count - indications <= (isRequest || pdu.first.map { $0 & 0x40 == 0 } == true ? 1 : 0),
                     "more than one response to one PDU")
        for packet in sent { precondition(packet.count <= Int(server.mtu), "PDU of \(packet.count) bytes over ATT_MTU \(server.mtu)") }
    }
    return 0
}

@_silgen_name("LLVMFuzzerRunDriver")
func runFuzzerDriver(_ argc: UnsafeMutablePointer<Int32>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
                     _ callback: @convention(c) (UnsafePointer<UInt8>, Int) -> CInt) -> CInt

/// SwiftPM links an executable's entry point as <Module>_main; libFuzzer's driver takes it from there.
@_cdecl("FuzzATTServer_main")
public func fuzzerEntry(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var count = argc
    var arguments = argv
    return runFuzzerDriver(&count, &arguments) { data, size in fuzzATTServer(data, size) }
}
