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
        guard event.code == HCIEventCode.leMeta.rawValue, event.parameters.first == LESubevent.advertisingReport.rawValue else { return nil }
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
}
