import BerylIPC
import Dispatch
import Synchronization

/// What a central and a peripheral manager both are: one session with managerd for an app, its state, its
/// delegate and pairing delegate (held weakly, as Core Bluetooth does), the queue their callbacks go on, and where
/// API misuse is reported.
final class ManagerSession: Sendable {
    let channel: Channel
    let delegateQueue: DispatchQueue
    let appID: String
    let managerID: UInt32 = 1
    let misuse = MisuseReporter()
    private let relay: EventRelay
    private struct State {
        var state: ManagerState = .unknown
        var delegate = WeakBox<AnyObject & Sendable>()
        var pairingDelegate = WeakBox<AnyObject & Sendable>()
    }
    private let shared = Mutex(State())

    /// - Parameters:
    ///   - socketPath: managerd's socket; `$BERYL_RUNTIME_DIR/managerd.sock` (or /run/beryl) by default.
    ///   - appID: the app's identifier (an app manifest's id, for background modes and restoration); by default
    ///     `$BERYL_APP_ID`, which managerd sets when it launches the app.
    init(label: String, delegate: (AnyObject & Sendable)?, queue: DispatchQueue?, appID: String?, socketPath: String?) throws(BerylError) {
        delegateQueue = queue ?? .main
        self.appID = appID ?? LaunchOptions.current.appID ?? ""
        let relay = EventRelay()
        self.relay = relay
        channel = try Channel(socketPath: socketPath, label: label, relay: relay)
        shared.withLock { $0.delegate.value = delegate }
    }

    deinit { channel.close() }

    /// Binds the manager's event handler and says Hello; `welcome` gets the first state and, for a restored manager,
    /// what managerd preserved (a refusal is reported as misuse and reads as unauthorized or unsupported).
    func start(restoreIdentifier: String?, role: Beryl_Ipc_V1_ManagerRole, events: @escaping @Sendable (Event) -> Void,
               welcome: @escaping @Sendable (ManagerState, Beryl_Ipc_V1_PreservedState?) -> Void) {
        relay.bind(events)
        channel.hello(appID: appID, restoreIdentifier: restoreIdentifier, role: role) { [misuse] state, restored, error in
            if let error { misuse.report(error) }
            welcome(state, restored)
        }
    }

    var state: ManagerState { shared.withLock { $0.state } }

    /// Records a new state; true when it changed (and the delegate is to hear of it).
    func setState(_ newState: ManagerState) -> Bool {
        shared.withLock { state in
            defer { state.state = newState }
            return state.state != newState
        }
    }

    var delegate: (AnyObject & Sendable)? {
        get { shared.withLock { $0.delegate.value } }
        set { shared.withLock { $0.delegate.value = newValue } }
    }

    var pairingDelegate: PairingDelegate? {
        get { shared.withLock { $0.pairingDelegate.value } as? PairingDelegate }
        set { shared.withLock { $0.pairingDelegate.value = newValue } }
    }
}
