import BerylManager
import BerylWire

// What attd hears from remote centrals and of pairing, as the events of the app that answers: attd names links by
// connection handle and knows no managers; an app hears a central or peer by identifier, through its manager.

extension Beryl_Ipc_V1_ManagerEvent {
    /// A remote central's subscription as the value's owner hears it (a disconnected subscriber's as unsubscribing).
    public init(subscription: PreservedState.Subscription, manager: UInt32) {
        self.init()
        self.subscription = .with {
            $0.manager = manager
            $0.central = subscription.central
            $0.valueHandle = UInt32(subscription.valueHandle)
            $0.notify = subscription.notify
            $0.indicate = subscription.indicate
            $0.maximumUpdateLength = UInt32(subscription.maximumUpdateLength)
        }
    }

    /// A pairing prompt or result on a link, for an app that hears that link's pairing (`peer`: the link's
    /// identifier); nil for attd's other events.
    public init?(pairing event: Beryl_Ipc_V1_AttEvent.OneOf_Kind, peer: String) {
        self.init()
        switch event {
        case .pairingPrompt(let prompt):
            pairingPrompt = .with { $0.kind = prompt.kind; $0.number = prompt.number; $0.address = prompt.peer; $0.peer = peer }
        case .pairingFinished(let finished):
            pairingFinished = .with {
                $0.success = finished.success
                $0.reason = finished.reason
                $0.bonded = finished.result.bonded
                $0.authenticated = finished.result.authenticated
                $0.secureConnections = finished.result.secureConnections
                $0.identity = finished.result.identity
                $0.address = finished.peer
                $0.remote = finished.remote
                $0.peer = peer
            }
        default:
            return nil
        }
    }
}

extension Beryl_Ipc_V1_AttEvent.OneOf_Kind {
    /// The link a pairing event is on; nil for attd's other events.
    public var pairingLink: UInt16? {
        switch self {
        case .pairingPrompt(let prompt): UInt16(truncatingIfNeeded: prompt.connectionHandle)
        case .pairingFinished(let finished): UInt16(truncatingIfNeeded: finished.connectionHandle)
        default: nil
        }
    }
}

extension ReportedSubscription {
    /// attd's report; nil for a value handle no attribute can have.
    public init?(_ change: Beryl_Ipc_V1_SubscriptionChanged) {
        guard let valueHandle = UInt16(exactly: change.valueHandle) else { return nil }
        self.init(link: UInt16(truncatingIfNeeded: change.connectionHandle), valueHandle: valueHandle, notify: change.notify, indicate: change.indicate)
    }
}
