import BerylWire
import Dispatch
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// What a central and a peripheral manager both are: one session with managerd for an app, its state, its
/// delegate and pairing delegate (held weakly, as Core Bluetooth does), the queue their callbacks go on, and where
/// API misuse is reported. A stack that is missing or refusing is a state, not an error: the session keeps trying,
/// and the manager hears poweredOn (or what the stack says) once it is there.
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
        let welcome: @Sendable (ManagerState, Beryl_Ipc_V1_PreservedState?, _ again: Again?) -> Void
    }

    /// How a Welcome after managerd restarted found the app: `resumed` when the data channel the app kept was adopted
    /// (its managers lose nothing and hear nothing); otherwise the managers reset, as after bluetoothd restarts.
    struct Again: Sendable, Equatable {
        var resumed: Bool
    }
    private let greeting = Mutex<Greeting?>(nil)
    private let ended = Atomic<Bool>(false)
    /// managerd answered a Hello once: later ones are said again after it restarted.
    private let welcomed = Atomic<Bool>(false)
    let delegateQueue: DelegateQueue
    let appID: String
    let managerID: UInt32 = 1
    let misuse = MisuseReporter()
    private let relay: EventRelay
    let delegateSlot: DelegateSlot
    let pairingSlot = DelegateSlot(nil)
    private struct State {
        var state: ManagerState = .unknown
        var reportedState: ManagerState = .unknown
        var reason: String?
    }
    private let shared = Mutex(State())
    /// Why the first connection failed, until `start` reports it.
    private let openFailure: BerylError?
    /// The app's data channel to attd, with the session whose Welcome passed it (it ends with that session).
    private struct DataPlane: Sendable {
        let channel: Channel
        /// The session it goes with: a new one once a restarted managerd adopted it (or while it is asked to).
        var session: Channel
        /// What the app presents to a restarted managerd to keep it.
        let token: Data
    }
    private let data = Mutex<DataPlane?>(nil)
    /// Whether attd last said the data channel's grant is live (the app in the foreground); assumed until told.
    private let dataLive = Atomic<Bool>(true)
    /// Remote centrals' requests that came on the data channel, answered there (true: a read), by id.
    private let dataRequests = Mutex<[UInt64: Bool]>([:])

    /// - Parameters:
    ///   - socketPath: managerd's socket; `$BERYL_RUNTIME_DIR/managerd.sock` (or /run/beryl) by default.
    ///   - appID: the app's identifier (an app manifest's id, for background modes and restoration); by default
    ///     `$BERYL_APP_ID`, which managerd sets when it launches the app.
    init(label: String, delegate: AnyObject?, queue: DispatchQueue?, appID: String?, socketPath: String?) {
        delegateQueue = DelegateQueue(queue ?? .main)
        self.appID = appID ?? LaunchOptions.current.appID ?? ""
        let relay = EventRelay()
        self.relay = relay
        self.socketPath = socketPath
        self.label = label
        delegateSlot = DelegateSlot(delegate)
        do {
            current = Mutex(try Channel(socketPath: socketPath, label: label, relay: relay))
            openFailure = nil
        } catch {
            current = Mutex(Channel(disconnected: label))
            openFailure = error
        }
    }

    deinit {
        ended.store(true, ordering: .relaxed)
        channel.close()
        data.withLock { $0 }?.channel.close()
    }

    /// The data channel to send an app's values on now: nil without one, when it is not the current session's, or
    /// while attd says its grant is revoked (the values then go through managerd).
    var liveDataChannel: Channel? {
        guard dataLive.load(ordering: .relaxed), let plane = data.withLock({ $0 }), plane.session === channel else { return nil }
        return plane.channel
    }

    /// The data channel of the current session, live or not (a request sent on it while it was live is answered there).
    var currentDataChannel: Channel? {
        guard let plane = data.withLock({ $0 }), plane.session === channel else { return nil }
        return plane.channel
    }

    /// The app's answer to a remote central's request that came on the data channel: sent there (attd takes it even
    /// after the grant was revoked). False when the request came through managerd, which then takes the answer.
    func answerOnDataChannel(_ id: UInt64, error: UInt8, value: Data?) -> Bool {
        guard let isRead = dataRequests.withLock({ $0.removeValue(forKey: id) }) else { return false }
        // The channel went with attd, and the request with it: nothing is waiting for this answer.
        guard let data = currentDataChannel else { return true }
        data.wireRequests([(.with {
            if isRead {
                $0.att.answerRead = .with {
                    $0.id = id
                    $0.error = UInt32(error)
                    $0.startsAtOffset = true
                    if let value { $0.value = value }
                }
            } else {
                $0.att.answerWrite = .with { $0.id = id; $0.error = UInt32(error) }
            }
        }, { [misuse] outcome in
            if case .failure(let error) = outcome { misuse.report(BerylError(error)) }
        })])
        return true
    }

    /// attd refused a value on the data channel as outside its grant or revoked: managerd carries the app's values
    /// until attd says the grant is live again.
    func dataGrantRefused() { dataLive.store(false, ordering: .relaxed) }

    private func adopt(dataChannel descriptor: Int32, token: Data, of session: Channel) {
        dataRequests.withLock { $0.removeAll() }
        let plane = DataPlane(channel: Channel(dataChannel: descriptor, queue: session.queue, label: label, onEvent: { [weak self] in self?.dataEvent($0) },
                                               onClose: { [weak self] _ in self?.dataChannelClosed(descriptor) }), session: session, token: token)
        dataLive.store(true, ordering: .relaxed)
        data.withLock { $0 }?.channel.close()
        data.withLock { $0 = plane }
    }

    private func dataChannelClosed(_ descriptor: Int32) {
        let session: Channel? = data.withLock { plane in
            guard let closed = plane, closed.channel.descriptor == descriptor else { return nil }
            plane = nil
            return closed.session
        }
        // attd went (its restart closes every channel) while managerd stays: the session asks for a new one.
        if let session { renewDataChannel(of: session, after: .milliseconds(100)) }
    }

    private func renewDataChannel(of session: Channel, after delay: Duration) {
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(Int(delay / .milliseconds(1)))) { [weak self] in
            guard let self, !self.ended.load(ordering: .relaxed), session === self.channel else { return }
            session.renewDataChannel { [weak self] descriptor, token, retry in
                guard let self, session === self.channel else {
                    if let descriptor { close(descriptor) }
                    return
                }
                if let descriptor { return self.adopt(dataChannel: descriptor, token: token, of: session) }
                if retry { self.renewDataChannel(of: session, after: min(delay * 2, .seconds(1))) }
            }
        }
    }

    /// What attd sends the app's data channel, handled as the same news from managerd is.
    private func dataEvent(_ event: Event) {
        switch event.att.kind {
        case .dataGrantChanged(let change)?:
            dataLive.store(change.live, ordering: .relaxed)
        case .readyToUpdate(let ready)?:
            relay.deliver(.with { $0.manager.readyToUpdate.count = ready.count })
        case .readRequested(let read)?:
            dataRequests.withLock { $0[read.id] = true }
            relay.deliver(.with { $0.manager = .init(read, manager: managerID, central: read.central, maximumUpdateLength: read.maximumUpdateLength) })
        case .writeRequested(let write)?:
            if write.withResponse { dataRequests.withLock { $0[write.id] = false } }
            relay.deliver(.with { $0.manager = .init(write, manager: managerID, central: write.central, maximumUpdateLength: write.maximumUpdateLength) })
        case .gattNotification(let notification)?:
            guard let heard = Beryl_Ipc_V1_ManagerEvent(.gattNotification(notification), peripheral: notification.peripheral) else { return }
            relay.deliver(.with { $0.manager = heard })
        case .gattWriteReady(let ready)?:
            guard let heard = Beryl_Ipc_V1_ManagerEvent(.gattWriteReady(ready), peripheral: ready.peripheral) else { return }
            relay.deliver(.with { $0.manager = heard })
        default:
            break
        }
    }

    /// Binds the manager's event handler and says Hello; `welcome` gets the first state and, for a restored manager,
    /// what managerd preserved (a refusal is reported as misuse and reads as unauthorized or unsupported).
    /// `welcome`'s last argument is true when it answers a Hello said again after managerd restarted. With no stack
    /// to talk to, `welcome` hears poweredOff (unauthorized when the socket refused this user) and the session keeps
    /// trying.
    func start(restoreIdentifier: String?, role: Beryl_Ipc_V1_ManagerRole, events: @escaping @Sendable (Event) -> Void,
               welcome: @escaping @Sendable (ManagerState, Beryl_Ipc_V1_PreservedState?, _ again: Again?) -> Void) {
        relay.bind { [weak self] event in
            events(event)
            if event.manager.wake != 0 { self?.reportIdle(after: event.manager.wake) }
        }
        let greeting = Greeting(restoreIdentifier: restoreIdentifier, role: role, welcome: welcome)
        self.greeting.withLock { $0 = greeting }
        if let openFailure {
            let state: ManagerState = if case .permissionDenied = openFailure { .unauthorized } else { .poweredOff }
            setReason(openFailure.description)
            channel.queue.async { welcome(state, nil, nil) }
            reconnect(after: .milliseconds(100))
        } else {
            greet(greeting, on: channel)
        }
    }

    private func greet(_ greeting: Greeting, on channel: Channel, resuming token: Data? = nil) {
        channel.hello(appID: appID, restoreIdentifier: greeting.restoreIdentifier, role: greeting.role, resuming: token) { [misuse, weak self] state, restored, wake, data, error in
            guard let self else {
                if let descriptor = data.descriptor { close(descriptor) }
                return
            }
            // A Hello said again that never reached a managerd (the dying one took the connection, or none listens
            // yet): this session's closing reconnects, and the kept data channel is still the app's to present.
            if token != nil, case .unavailable? = error { return }
            if let descriptor = data.descriptor {
                self.adopt(dataChannel: descriptor, token: data.token, of: channel)
            } else if !data.resumed {
                // The channel the Hello named was not adopted (attd closed it, or restarted): it is no longer the app's.
                self.dropDataChannel(of: channel)
            }
            if let error {
                misuse.report(error)
                self.setReason(error.description)
            } else {
                self.setReason(nil)
            }
            let again = self.welcomed.exchange(true, ordering: .relaxed) ? Again(resumed: data.resumed) : nil
            greeting.welcome(state, restored, again)
            if wake != 0 { self.reportIdle(after: wake) }
        }
    }

    /// managerd went. With a data channel attd still keeps, the app carries on: its values go on the channel while
    /// managerd is away, and the new session's Hello asks managerd to adopt the channel, so that the app's managers
    /// lose nothing and hear nothing (true). Without one they reset, as Core Bluetooth's do while bluetoothd restarts
    /// (false). Either way a new session is opened as soon as managerd is back.
    func managerdLost() -> Bool {
        let resuming = data.withLock { $0 }.map { $0.channel.isOpen } ?? false
        reconnect()
        return resuming
    }

    private func dropDataChannel(of session: Channel) {
        let dropped: DataPlane? = data.withLock { plane in
            guard let kept = plane, kept.session === session else { return nil }
            plane = nil
            return kept
        }
        dropped?.channel.close()
    }

    /// An app woken in the background is done, as iOS sees it, once the delegate calls its wake led to have returned
    /// and its queue has nothing before them: then managerd hears that this session is idle, so that the app owes the
    /// stack no call of its own to avoid being ended at its wake budget. The delegate calls for the event were queued
    /// before this, on the same serial queue.
    private func reportIdle(after wake: UInt64) {
        delegateQueue.async { [weak self] in
            self?.channel.request(.manager { $0.appIdle.wake = wake })
        }
    }

    /// managerd went away (a crash, or a restart by its supervisor) or was not there yet: a new session is opened as
    /// soon as it is back, retrying with backoff, and the Hello said; a manager with a restore identifier gets back
    /// what managerd preserved for it. Until then the manager is resetting, as a Core Bluetooth manager is while
    /// bluetoothd restarts (or poweredOff, for a stack that was never there).
    func reconnect(after delay: Duration = .zero) {
        // Each attempt is scheduled, not slept for, and holds the manager only while it tries: a manager released
        // meanwhile ends the attempts.
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(Int(delay / .milliseconds(1)))) { [weak self] in
            guard let self, !self.ended.load(ordering: .relaxed) else { return }
            let channel: Channel
            do {
                channel = try Channel(socketPath: self.socketPath, label: self.label, relay: self.relay)
            } catch {
                self.setReason("\(error)")
                return self.reconnect(after: min(max(delay * 2, .milliseconds(50)), .seconds(1)))
            }
            // Hello first, then the channel is the app's, in one step under the channel's lock: a request another
            // thread sends meanwhile waits and follows the Hello on the socket (refused otherwise: a manager's work
            // needs a Hello), and the Welcome, answered on the new channel's queue, finds the new channel the app's
            // (between the two, its handler re-added the app's services on the closed channel, and they were lost).
            let greeting = self.greeting.withLock { $0 }
            // The data channel kept through managerd's restart goes with the new session while managerd is asked to
            // adopt it: the app's values keep going on it, never through a managerd that does not know them yet.
            let kept: Data? = self.data.withLock { plane in
                guard let old = plane, old.channel.isOpen else { return nil }
                plane?.session = channel
                return old.token
            }
            self.current.withLock { current in
                if let greeting { self.greet(greeting, on: channel, resuming: kept) }
                current = channel
            }
            Self.afterReconnecting.withLock { $0 }?()
        }
    }

    /// Runs on the reconnecting thread once a new channel is the app's: a seam for tests of what the Welcome finds.
    static let afterReconnecting = Mutex<(@Sendable () -> Void)?>(nil)

    /// The state as the app has been told it.
    var reportedState: ManagerState { shared.withLock { $0.reportedState } }
    /// Why the state is not poweredOn, when the stack said or the library saw why.
    var stateReason: String? { shared.withLock { $0.reason } }
    private func setReason(_ reason: String?) { shared.withLock { $0.reason = reason } }

    /// Records a new state and, when it changed, tells the delegate through `callback`. The state the app reads
    /// changes on the delegate queue just before the callback (as Core Bluetooth's does), so a callback reads the
    /// state it reports: resetting then poweredOn behind a busy queue is heard as both, not as poweredOn twice (which
    /// made apps add their services twice). With no delegate there is no callback to keep in step with.
    func changeState<Delegate>(_ newState: ManagerState, _ kind: Delegate.Type, callback: sending @escaping (Delegate) -> Void) {
        let changed = shared.withLock { state in
            defer { state.state = newState }
            return state.state != newState
        }
        guard changed else { return }
        guard delegateSlot.object is Delegate else { return report(newState) }
        // Reported even when the delegate is gone by then, or nothing would report it.
        delegateSlot.call(kind, on: delegateQueue, first: { [self] in report(newState) }, callback)
    }

    private func report(_ reported: ManagerState) { shared.withLock { $0.reportedState = reported } }

    /// Calls the manager's delegate on its queue.
    func notify<Delegate>(_ kind: Delegate.Type, _ body: sending @escaping (Delegate) -> Void) {
        delegateSlot.call(kind, on: delegateQueue, body)
    }
}

/// A manager standing on a session: what both managers reach through it.
protocol SessionBacked {
    var session: ManagerSession { get }
}

extension SessionBacked {
    var channel: Channel { session.channel }
    var delegateQueue: DelegateQueue { session.delegateQueue }
    var managerID: UInt32 { session.managerID }
    var misuse: MisuseReporter { session.misuse }
    var appID: String { session.appID }
}
