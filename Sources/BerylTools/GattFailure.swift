import BerylCore
import BerylIPC

/// What `beryl gatt` looked for on the peer and did not find.
public enum NotOnPeer: Error, Equatable, Sendable, CustomStringConvertible {
    case characteristic(BluetoothUUID)
    case descriptor(BluetoothUUID, of: BluetoothUUID)

    public var description: String {
        switch self {
        case .characteristic(let uuid): "the peer has no characteristic \(uuid)"
        case .descriptor(let uuid, let characteristic): "the characteristic \(characteristic) has no descriptor \(uuid)"
        }
    }
}

/// Why `beryl gatt` or `beryl pair` failed, as `--json`'s failed event says it: the step, and the typed codes that
/// failed it; `message` is for people. One shape whether the command went through managerd or straight to the daemons.
public struct GattFailure: Sendable {
    public var message: String
    /// "connect" until the link was up, then the operation's verb.
    public var step: String
    public var timedOut = false
    /// The controller refused the step with this status (or an encryption failed with it).
    public var hciStatus: UInt8?
    /// The link went, for this reason (an HCI error code), before the step was done.
    public var disconnectReason: UInt8?
    public var notOnPeer: NotOnPeer?
    /// A daemon's typed refusal.
    public var code: IPCErrorCode?
    public var attError: Int?
    /// CBError's code.
    public var bluetoothError: Int?
    /// The SMP reason a pairing failed with (Core Vol 3 Part H §3.5.5), and whether the peer sent it.
    public var smpReason: UInt8?
    public var byPeer: Bool?

    public init(_ message: String, step: String) {
        self.message = message
        self.step = step
    }

    /// A daemon's typed refusal, with the codes its detail carries.
    public mutating func refused(_ code: IPCErrorCode, _ detail: RemoteDetail) {
        self.code = code
        if detail.attError != 0 { attError = Int(detail.attError) }
        bluetoothError = detail.bluetoothError.coreBluetoothCode
        if detail.hciStatus != 0 { hciStatus = detail.hciStatus }
        if detail.smpReason != 0 {
            smpReason = detail.smpReason
            byPeer = detail.smpReasonFromPeer
        }
    }

    public var fields: [String: Any] {
        var fields: [String: Any] = ["event": "failed", "operation": step, "message": message]
        if timedOut { fields["timedOut"] = true }
        if let hciStatus { fields["hciStatus"] = Int(hciStatus) }
        if let disconnectReason { fields["disconnectReason"] = Int(disconnectReason) }
        switch notOnPeer {
        case .characteristic(let uuid)?:
            fields["missing"] = "characteristic"
            fields["uuid"] = uuid.description
        case .descriptor(let uuid, let characteristic)?:
            fields["missing"] = "descriptor"
            fields["uuid"] = uuid.description
            fields["characteristic"] = characteristic.description
        case nil:
            break
        }
        if let code { fields["code"] = code.rawValue }
        if let attError { fields["attError"] = attError }
        if let bluetoothError { fields["bluetoothError"] = bluetoothError }
        if let smpReason { fields["smpReason"] = Int(smpReason) }
        if let byPeer { fields["byPeer"] = byPeer }
        return fields
    }
}
