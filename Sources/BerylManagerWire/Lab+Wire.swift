import BerylCore
import BerylGAP
import BerylManager
import BerylStore
import BerylWire
import FoundationEssentials
import Glibc

// The lab session's proto ⇄ core translation: its requests as LabSession's values, and what it hears of links,
// reports and security as lab events.

/// A request field that does not read as what it should be: the field, for the typed error's `field`.
public struct LabFieldError: Error, Equatable, CustomStringConvertible {
    public var field: String
    public var reason: String

    public init(field: String, reason: String) {
        self.field = field
        self.reason = reason
    }

    public var description: String { "\(field): \(reason)" }

    /// An address a lab request names; nil for an empty optional one.
    public static func address(_ text: String, field: String, optional: Bool = false) throws(LabFieldError) -> DeviceAddress? {
        if text.isEmpty, optional { return nil }
        guard let address = DeviceAddress(text) else {
            throw LabFieldError(field: field, reason: "'\(text)' is not an address (AA:BB:CC:DD:EE:FF or AA:BB:CC:DD:EE:FF/random)")
        }
        return address
    }
}

extension LabOwnAddress {
    /// An Own_Address_Type this Beryl does not know reads as public.
    public init(_ wire: Beryl_Ipc_V1_OwnAddressType) {
        self = UInt8(exactly: wire.rawValue).flatMap(LabOwnAddress.init(rawValue:)) ?? .public
    }
}

extension LabAdvertising {
    /// What a LabAdvertise asks for, or which field it cannot have.
    public init(_ request: Beryl_Ipc_V1_LabAdvertise) throws(LabFieldError) {
        let directedTo = try LabFieldError.address(request.directedTo, field: "directed_to", optional: true)
        do {
            try self.init(data: Array(request.data), scanResponse: Array(request.scanResponse), connectable: request.connectable,
                          scannable: request.scannable, directedTo: directedTo, ownAddress: LabOwnAddress(request.ownAddressType),
                          interval: request.interval)
        } catch {
            switch error {
            case .dataTooLong(let field, _): throw LabFieldError(field: field, reason: "\(error)")
            case .intervalOutOfRange: throw LabFieldError(field: "interval", reason: "\(error)")
            }
        }
    }
}

extension Beryl_Ipc_V1_LabLink {
    /// A link as the lab sees it: its security as attd last said, its timing as the controller last reported.
    public init(_ link: ConnectionBook.Link, security: LabSecurity?, timing: LinkTiming?) {
        self.init()
        handle = UInt32(link.handle)
        if let security { self.security = security.wire }
        peer = link.address.description
        central = link.isCentral
        if let timing {
            interval = UInt32(timing.interval)
            latency = UInt32(timing.latency)
            supervisionTimeout = UInt32(timing.supervisionTimeout)
        }
    }
}

extension Beryl_Ipc_V1_LabScanReport {
    /// Every report the controller gives, as it gave it (the lab does its own merging).
    public init(_ report: AdvertisingReport) {
        self.init()
        eventType = UInt32(report.kind.rawValue)
        address = report.address.description
        rssi = Int32(report.rssi)
        data = Data(report.data)
    }
}

/// attd's pairing and encryption events, as the lab session takes them (before it knows whether the link is the lab's).
public enum LabSecurityEvent: Equatable, Sendable {
    case prompt(handle: UInt16, Beryl_Ipc_V1_LabPairingPrompt)
    /// `bondIdentity`: the identity a bond was made under, which a factory reset takes back.
    case pairingFinished(handle: UInt16, Result<LabSecurity, LabPairingFailure>, bondIdentity: String?)
    case securityChanged(handle: UInt16, status: UInt8, encrypted: Bool, authenticated: Bool, bonded: Bool)

    /// Nil for attd's other events.
    public init?(_ event: Beryl_Ipc_V1_AttEvent.OneOf_Kind) {
        switch event {
        case .pairingPrompt(let prompt):
            self = .prompt(handle: UInt16(truncatingIfNeeded: prompt.connectionHandle), .with {
                $0.handle = prompt.connectionHandle
                $0.kind = prompt.kind
                $0.number = prompt.number
            })
        case .pairingFinished(let finished):
            let result: Result<LabSecurity, LabPairingFailure> = finished.success ? .success(LabSecurity(finished.result))
                : .failure(LabPairingFailure(reason: UInt8(truncatingIfNeeded: finished.reason), remote: finished.remote))
            let bonded = finished.success && finished.result.bonded
            self = .pairingFinished(handle: UInt16(truncatingIfNeeded: finished.connectionHandle), result,
                                    bondIdentity: bonded ? (finished.result.identity.isEmpty ? finished.peer : finished.result.identity) : nil)
        case .securityChanged(let changed):
            self = .securityChanged(handle: UInt16(truncatingIfNeeded: changed.connectionHandle), status: UInt8(truncatingIfNeeded: changed.status),
                                    encrypted: changed.encrypted, authenticated: changed.authenticated, bonded: changed.bonded)
        default:
            return nil
        }
    }

    public var handle: UInt16 {
        switch self {
        case .prompt(let handle, _), .pairingFinished(let handle, _, _), .securityChanged(let handle, _, _, _, _): handle
        }
    }
}

extension LabRefusal {
    /// The IPC code and field the lab hears this refusal with.
    public var wire: (code: IPCErrorCode, field: String) {
        switch self {
        case .notLabSession, .notGranted: (.permissionDenied, "")
        case .appSessionCannotBecomeLab: (.invalidArgument, "lab_open")
        case .anotherLabOpen, .resetUnderWay, .connect(.attemptUnderWay): (.busy, "")
        case .connect(.linkExists): (.alreadyExists, "address")
        case .peripheralStoreUnusable, .recordUnreadable: (.internal, "")
        case .noLink, .noLabLink: (.notFound, "handle")
        case .resetFailed, .attdNotAttached: (.notReady, "")
        case .attemptCancelled, .attemptEndedByReset, .reopened, .labClosed: (.cancelled, "")
        }
    }
}

extension WireFailure {
    public init(_ error: LabFieldError) { self.init(.invalidArgument, "\(error)", field: error.field) }
}

extension Beryl_Ipc_V1_LabEvent {
    /// `link`: the lab's view of a link the book still has; nil when the event names one it no longer has.
    public init?(_ event: LabEvent, link: (UInt16) -> Beryl_Ipc_V1_LabLink?) {
        self.init()
        switch event {
        case .linkUp(let handle):
            guard let link = link(handle) else { return nil }
            linkUp = link
        case .linkUpdated(let handle):
            guard let link = link(handle) else { return nil }
            linkUpdated = link
        case .linkDown(let handle, let reason): linkDown = .with { $0.handle = UInt32(handle); $0.reason = UInt32(reason) }
        case .connectFailed(let status): connectFailed = UInt32(status)
        case .security(let handle, let outcome): security = outcome.wire(handle: handle)
        }
    }
}

extension LabRecord {
    /// Whether attd's answer to removing a bond the lab made takes it off the record: removed, gone already, or never
    /// a bond attd could hold. Any other failure (attd away, refusing) keeps it, for the next reset to take back.
    public static func bondGone(after answer: Result<Response, IPCClientError>) -> Bool {
        switch answer {
        case .success, .failure(.remote(.notFound, _, _, _)), .failure(.remote(.invalidArgument, _, _, _)): true
        case .failure: false
        }
    }
}
