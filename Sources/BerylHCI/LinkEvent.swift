import BerylCore

/// The connection lifecycle events every host component follows, decoded in one place
/// (Disconnection Complete, Core Vol 4 Part E §7.7.5; LE (Enhanced) Connection Complete, §7.7.65.1 and §7.7.65.10).
public enum LinkEvent: Equatable, Sendable {
    case connected(handle: UInt16, central: Bool, peer: DeviceAddress)
    /// A connection attempt or advertising that ended without a link (cancelled, timed out, refused).
    case connectionFailed(status: UInt8)
    case disconnected(handle: UInt16, reason: UInt8)
    /// Encryption Change (§7.7.8) or Encryption Key Refresh Complete (§7.7.39, reported as enabled).
    case encryptionChanged(handle: UInt16, status: UInt8, enabled: Bool)
    /// LE Long Term Key Request (§7.7.65.5): the peripheral's controller asks for the key the central named.
    case longTermKeyRequested(handle: UInt16, rand: [UInt8], ediv: UInt16)

    /// Nil for any other event, and for ones too short to be what they claim.
    public init?(_ event: HCIEventPacket) {
        let p = event.parameters
        switch HCIEventCode(rawValue: event.code) {
        case .disconnectionComplete?:
            guard p.count >= 4, p[0] == 0 else { return nil }
            self = .disconnected(handle: (UInt16(p[1]) | UInt16(p[2]) << 8) & 0x0FFF, reason: p[3])
        case .encryptionChange?:
            guard p.count >= 4 else { return nil }
            self = .encryptionChanged(handle: (UInt16(p[1]) | UInt16(p[2]) << 8) & 0x0FFF, status: p[0], enabled: p[0] == 0 && p[3] != 0)
        case .encryptionKeyRefreshComplete?:
            guard p.count >= 3 else { return nil }
            self = .encryptionChanged(handle: (UInt16(p[1]) | UInt16(p[2]) << 8) & 0x0FFF, status: p[0], enabled: p[0] == 0)
        case .leMeta? where p.first == LESubevent.longTermKeyRequest.rawValue:
            guard p.count >= 13 else { return nil }
            self = .longTermKeyRequested(handle: (UInt16(p[1]) | UInt16(p[2]) << 8) & 0x0FFF, rand: Array(p[3..<11]), ediv: UInt16(p[11]) | UInt16(p[12]) << 8)
        case .leMeta?:
            guard p.count >= 12, p[0] == LESubevent.connectionComplete.rawValue || p[0] == LESubevent.enhancedConnectionComplete.rawValue else {
                return nil
            }
            guard p[1] == 0 else {
                self = .connectionFailed(status: p[1])
                return
            }
            self = .connected(handle: (UInt16(p[2]) | UInt16(p[3]) << 8) & 0x0FFF, central: p[4] == 0,
                              peer: DeviceAddress(BDAddress(wire: Array(p[6..<12])), type: p[5] & 1 == 1 ? .random : .public))
        default:
            return nil
        }
    }
}

/// The commands Beryl's own tools build, with their parameters laid out once (Core Vol 4 Part E §7.1.6, §7.8.5, §7.8.12).
public enum HCICommands {
    /// Connection interval and supervision timeout in HCI units (1.25 ms, 10 ms).
    public static func leCreateConnection(peer: DeviceAddress, scanInterval: UInt16 = 0x0060, scanWindow: UInt16 = 0x0030,
                                          interval: UInt16, supervisionTimeout: UInt16, useFilterAcceptList: Bool = false,
                                          ownAddressType: UInt8 = 0) -> HCICommandPacket {
        var w = ByteWriter()
        w.u16(scanInterval)
        w.u16(scanWindow)
        w.u8(useFilterAcceptList ? 1 : 0)  // 1: whoever on the filter accept list is heard first (the peer below is ignored)
        w.u8(peer.type.isRandom ? 1 : 0)
        w.append(peer.address.bytes)
        w.u8(ownAddressType)  // 0 public, 1 random, 2/3 a resolvable private address when the resolving list has the peer
        for value: UInt16 in [interval, interval, 0, supervisionTimeout, 0, 0] { w.u16(value) }
        return HCICommandPacket(.leCreateConnection, parameters: w.bytes)
    }

    /// ADV_IND (or `type`) on all three channels, interval in 0.625 ms units, from the public address (or the random one set).
    public static func leSetAdvertisingParameters(interval: UInt16, type: UInt8 = 0, ownAddressRandom: Bool = false,
                                                  ownAddressType: UInt8? = nil, directedTo peer: DeviceAddress? = nil) -> HCICommandPacket {
        var w = ByteWriter()
        w.u16(interval)
        w.u16(interval)
        w.append([type, ownAddressType ?? (ownAddressRandom ? 1 : 0), peer?.type.isRandom == true ? 1 : 0])
        w.append(peer?.address.bytes ?? [0, 0, 0, 0, 0, 0])
        w.append([0x07, 0])
        return HCICommandPacket(.leSetAdvertisingParameters, parameters: w.bytes)
    }

    /// New connection parameters (1.25 ms interval units, 10 ms timeout units), CE lengths left to the controller.
    public static func leConnectionUpdate(handle: UInt16, intervalMin: UInt16, intervalMax: UInt16, latency: UInt16,
                                          supervisionTimeout: UInt16) -> HCICommandPacket {
        var w = ByteWriter()
        for value in [handle, intervalMin, intervalMax, latency, supervisionTimeout, 0, 0] { w.u16(value) }
        return HCICommandPacket(.leConnectionUpdate, parameters: w.bytes)
    }

    /// LE Enable Encryption (§7.8.24): the central starts (or refreshes) encryption with a key; keys in wire order.
    public static func leEnableEncryption(handle: UInt16, rand: [UInt8], ediv: UInt16, ltk: [UInt8]) -> HCICommandPacket {
        var w = ByteWriter()
        w.u16(handle)
        w.append(rand)
        w.u16(ediv)
        w.append(ltk)
        return HCICommandPacket(.leEnableEncryption, parameters: w.bytes)
    }

    /// The peripheral's answer to an LTK request (§7.8.25, §7.8.26): the key, or none (the link stays unencrypted).
    public static func leLongTermKeyReply(handle: UInt16, ltk: [UInt8]?) -> HCICommandPacket {
        var w = ByteWriter()
        w.u16(handle)
        guard let ltk else { return HCICommandPacket(.leLongTermKeyRequestNegativeReply, parameters: w.bytes) }
        w.append(ltk)
        return HCICommandPacket(.leLongTermKeyRequestReply, parameters: w.bytes)
    }

    /// LE Set Advertising Data / Scan Response Data (§7.8.7, §7.8.8): the length, then the data padded to 31 bytes.
    public static func leSetAdvertisingData(_ data: [UInt8], scanResponse: Bool = false) -> HCICommandPacket {
        let clipped = Array(data.prefix(31))
        return HCICommandPacket(scanResponse ? .leSetScanResponseData : .leSetAdvertisingData,
                                parameters: [UInt8(clipped.count)] + clipped + [UInt8](repeating: 0, count: 31 - clipped.count))
    }

    /// LE Set Random Address (§7.8.4), address in wire order.
    public static func leSetRandomAddress(_ address: BDAddress) -> HCICommandPacket {
        HCICommandPacket(.leSetRandomAddress, parameters: address.bytes)
    }

    public static func disconnect(handle: UInt16, reason: HCIStatus = .remoteUserTerminatedConnection) -> HCICommandPacket {
        HCICommandPacket(.disconnect, parameters: [UInt8(handle & 0xFF), UInt8(handle >> 8), reason.rawValue])
    }

    /// LE Set Advertising Enable (§7.8.9).
    public static func leSetAdvertisingEnable(_ enabled: Bool) -> HCICommandPacket {
        HCICommandPacket(.leSetAdvertisingEnable, parameters: [enabled ? 1 : 0])
    }

    /// LE Set Scan Parameters (§7.8.10): interval and window in 0.625 ms units, every advertiser accepted.
    public static func leSetScanParameters(active: Bool, interval: UInt16, window: UInt16, ownAddressType: UInt8) -> HCICommandPacket {
        var w = ByteWriter()
        w.u8(active ? 1 : 0)
        w.u16(interval)
        w.u16(window)
        w.u8(ownAddressType)
        w.u8(0)
        return HCICommandPacket(.leSetScanParameters, parameters: w.bytes)
    }

    /// LE Set Scan Enable (§7.8.11).
    public static func leSetScanEnable(_ enabled: Bool, filterDuplicates: Bool = false) -> HCICommandPacket {
        HCICommandPacket(.leSetScanEnable, parameters: [enabled ? 1 : 0, filterDuplicates ? 1 : 0])
    }

    /// Read RSSI (§7.5.4) of a connection.
    public static func readRSSI(handle: UInt16) -> HCICommandPacket {
        HCICommandPacket(.readRSSI, parameters: [UInt8(handle & 0xFF), UInt8(handle >> 8)])
    }

    /// LE Clear Filter Accept List (§7.8.15).
    public static var leClearFilterAcceptList: HCICommandPacket { HCICommandPacket(.leClearFilterAcceptList) }

    /// LE Add Device To Filter Accept List (§7.8.16), address in wire order.
    public static func leAddDeviceToFilterAcceptList(_ peer: DeviceAddress) -> HCICommandPacket {
        HCICommandPacket(.leAddDeviceToFilterAcceptList, parameters: [peer.type.isRandom ? 1 : 0] + peer.address.bytes)
    }

    /// LE Create Connection Cancel (§7.8.13).
    public static var leCreateConnectionCancel: HCICommandPacket { HCICommandPacket(.leCreateConnectionCancel) }

    /// LE Set Data Length (§7.8.33): the most octets and microseconds per transmitted data PDU on a link.
    public static func leSetDataLength(handle: UInt16, octets: UInt16, time: UInt16) -> HCICommandPacket {
        var w = ByteWriter()
        w.u16(handle)
        w.u16(octets)
        w.u16(time)
        return HCICommandPacket(.leSetDataLength, parameters: w.bytes)
    }

    /// LE Write Suggested Default Data Length (§7.8.35): what the controller uses for new links.
    public static func leWriteSuggestedDefaultDataLength(_ length: DataLength) -> HCICommandPacket {
        var w = ByteWriter()
        w.u16(UInt16(length.octets))
        w.u16(UInt16(length.time))
        return HCICommandPacket(.leWriteSuggestedDefaultDataLength, parameters: w.bytes)
    }

    /// LE Set PHY (§7.8.49): the PHY a link prefers both ways, 1 (1M) or 2 (2M); the controller reports the change
    /// with LE PHY Update Complete.
    public static func leSetPHY(handle: UInt16, phy: Int) -> HCICommandPacket {
        let preferred: UInt8 = phy == 2 ? 0b10 : 0b01
        var w = ByteWriter()
        w.u16(handle)
        w.append([0, preferred, preferred])  // All_PHYs 0: both preferences below apply
        w.u16(0)
        return HCICommandPacket(.leSetPHY, parameters: w.bytes)
    }

    /// LE Rand (§7.8.23).
    public static var leRand: HCICommandPacket { HCICommandPacket(.leRand) }
}
