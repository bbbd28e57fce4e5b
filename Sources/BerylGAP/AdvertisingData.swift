import BerylCore

/// AD types Beryl reads and writes (Core Supplement Part A §1; Assigned Numbers §2.3).
public enum ADType: UInt8, Sendable {
    case flags = 0x01
    case incompleteServices16 = 0x02
    case completeServices16 = 0x03
    case incompleteServices32 = 0x04
    case completeServices32 = 0x05
    case incompleteServices128 = 0x06
    case completeServices128 = 0x07
    case shortenedLocalName = 0x08
    case completeLocalName = 0x09
    case txPowerLevel = 0x0A
    case solicitedServices16 = 0x14
    case solicitedServices128 = 0x15
    case serviceData16 = 0x16
    case solicitedServices32 = 0x1F
    case serviceData32 = 0x20
    case serviceData128 = 0x21
    case manufacturerData = 0xFF
}

public enum AdvertisingDataError: Error, Equatable, Sendable {
    /// A structure's length runs past the data (Core Supplement Part A §1: the rest is not to be trusted).
    case truncated(at: Int)
    case malformedField(ADType)
}

/// What an advertisement says, keyed as Core Bluetooth's advertisement data dictionary is.
public struct AdvertisementData: Equatable, Sendable {
    public var localName: String?
    public var serviceUUIDs: [BluetoothUUID] = []
    /// Service UUIDs that did not fit (Core Bluetooth's overflow area), when known by name.
    public var overflowServiceUUIDs: [BluetoothUUID] = []
    /// The overflow area as it goes on the air: one bit per service UUID (`OverflowArea`), so only a scan naming
    /// the service finds it, as iOS's overflow area works.
    public var overflowMask: [UInt8]?
    public var solicitedServiceUUIDs: [BluetoothUUID] = []
    public var serviceData: [BluetoothUUID: [UInt8]] = [:]
    public var manufacturerData: [UInt8]?
    public var txPowerLevel: Int8?
    public var isConnectable = false

    public init() {}

    /// Parses AD structures; a zero-length structure ends the significant part (§1), a length past the end is an error.
    public static func parse(_ bytes: [UInt8]) -> Result<AdvertisementData, AdvertisingDataError> {
        var data = AdvertisementData()
        switch data.merge(bytes) {
        case .success: return .success(data)
        case .failure(let error): return .failure(error)
        }
    }

    /// Adds a scan response's (or another report's) structures to what is known.
    public mutating func merge(_ bytes: [UInt8]) -> Result<Void, AdvertisingDataError> {
        var offset = 0
        while offset < bytes.count {
            let length = Int(bytes[offset])
            if length == 0 { break }
            guard offset + 1 + length <= bytes.count else { return .failure(.truncated(at: offset)) }
            let type = bytes[offset + 1]
            let value = Array(bytes[(offset + 2)..<(offset + 1 + length)])
            offset += 1 + length
            guard let known = ADType(rawValue: type) else { continue }  // unknown types are skipped, not refused
            if case .failure(let error) = apply(known, value) { return .failure(error) }
        }
        return .success(())
    }

    private mutating func apply(_ type: ADType, _ value: [UInt8]) -> Result<Void, AdvertisingDataError> {
        func uuids(_ width: Int) -> [BluetoothUUID]? {
            guard value.count % width == 0 else { return nil }
            return stride(from: 0, to: value.count, by: width).compactMap { BluetoothUUID(wire: Array(value[$0..<($0 + width)])) }
        }
        switch type {
        case .flags:
            break
        case .incompleteServices16, .completeServices16, .incompleteServices32, .completeServices32, .incompleteServices128, .completeServices128:
            let width = [.incompleteServices16, .completeServices16].contains(type) ? 2 : [.incompleteServices32, .completeServices32].contains(type) ? 4 : 16
            guard let found = uuids(width) else { return .failure(.malformedField(type)) }
            for uuid in found where !serviceUUIDs.contains(uuid) { serviceUUIDs.append(uuid) }
        case .solicitedServices16, .solicitedServices32, .solicitedServices128:
            let width = type == .solicitedServices16 ? 2 : type == .solicitedServices32 ? 4 : 16
            guard let found = uuids(width) else { return .failure(.malformedField(type)) }
            for uuid in found where !solicitedServiceUUIDs.contains(uuid) { solicitedServiceUUIDs.append(uuid) }
        case .shortenedLocalName, .completeLocalName:
            // A complete name wins over a shortened one, whichever came first.
            if type == .completeLocalName || localName == nil { localName = String(decoding: value, as: UTF8.self) }
        case .txPowerLevel:
            guard value.count == 1 else { return .failure(.malformedField(type)) }
            txPowerLevel = Int8(bitPattern: value[0])
        case .serviceData16, .serviceData32, .serviceData128:
            let width = type == .serviceData16 ? 2 : type == .serviceData32 ? 4 : 16
            guard value.count >= width, let uuid = BluetoothUUID(wire: Array(value[0..<width])) else { return .failure(.malformedField(type)) }
            serviceData[uuid] = Array(value[width...])
        case .manufacturerData:
            guard value.count >= 2 else { return .failure(.malformedField(type)) }
            if let mask = OverflowArea.mask(inManufacturerData: value) { overflowMask = mask } else { manufacturerData = value }
        }
        return .success(())
    }
}

/// The overflow area on the air: manufacturer-specific data under the SIG's reserved test company id 0xFFFF, a
/// type byte, and a 128-bit mask in which each overflowed service UUID sets one bit (a hash of its 128-bit form).
/// Like iOS's, it tells only a scanner looking for a given service that the advertiser may have it.
public enum OverflowArea {
    static let company: [UInt8] = [0xFF, 0xFF]
    static let type: UInt8 = 0x01

    public static func bit(for uuid: BluetoothUUID) -> Int {
        var hash: UInt32 = 2_166_136_261  // FNV-1a
        for byte in uuid.wire128 {
            hash = (hash ^ UInt32(byte)) &* 16_777_619
        }
        return Int(hash % 128)
    }

    public static func mask(for uuids: [BluetoothUUID]) -> [UInt8] {
        var mask = [UInt8](repeating: 0, count: 16)
        for uuid in uuids {
            let bit = bit(for: uuid)
            mask[bit / 8] |= 1 << (bit % 8)
        }
        return mask
    }

    public static func manufacturerData(for uuids: [BluetoothUUID]) -> [UInt8] { company + [type] + mask(for: uuids) }

    static func mask(inManufacturerData value: [UInt8]) -> [UInt8]? {
        guard value.count == 19, Array(value[0..<2]) == company, value[2] == type else { return nil }
        return Array(value[3...])
    }

    public static func mayContain(_ mask: [UInt8], _ uuid: BluetoothUUID) -> Bool {
        let bit = bit(for: uuid)
        return mask.count == 16 && mask[bit / 8] & (1 << (bit % 8)) != 0
    }
}

/// Core Bluetooth's advertising rules (Core Bluetooth Programming Guide, "Advertising your services"): the
/// advertising packet holds the flags and as many service UUIDs as fit in its 31 bytes (28 after the flags);
/// the local name goes in the scan response (shortened when it does not fit); UUIDs that fit in neither are
/// kept in the overflow area, which only scans naming them find.
public struct AdvertisingPayload: Equatable, Sendable {
    public var advertising: [UInt8]
    public var scanResponse: [UInt8]
    public var overflow: [BluetoothUUID]

    public static let maximumLength = 31

    public init(localName: String?, serviceUUIDs: [BluetoothUUID], manufacturerData: [UInt8]? = nil, connectable: Bool = true) {
        var advertising: [UInt8] = [2, ADType.flags.rawValue, 0x06]  // LE General Discoverable, BR/EDR not supported
        var scanResponse: [UInt8] = []
        var overflow: [BluetoothUUID] = []
        let short = serviceUUIDs.filter { $0.uuid16 != nil }
        let long = serviceUUIDs.filter { $0.uuid16 == nil }
        var placedShort: [BluetoothUUID] = []
        for uuid in short {
            let needed = 2 + 2 * (placedShort.count + 1)
            if advertising.count + needed <= Self.maximumLength { placedShort.append(uuid) } else { overflow.append(uuid) }
        }
        if !placedShort.isEmpty {
            let complete = overflow.isEmpty
            advertising += [UInt8(1 + 2 * placedShort.count), complete ? ADType.completeServices16.rawValue : ADType.incompleteServices16.rawValue]
            advertising += placedShort.flatMap(\.attWire)
        }
        for uuid in long {
            if advertising.count + 18 <= Self.maximumLength {
                advertising += [17, ADType.completeServices128.rawValue] + uuid.attWire
            } else {
                overflow.append(uuid)
            }
        }
        if let manufacturerData, advertising.count + 2 + manufacturerData.count <= Self.maximumLength {
            advertising += [UInt8(1 + manufacturerData.count), ADType.manufacturerData.rawValue] + manufacturerData
        }
        // Core Bluetooth's rule: the name goes in the advertising packet when it fits beside the service UUIDs (28
        // bytes after the flags), so a passive scanner sees it; otherwise in the scan response, shortened if need be
        // (Core Supplement Part A §1.2).
        if let localName, !localName.isEmpty {
            let bytes = Array(localName.utf8)
            if advertising.count + 2 + bytes.count <= Self.maximumLength {
                advertising += [UInt8(1 + bytes.count), ADType.completeLocalName.rawValue] + bytes
            } else {
                let fits = min(bytes.count, Self.maximumLength - 2)
                scanResponse = [UInt8(1 + fits), fits == bytes.count ? ADType.completeLocalName.rawValue : ADType.shortenedLocalName.rawValue] + bytes.prefix(fits)
            }
        }
        self.advertising = advertising
        self.scanResponse = scanResponse
        self.overflow = overflow
    }

    /// A bluetooth-peripheral app in the background (Core Bluetooth's rule): no local name, and every service UUID
    /// in the overflow area.
    public static func background(serviceUUIDs: [BluetoothUUID]) -> AdvertisingPayload {
        var payload = AdvertisingPayload(localName: nil, serviceUUIDs: [])
        payload.overflow = serviceUUIDs
        if !serviceUUIDs.isEmpty {
            let data = OverflowArea.manufacturerData(for: serviceUUIDs)
            payload.advertising += [UInt8(1 + data.count), ADType.manufacturerData.rawValue] + data
        }
        return payload
    }
}
