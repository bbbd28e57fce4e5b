import BerylCore
import BerylHCI

/// Who may open a lab session: root, and members of the lab group (by primary or supplementary group). A lab session
/// drives the radio and reads every report, so it is never granted to an ordinary app's user.
public enum LabAccess {
    public static let groupName = "beryl-lab"

    public static func isGranted(uid: UInt32, primaryGroup: UInt32?, userName: String?, labGroup: (gid: UInt32, members: [String])?) -> Bool {
        if uid == 0 { return true }
        guard let labGroup else { return false }
        if primaryGroup == labGroup.gid { return true }
        guard let userName else { return false }
        return labGroup.members.contains(userName)
    }
}

/// The address a lab procedure uses on the air (Core Vol 4 Part E §7.8.5 Own_Address_Type); passed to the controller
/// as is: with no resolving-list entry for the peer, the resolvable kinds fall back to public or random.
public enum LabOwnAddress: UInt8, Sendable {
    case `public` = 0, random = 1, resolvableOrPublic = 2, resolvableOrRandom = 3

    public var needsRandomAddress: Bool { self == .random || self == .resolvableOrRandom }
}

/// What a lab session asked the controller to advertise: legacy PDUs with the caller's own AD structures.
public struct LabAdvertising: Equatable, Sendable {
    public enum Kind: UInt8, Sendable {
        // Advertising_Type (Core Vol 4 Part E §7.8.5); high duty cycle directed is not offered (it times out in 1.28 s).
        case connectableUndirected = 0x00, scannableUndirected = 0x02, nonConnectable = 0x03, connectableDirectedLowDuty = 0x04
    }

    public enum Refusal: Error, Equatable, Sendable {
        case dataTooLong(field: String, length: Int)
        case intervalOutOfRange(UInt32)
    }

    public var kind: Kind
    public var data: [UInt8]
    public var scanResponse: [UInt8]
    public var ownAddress: LabOwnAddress
    public var directedTo: DeviceAddress?
    public var interval: UInt16

    /// Legacy advertising carries at most 31 bytes per PDU (Core Vol 3 Part C §11) at 20 ms to 10.24 s (Vol 4 Part E §7.8.5).
    /// A directed advertiser sends ADV_DIRECT_IND, connectable by its PDU type (Core Vol 6 Part B §2.3.1.2), whatever
    /// `connectable` says.
    public init(data: [UInt8], scanResponse: [UInt8], connectable: Bool, scannable: Bool, directedTo: DeviceAddress?,
                ownAddress: LabOwnAddress, interval: UInt32) throws(Refusal) {
        guard data.count <= 31 else { throw .dataTooLong(field: "data", length: data.count) }
        guard scanResponse.count <= 31 else { throw .dataTooLong(field: "scan_response", length: scanResponse.count) }
        let chosen = interval == 0 ? 0x00A0 : interval
        guard (0x0020...0x4000).contains(chosen) else { throw .intervalOutOfRange(interval) }
        self.data = data
        self.scanResponse = scanResponse
        self.ownAddress = ownAddress
        self.directedTo = directedTo
        self.interval = UInt16(chosen)
        kind = directedTo != nil ? .connectableDirectedLowDuty : connectable ? .connectableUndirected : scannable ? .scannableUndirected : .nonConnectable
    }

    /// The commands that start it, with advertising off first (parameters change only then, §7.8.5).
    public var commands: [HCICommandPacket] {
        [
            HCICommands.leSetAdvertisingEnable(false),
            HCICommands.leSetAdvertisingParameters(interval: interval, type: kind.rawValue, ownAddressType: ownAddress.rawValue, directedTo: directedTo),
            HCICommands.leSetAdvertisingData(data),
            HCICommands.leSetAdvertisingData(scanResponse, scanResponse: true),
            HCICommands.leSetAdvertisingEnable(true),
        ]
    }
}

/// A link's timing as the controller reported it (LE Connection Complete §7.7.65.1, §7.7.65.10; LE Connection Update
/// Complete §7.7.65.3): interval in 1.25 ms units, latency in connection events, supervision timeout in 10 ms units.
public struct LinkTiming: Equatable, Sendable {
    public var handle: UInt16
    public var interval: UInt16
    public var latency: UInt16
    public var supervisionTimeout: UInt16

    public init(handle: UInt16, interval: UInt16, latency: UInt16, supervisionTimeout: UInt16) {
        self.handle = handle
        self.interval = interval
        self.latency = latency
        self.supervisionTimeout = supervisionTimeout
    }

    /// Nil for other events, failed ones, and ones too short for what they claim.
    public init?(_ event: HCIEventPacket) {
        let p = event.parameters
        guard event.code == HCIEventCode.leMeta.rawValue, let subevent = p.first.flatMap(LESubevent.init(rawValue:)) else { return nil }
        let timingAt: Int
        switch subevent {
        case .connectionComplete: timingAt = 12
        case .enhancedConnectionComplete: timingAt = 24
        case .connectionUpdateComplete: timingAt = 4
        default: return nil
        }
        guard p.count >= timingAt + 6, p[1] == 0 else { return nil }
        func u16(_ at: Int) -> UInt16 { UInt16(p[at]) | UInt16(p[at + 1]) << 8 }
        self.init(handle: u16(2) & 0x0FFF, interval: u16(timingAt), latency: u16(timingAt + 2), supervisionTimeout: u16(timingAt + 4))
    }
}
