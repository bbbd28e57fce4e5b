import BerylCore

/// What bring-up learned about the controller.
public struct ControllerFacts: Sendable, Equatable {
    public var address = BDAddress.zero
    /// The address is the host's static random identity: the controller reported no public address.
    public var addressIsRandom = false
    public var hciVersion: UInt8 = 0
    public var manufacturer: UInt16 = 0
    public var supportedCommands: [UInt8] = []
    public var leFeatures: [UInt8] = []
    /// LE ACL buffers: the controller's maximum packet length and how many it holds.
    public var aclMTU = 0
    public var aclBuffers = 0
    /// Where the buffers came from: the LE command (v1 or v2) or, when it reports none, the shared BR/EDR buffers.
    public var aclBufferSource = ""
    public var filterAcceptListSize = 0
    public var resolvingListSize = 0
    /// What new links start with (LE Write Suggested Default Data Length); nil: 27 octets, the controller's default.
    public var suggestedDataLength: DataLength?

    public init() {}

    public func supports(_ opcode: HCIOpcode) -> Bool {
        guard let (octet, bit) = opcode.supportedCommandsBit else { return true }
        return octet < supportedCommands.count && supportedCommands[octet] & (1 << bit) != 0
    }

    public func hasLEFeature(bit: Int) -> Bool {
        bit / 8 < leFeatures.count && leFeatures[bit / 8] & (1 << (bit % 8)) != 0
    }
}

/// Mirrors Core Bluetooth's CBManagerState, plus the controller that stopped answering.
public enum ControllerState: Equatable, Sendable, CustomStringConvertible {
    case unknown
    case resetting
    case unsupported(String)
    case unauthorized(String)
    case poweredOff(String)
    case poweredOn
    case unresponsive(opcode: UInt16)

    public var description: String {
        switch self {
        case .unknown: "unknown"
        case .resetting: "resetting"
        case .unsupported(let why): "unsupported (\(why))"
        case .unauthorized(let why): "unauthorized (\(why))"
        case .poweredOff(let why): "poweredOff (\(why))"
        case .poweredOn: "poweredOn"
        case .unresponsive(let opcode): "unresponsive (command 0x\(String(opcode, radix: 16, uppercase: true)) stalled)"
        }
    }
}

/// A vendor command an adapter profile runs after the standard bring-up.
public struct VendorStep: Sendable, Equatable, Codable {
    public var opcode: UInt16
    public var parameters: [UInt8]
    public var description: String
    /// Once the controller accepts this (vendor baud-rate) command, the host's UART moves to this speed.
    public var thenBaud: Int?

    public init(opcode: UInt16, parameters: [UInt8], description: String, thenBaud: Int? = nil) {
        self.opcode = opcode
        self.parameters = parameters
        self.description = description
        self.thenBaud = thenBaud
    }

    /// Broadcom's Launch_RAM, the last record of a .hcd patch: the controller starts the patched firmware, which comes
    /// up as from power-on, at its boot baud rate and with nothing the host set (what BlueZ's btbcm and hci_bcm follow).
    public static let broadcomLaunchRAM: UInt16 = 0xFC4E
    /// How long Broadcom firmware takes to boot after Launch_RAM before it hears commands (btbcm_patchram's 250 ms).
    public static let broadcomFirmwareBoot = Duration.milliseconds(250)
}

/// What an adapter profile tells the host core to avoid.
public struct ControllerQuirks: Sendable, Equatable {
    /// Use LE Read Buffer Size v1 even when v2 is advertised (some firmware answers v2 wrongly).
    public var noReadBufferSizeV2 = false
    /// Cap the ACL packets in flight below what the controller reports.
    public var maxACLBuffers: Int?
    /// Do not send LE Set Data Length / the data length extension.
    public var noDataLengthExtension = false
    /// Do not ask for the 2M PHY on new links (firmware that advertises it and then drops or stalls the link).
    public var no2MPHY = false

    public init() {}
}

/// The most payload octets, and microseconds, a data PDU may take on a link (Core Vol 6 Part B §4.5.10).
public struct DataLength: Sendable, Equatable {
    public var octets: Int
    public var time: Int
    public init(octets: Int, time: Int) {
        self.octets = octets
        self.time = time
    }
}
