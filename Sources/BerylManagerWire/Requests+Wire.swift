import BerylCore
import BerylManager
import BerylWire
import FoundationEssentials
import Glibc

// managerd's typed refusals as apps hear them, and what it asks of attd for them. Stateless, so each is a
// round-trip test away.

extension WireFailure {
    public init(_ refusal: LabRefusal) { self.init(refusal.wire.code, "\(refusal)", field: refusal.wire.field) }

    public init(_ refusal: HelloRefusal) {
        switch refusal {
        case .notTheAppsUser: self.init(.permissionDenied, "\(refusal)", field: "app_id")
        case .restorationNeedsManifest: self.init(.invalidArgument, "\(refusal)", field: "restore_identifier")
        case .restoreIdentifierInUse: self.init(.busy, "\(refusal)", field: "restore_identifier")
        case .alreadyGreeted, .labSession: self.init(.invalidArgument, "\(refusal)", field: "hello")
        }
    }

    public init(_ refusal: AppControlRefusal) {
        switch refusal {
        case .undeclared, .notDeclaredOrRunning: self.init(.notFound, "\(refusal)", field: "app_id")
        case .notPermitted, .notPermittedToSetState: self.init(.permissionDenied, "\(refusal)", field: "app_id")
        }
    }

    public init(_ refusal: LaunchRefusal) {
        switch refusal {
        case .noLaunchCommand: self.init(.unsupported, "\(refusal)", field: "app_id")
        case .stopping: self.init(.notReady, "\(refusal)")
        case .alreadyRunning: self.init(.alreadyExists, "\(refusal)", field: "app_id")
        }
    }

    /// CBError.peripheralNotConnected's kin: the app holds no link to the peripheral.
    public static func notConnected(_ identifier: String) -> WireFailure {
        WireFailure(.notFound, "peripheral \(identifier) is not connected for this app", field: "peripheral",
                    detail: RemoteDetail(bluetoothError: .notConnected))
    }

    /// CBError.unknownDevice: no peripheral with that identifier is known to this stack.
    public static func unknownPeripheral(_ identifier: String) -> WireFailure {
        WireFailure(.notFound, "no peripheral \(identifier) is known; scan for it or retrieve it first", field: "peripheral",
                    detail: RemoteDetail(bluetoothError: .unknownDevice))
    }

    /// A manager's request from a session that has not said Hello (or is a lab's).
    public static let helloFirst = WireFailure(.permissionDenied, "API misuse: a session says Hello before it uses a manager", field: "hello")

    public static let attdUnreachable = WireFailure(.notReady, "attd is not reachable")

    /// A handle the manager's services do not hold.
    public static func notPublished(_ handle: UInt32, field: String) -> WireFailure {
        WireFailure(.notFound, "handle \(handle) is not a value of this manager's services", field: field, detail: RemoteDetail(managerReason: .notPublished))
    }
}

extension BluetoothUUID {
    /// A request's UUID list; a refusal names the field.
    public static func list(_ strings: [String], field: String) throws(WireFailure) -> [BluetoothUUID] {
        guard let parsed = list(strings) else { throw WireFailure(.invalidArgument, "not a UUID among \(strings)", field: field) }
        return parsed
    }
}

extension ConnectionLatency {
    public init(wire latency: Beryl_Ipc_V1_ConnectionLatency) throws(WireFailure) {
        switch latency {
        case .low: self = .low
        case .medium: self = .medium
        case .high: self = .high
        case .UNRECOGNIZED(let value): throw WireFailure(.invalidArgument, "\(value) is not a connection latency", field: "latency")
        }
    }
}

extension Beryl_Ipc_V1_AttRequest {
    /// An app's updateValue, its own Notify with the links of the centrals it named (none: every one) and the app as
    /// the sender; nothing of the app's word for centrals, manager or sender kept.
    public init(update: Beryl_Ipc_V1_Notify, session: UInt64, links: [UInt16] = []) {
        self.init()
        var notify = update
        notify.connectionHandles = links.map(UInt32.init)
        notify.centrals = []
        notify.manager = 0
        notify.onBehalfOf = session
        self.notify = notify
    }

    /// attd keeps refusals and ready counts per app managerd sends for: one app's (on one link only, or everywhere) go.
    public init(forgetting session: UInt64, onLink handle: UInt16? = nil) {
        self.init()
        forgetSender = .with {
            $0.onBehalfOf = session
            if let handle {
                $0.onlyLink = true
                $0.connectionHandle = UInt32(handle)
            }
        }
    }

    /// An app's answer to a remote central's read (the value from the request's offset on, as Core Bluetooth's
    /// apps answer) or write.
    public init(answering id: UInt64, isRead: Bool, value: [UInt8], error: UInt32) {
        self.init()
        if isRead {
            answerRead = .with { $0.id = id; $0.value = Data(value); $0.error = error; $0.startsAtOffset = true }
        } else {
            answerWrite = .with { $0.id = id; $0.error = error }
        }
    }

    /// The user's answer to a pairing prompt on a link (an app's or a lab's), for attd's security manager.
    public init(pairingAnswerOn handle: UInt16, accept: Bool, passkey: UInt32) {
        self.init()
        pairingAnswer = .with { $0.connectionHandle = UInt32(handle); $0.accept = accept; $0.passkey = passkey }
    }

    /// The last app subscribed to a peripheral's value let go: its descriptor is cleared.
    public init(clearing: RemoteSubscriptions.Clearing) {
        self.init()
        gattSubscribe = .with {
            $0.connectionHandle = UInt32(clearing.value.link)
            $0.valueHandle = UInt32(clearing.value.valueHandle)
            $0.cccdHandle = UInt32(clearing.cccdHandle)
            $0.enable = false
        }
    }
}
