import BerylCore
import BerylGATT
import XCTest

/// A server with GAP, a heart-rate-like service including Battery, and a 128-bit custom service.
func makeServer(mtu: UInt16? = nil) throws -> (ATTServer, AttributeDatabase) {
    let database = AttributeDatabase()
    try database.add(ServiceDefinition(uuid: BluetoothUUID(0x1800), characteristics: [
        CharacteristicDefinition(uuid: BluetoothUUID(0x2A00), properties: .read, permissions: .readable, value: Array("Beryl".utf8)),
    ]))                                                                                    // 1-3
    let battery = try database.add(ServiceDefinition(uuid: BluetoothUUID(0x180F), isPrimary: false, characteristics: [
        CharacteristicDefinition(uuid: BluetoothUUID(0x2A19), properties: [.read, .notify], permissions: .readable, value: [87]),
    ]))                                                                                    // 4-7
    try database.add(ServiceDefinition(uuid: BluetoothUUID(0x180D), includes: [battery], characteristics: [
        CharacteristicDefinition(uuid: BluetoothUUID(0x2A37), properties: [.notify, .indicate], permissions: [], value: [0, 60]),
        CharacteristicDefinition(uuid: BluetoothUUID(0x2A38), properties: .read, permissions: .readable, value: [2],
                                 descriptors: [DescriptorDefinition(uuid: BluetoothUUID(0x2901), value: Array("Location".utf8))]),
    ]))                                                                                    // 8-15
    let custom = try XCTUnwrap(BluetoothUUID("6E400001-B5A3-F393-E0A9-E50E24DCCA9E"))
    let long = (0..<100).map { UInt8($0) }
    try database.add(ServiceDefinition(uuid: custom, characteristics: [
        CharacteristicDefinition(uuid: try XCTUnwrap(BluetoothUUID("6E400002-B5A3-F393-E0A9-E50E24DCCA9E")),
                                 properties: [.read, .write, .writeWithoutResponse], permissions: [.readable, .writeable], value: long),
        CharacteristicDefinition(uuid: try XCTUnwrap(BluetoothUUID("6E400003-B5A3-F393-E0A9-E50E24DCCA9E")),
                                 properties: [.read, .write], permissions: [.readEncryptionRequired, .writeEncryptionRequired], value: [0x42]),
        CharacteristicDefinition(uuid: try XCTUnwrap(BluetoothUUID("6E400004-B5A3-F393-E0A9-E50E24DCCA9E")),
                                 properties: [.read, .write], permissions: [.readable, .writeable]),
    ]))                                                                                    // 16-22
    let server = ATTServer(database: database)
    if let mtu { _ = server.receive([0x02, UInt8(mtu & 0xFF), UInt8(mtu >> 8)]) }
    return (server, database)
}

func sent(_ outputs: [ATTServerOutput]) -> [UInt8]? {
    for output in outputs { if case .send(let bytes) = output { return bytes } }
    return nil
}

func le(_ value: UInt16) -> [UInt8] { [UInt8(value & 0xFF), UInt8(value >> 8)] }
