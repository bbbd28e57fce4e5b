import BerylHCI

/// The one scan the controller runs for everyone: the apps' merged scans and a lab session's. Sans-IO: managerd asks
/// what is wanted whenever a scanner, an app's lifecycle or the controller's state changes, and sends the commands.
public struct ControllerScan: Equatable, Sendable {
    public enum Pace: Equatable, Sendable {
        /// 60 ms every 100 ms.
        case fast
        /// 30 ms every 1.28 s: every scanning app in the background, as iOS scans for them.
        case slow
    }

    public var pace: Pace
    /// Active scanning asks for scan responses, which carry the names apps see.
    public var active: Bool
    public var ownAddressType: UInt8

    public init(pace: Pace, active: Bool, ownAddressType: UInt8) {
        self.pace = pace
        self.active = active
        self.ownAddressType = ownAddressType
    }

    /// nil: the controller does not scan. A lab's scan runs fast with its own address type, and passive only when no
    /// app scans.
    public static func wanted(appsScanning: Bool, appsAllInBackground: Bool, lab: LabSession.Scan?, poweredOn: Bool,
                              ownAddressType: UInt8) -> ControllerScan? {
        guard poweredOn, appsScanning || lab != nil else { return nil }
        return ControllerScan(pace: lab != nil || !appsAllInBackground ? .fast : .slow,
                              active: !(lab?.passive == true && !appsScanning),
                              ownAddressType: lab?.ownAddress.rawValue ?? ownAddressType)
    }

    /// From what runs to what is wanted. Parameters change only with the scan off (Core Vol 4 Part E §7.8.10); the
    /// controller's duplicate filter stays off, as apps' duplicates are filtered per app and a lab sees every report.
    public static func commands(from current: ControllerScan?, to wanted: ControllerScan?) -> [HCICommandPacket] {
        guard current != wanted else { return [] }
        var commands: [HCICommandPacket] = current == nil ? [] : [HCICommands.leSetScanEnable(false)]
        guard let wanted else { return commands }
        let (interval, window): (UInt16, UInt16) = wanted.pace == .slow ? (0x0800, 0x0030) : (0x00A0, 0x0060)
        commands.append(HCICommands.leSetScanParameters(active: wanted.active, interval: interval, window: window, ownAddressType: wanted.ownAddressType))
        commands.append(HCICommands.leSetScanEnable(true))
        return commands
    }
}
