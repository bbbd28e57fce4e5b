import Foundation
import PandoraInterfaces

/// Pandora's DataTypes ⇄ AD structures (Core Supplement Part A §1; type codes from the Assigned Numbers). UUIDs are
/// written as Pandora's peers write them: 16- and 32-bit as upper-case hex ("180D"), 128-bit in the dashed form.
public enum DataTypesCodec {
    enum ADType: UInt8 {
        case flags = 0x01
        case incomplete16 = 0x02, complete16 = 0x03, incomplete32 = 0x04, complete32 = 0x05, incomplete128 = 0x06, complete128 = 0x07
        case shortenedName = 0x08, completeName = 0x09, txPowerLevel = 0x0A, classOfDevice = 0x0D
        case peripheralConnectionIntervalRange = 0x12, solicitation16 = 0x14, solicitation128 = 0x15, serviceData16 = 0x16
        case publicTargetAddress = 0x17, randomTargetAddress = 0x18, appearance = 0x19, advertisingInterval = 0x1A
        case solicitation32 = 0x1F, serviceData32 = 0x20, serviceData128 = 0x21, uri = 0x24, leSupportedFeatures = 0x27
        case manufacturerSpecificData = 0xFF
    }

    public enum Refusal: Error, Equatable, CustomStringConvertible {
        case badUUID(field: String, value: String)
        case unsupported(field: String)
        case tooLong(length: Int)

        public var description: String {
            switch self {
            case .badUUID(let field, let value): "\(field): '\(value)' is not a UUID of that size"
            case .unsupported(let field): "\(field) is not supported"
            case .tooLong(let length): "the AD structures take \(length) bytes; legacy advertising carries 31"
            }
        }
    }

    // MARK: DataTypes → bytes

    /// The AD structures for `types`, in Pandora's field order; `deviceName` fills the include_*_local_name requests.
    public static func encode(_ types: Pandora_DataTypes, deviceName: String) throws(Refusal) -> [UInt8] {
        var out: [UInt8] = []
        func add(_ type: ADType, _ value: [UInt8]) { out += [UInt8(value.count + 1), type.rawValue] + value }
        func uuids(_ list: [String], bytes: Int, field: String) throws(Refusal) -> [UInt8] {
            var joined: [UInt8] = []
            for text in list { joined += try uuid(text, bytes: bytes, field: field) }
            return joined
        }
        let lists: [([String], ADType, Int, String)] = [
            (types.incompleteServiceClassUuids16, .incomplete16, 2, "incomplete_service_class_uuids16"),
            (types.completeServiceClassUuids16, .complete16, 2, "complete_service_class_uuids16"),
            (types.incompleteServiceClassUuids32, .incomplete32, 4, "incomplete_service_class_uuids32"),
            (types.completeServiceClassUuids32, .complete32, 4, "complete_service_class_uuids32"),
            (types.incompleteServiceClassUuids128, .incomplete128, 16, "incomplete_service_class_uuids128"),
            (types.completeServiceClassUuids128, .complete128, 16, "complete_service_class_uuids128"),
        ]
        for (list, type, size, field) in lists where !list.isEmpty { add(type, try uuids(list, bytes: size, field: field)) }
        switch types.shortenedLocalNameOneof {
        case .includeShortenedLocalName?: add(.shortenedName, Array(deviceName.utf8.prefix(8)))
        case .shortenedLocalName(let name)? where !name.isEmpty: add(.shortenedName, Array(name.utf8))
        default: break
        }
        switch types.completeLocalNameOneof {
        case .includeCompleteLocalName?: add(.completeName, Array(deviceName.utf8))
        case .completeLocalName(let name)? where !name.isEmpty: add(.completeName, Array(name.utf8))
        default: break
        }
        switch types.txPowerLevelOneof {
        case .includeTxPowerLevel?: throw .unsupported(field: "include_tx_power_level")
        case .txPowerLevel(let level)? where level != 0: add(.txPowerLevel, [UInt8(truncatingIfNeeded: level)])
        default: break
        }
        switch types.classOfDeviceOneof {
        case .includeClassOfDevice?: throw .unsupported(field: "include_class_of_device")
        case .classOfDevice(let value)? where value != 0: add(.classOfDevice, le(value, count: 3))
        default: break
        }
        if types.peripheralConnectionIntervalMin != 0 {
            let maximum = types.peripheralConnectionIntervalMax != 0 ? types.peripheralConnectionIntervalMax : types.peripheralConnectionIntervalMin
            add(.peripheralConnectionIntervalRange, le(types.peripheralConnectionIntervalMin, count: 2) + le(maximum, count: 2))
        }
        let solicitations: [([String], ADType, Int, String)] = [
            (types.serviceSolicitationUuids16, .solicitation16, 2, "service_solicitation_uuids16"),
            (types.serviceSolicitationUuids32, .solicitation32, 4, "service_solicitation_uuids32"),
            (types.serviceSolicitationUuids128, .solicitation128, 16, "service_solicitation_uuids128"),
        ]
        for (list, type, size, field) in solicitations where !list.isEmpty { add(type, try uuids(list, bytes: size, field: field)) }
        let serviceData: [([String: Data], ADType, Int, String)] = [
            (types.serviceDataUuid16, .serviceData16, 2, "service_data_uuid16"),
            (types.serviceDataUuid32, .serviceData32, 4, "service_data_uuid32"),
            (types.serviceDataUuid128, .serviceData128, 16, "service_data_uuid128"),
        ]
        for (map, type, size, field) in serviceData {
            for (key, value) in map.sorted(by: { $0.key < $1.key }) { add(type, try uuid(key, bytes: size, field: field) + Array(value)) }
        }
        if types.appearance != 0 { add(.appearance, le(types.appearance, count: 2)) }
        switch types.advertisingIntervalOneof {
        case .includeAdvertisingInterval?: throw .unsupported(field: "include_advertising_interval")
        case .advertisingInterval(let interval)? where interval != 0: add(.advertisingInterval, le(interval, count: 2))
        default: break
        }
        if !types.uri.isEmpty { add(.uri, Array(types.uri.utf8)) }
        if !types.leSupportedFeatures.isEmpty { add(.leSupportedFeatures, Array(types.leSupportedFeatures)) }
        if !types.manufacturerSpecificData.isEmpty { add(.manufacturerSpecificData, Array(types.manufacturerSpecificData)) }
        switch types.leDiscoverabilityMode {
        case .discoverableLimited: add(.flags, [0x01])
        case .discoverableGeneral: add(.flags, [0x02])
        default: break
        }
        guard out.count <= 31 else { throw .tooLong(length: out.count) }
        return out
    }

    // MARK: bytes → DataTypes

    /// What a scanner reports: every AD structure it knows, in its field; a malformed tail is ignored, as peers do.
    public static func decode(_ bytes: [UInt8]) -> Pandora_DataTypes {
        var types = Pandora_DataTypes()
        var index = 0
        while index < bytes.count {
            let length = Int(bytes[index])
            guard length > 0, index + 1 + length <= bytes.count else { break }
            let value = Array(bytes[(index + 2)..<(index + 1 + length)])
            index += 1 + length
            guard let type = ADType(rawValue: bytes[index - length]) else { continue }
            switch type {
            case .flags:
                if let flags = value.first {
                    types.leDiscoverabilityMode = flags & 0x01 != 0 ? .discoverableLimited : flags & 0x02 != 0 ? .discoverableGeneral : .notDiscoverable
                }
            case .incomplete16: types.incompleteServiceClassUuids16 += uuidStrings(value, size: 2)
            case .complete16: types.completeServiceClassUuids16 += uuidStrings(value, size: 2)
            case .incomplete32: types.incompleteServiceClassUuids32 += uuidStrings(value, size: 4)
            case .complete32: types.completeServiceClassUuids32 += uuidStrings(value, size: 4)
            case .incomplete128: types.incompleteServiceClassUuids128 += uuidStrings(value, size: 16)
            case .complete128: types.completeServiceClassUuids128 += uuidStrings(value, size: 16)
            case .shortenedName: types.shortenedLocalName = String(decoding: value, as: UTF8.self)
            case .completeName: types.completeLocalName = String(decoding: value, as: UTF8.self)
            case .txPowerLevel: if let level = value.first { types.txPowerLevel = UInt32(bitPattern: Int32(Int8(bitPattern: level))) }
            case .classOfDevice: if value.count == 3 { types.classOfDevice = UInt32(fromLE: value) }
            case .peripheralConnectionIntervalRange:
                if value.count == 4 {
                    types.peripheralConnectionIntervalMin = UInt32(fromLE: Array(value[0..<2]))
                    types.peripheralConnectionIntervalMax = UInt32(fromLE: Array(value[2..<4]))
                }
            case .solicitation16: types.serviceSolicitationUuids16 += uuidStrings(value, size: 2)
            case .solicitation32: types.serviceSolicitationUuids32 += uuidStrings(value, size: 4)
            case .solicitation128: types.serviceSolicitationUuids128 += uuidStrings(value, size: 16)
            case .serviceData16: if value.count >= 2 { types.serviceDataUuid16[uuidString(Array(value[0..<2]))] = Data(value[2...]) }
            case .serviceData32: if value.count >= 4 { types.serviceDataUuid32[uuidString(Array(value[0..<4]))] = Data(value[4...]) }
            case .serviceData128: if value.count >= 16 { types.serviceDataUuid128[uuidString(Array(value[0..<16]))] = Data(value[16...]) }
            case .publicTargetAddress: types.publicTargetAddresses += addresses(value)
            case .randomTargetAddress: types.randomTargetAddresses += addresses(value)
            case .appearance: if value.count == 2 { types.appearance = UInt32(fromLE: value) }
            case .advertisingInterval: if value.count == 2 { types.advertisingInterval = UInt32(fromLE: value) }
            case .uri: types.uri = String(decoding: value, as: UTF8.self)
            case .leSupportedFeatures: types.leSupportedFeatures = Data(value)
            case .manufacturerSpecificData: types.manufacturerSpecificData = Data(value)
            }
        }
        return types
    }

    // MARK: Helpers

    /// Little-endian bytes of a UUID written most significant first ("180D", "0000180D", or dashed 128-bit).
    static func uuid(_ text: String, bytes: Int, field: String) throws(Refusal) -> [UInt8] {
        let hex = text.replacingOccurrences(of: "-", with: "")
        guard hex.count == bytes * 2, hex.allSatisfy(\.isHexDigit) else { throw .badUUID(field: field, value: text) }
        var out: [UInt8] = []
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            out.append(UInt8(hex[index..<next], radix: 16)!)
            index = next
        }
        return out.reversed()
    }

    static func uuidString(_ littleEndian: [UInt8]) -> String {
        let hex = littleEndian.reversed().map { String(format: "%02X", $0) }.joined()
        guard littleEndian.count == 16 else { return hex }
        let chars = Array(hex)
        return [0..<8, 8..<12, 12..<16, 16..<20, 20..<32].map { String(chars[$0]) }.joined(separator: "-")
    }

    private static func uuidStrings(_ value: [UInt8], size: Int) -> [String] {
        stride(from: 0, to: value.count - value.count % size, by: size).map { uuidString(Array(value[$0..<($0 + size)])) }
    }

    /// Target addresses as Pandora carries addresses: six bytes, most significant first.
    private static func addresses(_ value: [UInt8]) -> [Data] {
        stride(from: 0, to: value.count - value.count % 6, by: 6).map { Data(value[$0..<($0 + 6)].reversed()) }
    }

    private static func le(_ value: UInt32, count: Int) -> [UInt8] { (0..<count).map { UInt8(truncatingIfNeeded: value >> (8 * $0)) } }
}

extension UInt32 {
    init(fromLE bytes: [UInt8]) {
        self = bytes.enumerated().reduce(0) { $0 | UInt32($1.element) << (8 * UInt32($1.offset)) }
    }
}
