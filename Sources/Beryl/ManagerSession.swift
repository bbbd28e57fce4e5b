import BerylIPC
import Dispatch
import Synchronization

/// What a central and a peripheral manager both are: one session with managerd for an app, its state, its
/// delegate and pairing delegate (held weakly, as Core Bluetooth does), the queue their callbacks go on, and where
/// API misuse is reported.
final class ManagerSession: Sendable {
    private let current: Mutex<Channel>
    /// The session with managerd now: a new one after managerd restarted.
    var channel: Channel { current.withLock { $0 } }
    private let socketPath: String?
    private let label: String
    /// What `start` said, said again to a restarted managerd.
    private struct Greeting: Sendable {
        let restoreIdentifier: String?
        let role: Beryl_Ipc_V1_ManagerRole
        let welcome: @Sendable (ManagerState, Beryl_Ipc_V1_PreservedState?, _ again: Bool) -> Void
    }
    private let greeting = Mutex<Greeting?>(nil)
    private let ended = Atomic<Bool>(false)
    let delegateQueue: DispatchQueue
    let appID: String
    let managerID: UInt32 = 1
    let misuse = MisuseReporter()
    private let relay: EventRelay
    private struct State {
        var state: ManagerState = .unknown
        var reportedState: ManagerState = .unknown
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
        self.socketPath = socketPath
        self.label = label
        current = Mutex(try Channel(socketPath: socketPath, label: label, relay: relay))
        shared.withLock { $0.delegate.value = delegate }
    }

    deinit {
        ended.store(true, ordering: .relaxed)
        channel.close()
    }

    /// Binds the manager's event handler and says Hello; `welcome` gets the first state and, for a restored manager,
    /// what managerd preserved (a refusal is reported as misuse and reads as unauthorized or unsupported).
    /// `welcome`'s last argument is true when it answers a Hello said again after managerd restarted.
    func start(restoreIdentifier: String?, role: Beryl_Ipc_V1_ManagerRole, events: @escaping @Sendable (Event) -> Void,
               welcome: @escaping @Sendable (ManagerState, Beryl_Ipc_V1_PreservedState?, _ again: Bool) -> Void) {
        relay.bind(events)
        let greeting = Greeting(restoreIdentifier: restoreIdentifier, role: role, welcome: welcome)
        self.greeting.withLock { $0 = greeting }
        greet(greeting, again: false)
    }

    private func greet(_ greeting: Greeting, again: Bool) {
        channel.hello(appID: appID, restoreIdentifier: greeting.restoreIdentifier, role: greeting.role) { [misuse] state, restored, error in
            if let error { misuse.report(error) }
            greeting.welcome(state, restored, again)
        }
    }

    /// managerd went away (a crash, or a restart by its supervisor): a new session is opened as soon as it is back,
    /// retrying with backoff, and the Hello said again; a manager with a restore identifier gets back what managerd
    /// preserved for it. Until then the manager is resetting, as a Core Bluetooth manager is while bluetoothd restarts.
    func reconnect(after delay: Duration = .zero) {
        // Each attempt is scheduled, not slept for, and holds the manager only while it tries: a manager released
        // meanwhile ends the attempts.
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(Int(delay / .milliseconds(1)))) { [weak self] in
            guard let self, !self.ended.load(ordering: .relaxed) else { return }
            guard let channel = try? Channel(socketPath: self.socketPath, label: self.label, relay: self.relay) else {
                return self.reconnect(after: min(max(delay * 2, .milliseconds(50)), .seconds(1)))
            }
            self.current.withLock { $0 = channel }
            if let greeting = self.greeting.withLock({ $0 }) { self.greet(greeting, again: true) }
        }
    }

    /// The state as the app has been told it.
    var reportedState: ManagerState { shared.withLock { $0.reportedState } }

    /// Records a new state and, when it changed, tells the delegate through `callback`. The state the app reads
    /// changes on the delegate queue just before the callback (as Core Bluetooth's does), so a callback reads the
    /// state it reports: resetting then poweredOn behind a busy queue is heard as both, not as poweredOn twice (which
    /// made apps add their services twice). With no delegate there is no callback to keep in step with.
    func changeState(_ newState: ManagerState, callback: @escaping @Sendable (AnyObject & Sendable) -> Void) {
        let changed = shared.withLock { state in
            defer { state.state = newState }
            return state.state != newState
        }
        guard changed else { return }
        guard let delegate else { return report(newState) }
        delegateQueue.async { [self] in
            report(newState)
            callback(delegate)
        }
    }

    private func report(_ reported: ManagerState) { shared.withLock { $0.reportedState = reported } }

    var delegate: (AnyObject & Sendable)? {
        get { shared.withLock { $0.delegate.value } }
        set { shared.withLock { $0.delegate.value = newValue } }
    }

    var pairingDelegate: PairingDelegate? {
        get { shared.withLock { $0.pairingDelegate.value } as? PairingDelegate }
        set { shared.withLock { $0.pairingDelegate.value = newValue } }
    }
}

/// A manager standing on a session: what both managers reach through it.
protocol SessionBacked {
    var session: ManagerSession { get }
}

extension SessionBacked {
    var channel: Channel { session.channel }
    var delegateQueue: DispatchQueue { session.delegateQueue }
    var managerID: UInt32 { session.managerID }
    var misuse: MisuseReporter { session.misuse }
    var appID: String { session.appID }
}
