import BerylWire
import Foundation

/// Core Bluetooth's CBError. Named BluetoothError for the reason CBUUID is BluetoothUUID: dropping the prefix would
/// give `Error`, which Swift owns.
public struct BluetoothError: Error, Hashable, Sendable, CustomStringConvertible, LocalizedError {
    /// CBError.Code, with Apple's raw values.
    public enum Code: Int, Sendable, Hashable, CaseIterable {
        case unknown = 0
        case invalidParameters = 1
        case invalidHandle = 2
        case notConnected = 3
        case outOfSpace = 4
        case operationCancelled = 5
        case connectionTimeout = 6
        case peripheralDisconnected = 7
        case uuidNotAllowed = 8
        case alreadyAdvertising = 9
        case connectionFailed = 10
        case connectionLimitReached = 11
        case unknownDevice = 12
        case operationNotSupported = 13
        case peerRemovedPairingInformation = 14
        case encryptionTimedOut = 15
        case tooManyLEPairedDevices = 16
    }

    public static let errorDomain = "CBErrorDomain"
    public let code: Code
    /// What happened, in the stack's words: for logs, never for deciding anything.
    public let message: String

    public init(_ code: Code, message: String = "") {
        self.code = code
        self.message = message
    }

    public var description: String { message.isEmpty ? "\(Self.errorDomain) \(code.rawValue) (\(code))" : message }
    public var errorDescription: String? { description }

    // Errors compare as Core Bluetooth's do: by domain and code.
    public static func == (lhs: Self, rhs: Self) -> Bool { lhs.code == rhs.code }
    public func hash(into hasher: inout Hasher) { hasher.combine(code) }


    public static var unknown: Code { .unknown }
    public static var invalidParameters: Code { .invalidParameters }
    public static var invalidHandle: Code { .invalidHandle }
    public static var notConnected: Code { .notConnected }
    public static var outOfSpace: Code { .outOfSpace }
    public static var operationCancelled: Code { .operationCancelled }
    public static var connectionTimeout: Code { .connectionTimeout }
    public static var peripheralDisconnected: Code { .peripheralDisconnected }
    public static var uuidNotAllowed: Code { .uuidNotAllowed }
    public static var alreadyAdvertising: Code { .alreadyAdvertising }
    public static var connectionFailed: Code { .connectionFailed }
    public static var connectionLimitReached: Code { .connectionLimitReached }
    public static var unknownDevice: Code { .unknownDevice }
    public static var operationNotSupported: Code { .operationNotSupported }
    public static var peerRemovedPairingInformation: Code { .peerRemovedPairingInformation }
    public static var encryptionTimedOut: Code { .encryptionTimedOut }
    public static var tooManyLEPairedDevices: Code { .tooManyLEPairedDevices }
}

extension BluetoothError.Code {
    init?(wire: Beryl_Ipc_V1_BluetoothErrorCode) {
        guard let code = wire.coreBluetoothCode else { return nil }
        self.init(rawValue: code)
    }

    /// Why a link went down (an HCI reason, Core Vol 1 Part F §1.3), as Core Bluetooth reports it; nil when this
    /// host ended it, which Core Bluetooth reports without an error.
    init?(disconnectionReason reason: UInt32) {
        switch reason {
        case 0x00, 0x16: return nil
        case 0x08, 0x22: self = .connectionTimeout
        case 0x3E: self = .connectionFailed
        case 0x06: self = .peerRemovedPairingInformation  // PIN or Key Missing
        default: self = .peripheralDisconnected
        }
    }
}

/// Core Bluetooth's CBATTError: what a peer (or a peripheral app) answered an attribute request with.
public struct ATTError: Error, Hashable, Sendable, CustomStringConvertible, LocalizedError {
    /// CBATTError.Code: any one-byte ATT error code (Core Vol 3 Part F §3.4.1.1), the application range 0x80–0x9F
    /// and the common profile codes 0xE0–0xFF included, named where the spec names them.
    public struct Code: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public let rawValue: Int

        /// Nil for a value that is not one byte, as an ATT error code is.
        public init?(rawValue: Int) {
            guard (0...0xFF).contains(rawValue) else { return nil }
            self.rawValue = rawValue
        }

        init(_ byte: UInt8) { rawValue = Int(byte) }

        public static let success = Code(0x00)
        public static let invalidHandle = Code(0x01)
        public static let readNotPermitted = Code(0x02)
        public static let writeNotPermitted = Code(0x03)
        public static let invalidPdu = Code(0x04)
        public static let insufficientAuthentication = Code(0x05)
        public static let requestNotSupported = Code(0x06)
        public static let invalidOffset = Code(0x07)
        public static let insufficientAuthorization = Code(0x08)
        public static let prepareQueueFull = Code(0x09)
        public static let attributeNotFound = Code(0x0A)
        public static let attributeNotLong = Code(0x0B)
        public static let insufficientEncryptionKeySize = Code(0x0C)
        public static let invalidAttributeValueLength = Code(0x0D)
        public static let unlikelyError = Code(0x0E)
        public static let insufficientEncryption = Code(0x0F)
        public static let unsupportedGroupType = Code(0x10)
        public static let insufficientResources = Code(0x11)

        /// 0x80–0x9F: defined by the application (the peripheral app that answered).
        public var isApplicationError: Bool { (0x80...0x9F).contains(rawValue) }

        var byte: UInt8 { UInt8(rawValue) }

        public var description: String {
            let names: [Int: String] = [
                0x00: "success", 0x01: "invalidHandle", 0x02: "readNotPermitted", 0x03: "writeNotPermitted", 0x04: "invalidPdu",
                0x05: "insufficientAuthentication", 0x06: "requestNotSupported", 0x07: "invalidOffset", 0x08: "insufficientAuthorization",
                0x09: "prepareQueueFull", 0x0A: "attributeNotFound", 0x0B: "attributeNotLong", 0x0C: "insufficientEncryptionKeySize",
                0x0D: "invalidAttributeValueLength", 0x0E: "unlikelyError", 0x0F: "insufficientEncryption", 0x10: "unsupportedGroupType",
                0x11: "insufficientResources",
            ]
            let hex = "0x" + String(rawValue, radix: 16, uppercase: true)
            if let name = names[rawValue] { return name }
            return isApplicationError ? "application error \(hex)" : "ATT error \(hex)"
        }
    }

    public static let errorDomain = "CBATTErrorDomain"
    public let code: Code
    public let message: String
    /// What the stack failed at on the way (a pairing that failed, an encryption refused), as NSUnderlyingErrorKey
    /// carries it in Core Bluetooth's userInfo; nil for an error the peer answered.
    public let underlyingError: BerylError?

    public init(_ code: Code, message: String = "", underlyingError: BerylError? = nil) {
        self.code = code
        self.message = message
        self.underlyingError = underlyingError
    }

    public var description: String { message.isEmpty ? "\(code) (ATT 0x\(String(code.rawValue, radix: 16)))" : message }
    public var errorDescription: String? { description }

    public static func == (lhs: Self, rhs: Self) -> Bool { lhs.code == rhs.code }
    public func hash(into hasher: inout Hasher) { hasher.combine(code) }


    public static var success: Code { .success }
    public static var invalidHandle: Code { .invalidHandle }
    public static var readNotPermitted: Code { .readNotPermitted }
    public static var writeNotPermitted: Code { .writeNotPermitted }
    public static var invalidPdu: Code { .invalidPdu }
    public static var insufficientAuthentication: Code { .insufficientAuthentication }
    public static var requestNotSupported: Code { .requestNotSupported }
    public static var invalidOffset: Code { .invalidOffset }
    public static var insufficientAuthorization: Code { .insufficientAuthorization }
    public static var prepareQueueFull: Code { .prepareQueueFull }
    public static var attributeNotFound: Code { .attributeNotFound }
    public static var attributeNotLong: Code { .attributeNotLong }
    public static var insufficientEncryptionKeySize: Code { .insufficientEncryptionKeySize }
    public static var invalidAttributeValueLength: Code { .invalidAttributeValueLength }
    public static var unlikelyError: Code { .unlikelyError }
    public static var insufficientEncryption: Code { .insufficientEncryption }
    public static var unsupportedGroupType: Code { .unsupportedGroupType }
    public static var insufficientResources: Code { .insufficientResources }
}

/// `catch BluetoothError.peripheralDisconnected`, as with CBError.
public func ~= (code: BluetoothError.Code, error: any Error) -> Bool { (error as? BluetoothError)?.code == code }

/// `catch ATTError.insufficientAuthentication`, as with CBATTError.
public func ~= (code: ATTError.Code, error: any Error) -> Bool { (error as? ATTError)?.code == code }

/// What went wrong inside the library, before it is told to the app: Core Bluetooth's errors (typed as they came over
/// the wire) and the misuse the API's rules forbid. Apps see `BluetoothError` and `ATTError` in their callbacks and
/// `BerylError` only in `apiMisuseHandler`.
public enum BerylError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The stack is not running (no managerd socket), or went away.
    case unavailable(String)
    /// Core Bluetooth's API misuse: the manager is not powered on.
    case notPoweredOn
    case bluetooth(BluetoothError.Code, String)
    case att(code: UInt8, message: String)
    case invalidArgument(String)
    /// Core Bluetooth's "API MISUSE": a call the API's rules forbid (answering a request twice, a write the
    /// characteristic's properties do not allow, scanning before poweredOn...). Nothing was sent.
    case apiMisuse(String)
    /// The app id is declared by a manifest for another user (or restoration was asked without a manifest).
    case permissionDenied(String)
    /// The stack's queue for this is full (a write without response the link cannot take yet).
    case busy(String)
    /// Pairing ended with Pairing Failed (Core Vol 3 Part H §3.5.5), sent by the peer or by this stack.
    case pairingFailed(reason: UInt8, byPeer: Bool, String)
    /// The controller could not encrypt the link (its HCI status, Core Vol 1 Part F).
    case encryptionFailed(status: UInt8, String)
    /// The controller did not run a command (hung, resetting, or not powered).
    case controller(ControllerFailure, String)
    case failed(String)

    public enum ControllerFailure: Sendable, Equatable {
        case unresponsive, resetting, notReady, reservedCommand
    }

    public var description: String {
        switch self {
        case .unavailable(let why): "the Bluetooth stack is unavailable: \(why)"
        case .notPoweredOn: "the manager is not powered on"
        case .bluetooth(let code, let why): "\(why) (\(code))"
        case .att(let code, let message): "ATT error 0x\(String(code, radix: 16)): \(message)"
        case .invalidArgument(let why): "invalid argument: \(why)"
        case .apiMisuse(let why): "API misuse: \(why)"
        case .permissionDenied(let why): "not permitted: \(why)"
        case .busy(let why): "busy: \(why)"
        case .pairingFailed(let reason, let byPeer, let why): "\(why) (SMP reason 0x\(String(reason, radix: 16)) from \(byPeer ? "the peer" : "this stack"))"
        case .encryptionFailed(let status, let why): "\(why) (HCI status 0x\(String(status, radix: 16)))"
        case .controller(let failure, let why): "\(why) (controller \(failure))"
        case .failed(let why): why
        }
    }

    /// An answer's error as the app is given it: a daemon's with its typed codes, the session's own as unavailable.
    init(_ error: IPCClientError) {
        guard case .remote(let code, let message, let field, let detail) = error else {
            self = .unavailable("\(error)")
            return
        }
        self.init(remote: code, message: message, field: field, detail: detail)
    }

    /// From a daemon's typed error: its typed codes first (ATT, Core Bluetooth, SMP, HCI, the daemons' own reasons),
    /// else its IPC code. The message is only ever carried along.
    init(remote code: IPCErrorCode, message: String, field: String, detail: RemoteDetail) {
        if detail.attError != 0 {
            self = .att(code: detail.attError, message: message)
        } else if let bluetooth = BluetoothError.Code(wire: detail.bluetoothError) {
            self = .bluetooth(bluetooth, message)
        } else if detail.smpReason != 0 {
            self = .pairingFailed(reason: detail.smpReason, byPeer: detail.smpReasonFromPeer, message)
        } else if detail.hciStatus != 0, code == .securityFailed {
            // A controller's status is an encryption failure only where security failed; elsewhere the IPC code says.
            self = .encryptionFailed(status: detail.hciStatus, message)
        } else if let failure = ControllerFailure(wire: detail.controllerReason) {
            self = .controller(failure, message)
        } else if detail.managerReason == .pairingUnderWay {
            // Not a rule broken: the link is busy pairing, and the same request later may succeed.
            self = .busy(message)
        } else if detail.managerReason != .unspecified {
            // managerd's reasons are all rules of the API that the app broke.
            self = .apiMisuse(message)
        } else {
            switch code {
            case .notReady: self = .notPoweredOn
            case .permissionDenied: self = .permissionDenied(message)
            case .busy: self = .busy(message)
            case .invalidArgument, .missingField: self = .invalidArgument(message)
            default: self = .failed("\(code): \(message)")
            }
        }
    }

    /// The error a Core Bluetooth app is given for this.
    public var coreBluetoothError: any Error {
        switch self {
        case .att(let code, let message): ATTError(ATTError.Code(code), message: message)
        case .bluetooth(let code, let message): BluetoothError(code, message: message)
        case .notPoweredOn: BluetoothError(.unknown, message: description)
        case .unavailable: BluetoothError(.unknown, message: description)
        case .invalidArgument: BluetoothError(.invalidParameters, message: description)
        case .apiMisuse: BluetoothError(.invalidParameters, message: description)
        case .permissionDenied: BluetoothError(.operationNotSupported, message: description)
        case .busy: BluetoothError(.unknown, message: description)
        // As iOS reports a pairing that failed or was refused while reaching a protected attribute.
        case .pairingFailed: ATTError(.insufficientAuthentication, message: description, underlyingError: self)
        case .encryptionFailed: ATTError(.insufficientEncryption, message: description, underlyingError: self)
        case .controller: BluetoothError(.unknown, message: description)
        case .failed: BluetoothError(.unknown, message: description)
        }
    }
}

extension BerylError.ControllerFailure {
    init?(wire reason: Beryl_Ipc_V1_ControllerReason) {
        switch reason {
        case .unresponsive: self = .unresponsive
        case .resetting: self = .resetting
        case .notReady: self = .notReady
        case .reservedCommand: self = .reservedCommand
        case .unspecified, .UNRECOGNIZED: return nil
        }
    }
}
