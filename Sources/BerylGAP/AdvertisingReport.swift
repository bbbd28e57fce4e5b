import BerylCore
import BerylHCI

/// One received advertising PDU or scan response (LE Advertising Report, Core Vol 4 Part E §7.7.65.2).
public struct AdvertisingReport: Equatable, Sendable {
    public enum Kind: UInt8, Sendable {
        case connectableUndirected = 0x00      // ADV_IND
        case connectableDirected = 0x01        // ADV_DIRECT_IND
        case scannableUndirected = 0x02        // ADV_SCAN_IND
        case nonConnectable = 0x03             // ADV_NONCONN_IND
        case scanResponse = 0x04               // SCAN_RSP

        public var isConnectable: Bool { self == .connectableUndirected || self == .connectableDirected }
    }

    public var kind: Kind
    public var address: DeviceAddress
    public var data: [UInt8]
    /// dBm; 127 means not available.
    public var rssi: Int8

    public init(kind: Kind, address: DeviceAddress, data: [UInt8], rssi: Int8) {
        self.kind = kind
        self.address = address
        self.data = data
        self.rssi = rssi
    }

    /// The reports in one event, each checked against the event's length; nil when the event is not one or is malformed.
    public static func decode(_ event: HCIEventPacket) -> [AdvertisingReport]? {
        guard event.code == HCIEventCode.leMeta.rawValue else { return nil }
        if event.parameters.first == LESubevent.extendedAdvertisingReport.rawValue { return decodeExtended(event.parameters) }
        guard event.parameters.first == LESubevent.advertisingReport.rawValue else { return nil }
        var reader = ByteReader(event.parameters, offset: 1)
        guard let count = try? reader.u8(), count >= 1 else { return nil }
        var reports: [AdvertisingReport] = []
        for _ in 0..<count {
            guard let kindByte = try? reader.u8(), let kind = Kind(rawValue: kindByte), let type = try? reader.u8(),
                  let address = try? reader.take(6), let length = try? reader.u8(), length <= 31,
                  let data = try? reader.take(Int(length)), let rssi = try? reader.i8() else { return nil }
            reports.append(AdvertisingReport(kind: kind, address: DeviceAddress(BDAddress(wire: address), type: type & 1 == 1 ? .random : .public),
                                             data: data, rssi: rssi))
        }
        return reports
    }

    /// LE Extended Advertising Report (Core Vol 4 Part E §7.7.65.13). Controllers that support extended advertising
    /// may report legacy scanning this way (Bumble's do); fragments of a longer extended PDU (data status not
    /// complete) are left out, as Beryl scans for what fits a legacy PDU.
    static func decodeExtended(_ parameters: [UInt8]) -> [AdvertisingReport]? {
        var reader = ByteReader(parameters, offset: 1)
        guard let count = try? reader.u8(), count >= 1 else { return nil }
        var reports: [AdvertisingReport] = []
        for _ in 0..<count {
            guard let eventType = try? reader.u16(), let type = try? reader.u8(), let address = try? reader.take(6),
                  (try? reader.take(4)) != nil,  // primary and secondary PHY, SID, TX power
                  let rssi = try? reader.i8(), (try? reader.take(9)) != nil,  // periodic interval, direct address type and address
                  let length = try? reader.u8(), let data = try? reader.take(Int(length)) else { return nil }
            guard (eventType >> 5) & 0b11 == 0 else { continue }
            let kind: Kind =
                if eventType & 0b1000 != 0 { .scanResponse }
                else if eventType & 0b1 != 0 { eventType & 0b100 != 0 ? .connectableDirected : .connectableUndirected }
                else if eventType & 0b10 != 0 { .scannableUndirected }
                else { .nonConnectable }
            reports.append(AdvertisingReport(kind: kind, address: DeviceAddress(BDAddress(wire: address), type: type & 1 == 1 ? .random : .public),
                                             data: data, rssi: rssi))
        }
        return reports
    }
}
