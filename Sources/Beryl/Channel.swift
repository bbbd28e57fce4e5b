import BerylWire
import Dispatch
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// One session with managerd: a socket, a reader thread, and a serial queue on which every response and event is
/// handled in order. Requests may be sent from any thread.
final class Channel: Sendable {
    typealias Completion = @Sendable (Result<Response, BerylError>) -> Void
    /// An answer as the daemon typed it (a data channel's refusals are told apart by their codes and grant reasons).
    typealias WireCompletion = @Sendable (Result<Response, IPCClientError>) -> Void

    let queue: DispatchQueue
    private let fd: Int32
    /// The socket, which names a data channel for its session (closed only when the channel is released).
    var descriptor: Int32 { fd }
    private struct State {
        var pending = PendingRequests<WireCompletion>()
        var closed = false
        /// The data channel a Welcome's datagram carried, until the Welcome's handler takes it.
        var dataDescriptor: Int32?
    }
    private let state = Mutex(State())
    private let onEvent: @Sendable (Event) -> Void
    private let onClose: @Sendable (String) -> Void

    /// `$BERYL_RUNTIME_DIR/managerd.sock`, else /run/beryl/managerd.sock.
    static var defaultSocketPath: String {
        (ProcessInfo.processInfo.environment["BERYL_RUNTIME_DIR"] ?? "/run/beryl") + "/managerd.sock"
    }

    /// A manager's session: its events (an empty Event once the session is gone) go to whatever `relay` is bound to.
    convenience init(socketPath: String?, label: String, relay: EventRelay) throws(BerylError) {
        try self.init(path: socketPath ?? Channel.defaultSocketPath, label: label,
                      onEvent: { relay.deliver($0) }, onClose: { _ in relay.deliver(Event()) })
    }

    /// Says Hello for the app; the answer carries the manager's first state (unauthorized when managerd refuses the
    /// app id, unsupported for any other refusal), for a restored manager what managerd preserved, and the app's data
    /// channel to attd when managerd passed one (its descriptor, now the caller's).
    /// What a Welcome says about the app's data channel: the descriptor of a new one (nil: none, or the old one kept),
    /// its token, and whether the channel the Hello named was adopted (kept, with everything the app had).
    struct WelcomedDataChannel: Sendable {
        var descriptor: Int32?
        var token: Data
        var resumed: Bool
    }

    func hello(appID: String, restoreIdentifier: String?, role: Beryl_Ipc_V1_ManagerRole, resuming token: Data?,
               then: @escaping @Sendable (ManagerState, Beryl_Ipc_V1_PreservedState?, _ wake: UInt64, WelcomedDataChannel, BerylError?) -> Void) {
        request(.manager {
            $0.hello.appID = appID
            $0.hello.restoreIdentifier = restoreIdentifier ?? ""
            $0.hello.role = role
            $0.hello.wantsDataChannel = true
            if let token { $0.hello.resumeDataChannel = token }
        }) { [self] result in
            let descriptor = state.withLock { state in
                defer { state.dataDescriptor = nil }
                return state.dataDescriptor
            }
            switch result {
            case .success(let response):
                let welcome = response.manager.welcome
                let dataChannel = welcome.dataChannel ? descriptor : nil
                if let descriptor, dataChannel == nil { Glibc.close(descriptor) }
                let data = WelcomedDataChannel(descriptor: dataChannel, token: welcome.dataChannelToken, resumed: welcome.dataChannelResumed)
                then(ManagerState(welcome.state), welcome.wasRestored ? welcome.restored : nil, welcome.wake, data, nil)
            case .failure(let error):
                if let descriptor { Glibc.close(descriptor) }
                let none = WelcomedDataChannel(descriptor: nil, token: Data(), resumed: false)
                if case .permissionDenied = error { then(.unauthorized, nil, 0, none, error) } else { then(.unsupported, nil, 0, none, error) }
            }
        }
    }

    init(path: String, label: String, onEvent: @escaping @Sendable (Event) -> Void, onClose: @escaping @Sendable (String) -> Void) throws(BerylError) {
        do {
            fd = try SeqPacketSocket.connect(path: path)
        } catch {
            // A socket this user may not open is a refusal, as Core Bluetooth's unauthorized; anything else is a stack
            // that is not there (yet).
            if case .system(_, _, let code) = error, code == EACCES || code == EPERM { throw .permissionDenied("\(path): \(error)") }
            throw .unavailable("\(path): \(error)")
        }
        queue = DispatchQueue(label: "beryl.\(label)")
        self.onEvent = onEvent
        self.onClose = onClose
        let reader = Thread { [self] in self.readLoop() }
        reader.name = "beryl.\(label).reader"
        reader.start()
    }

    /// A new data channel for the session (after attd restarted): `then` gets its descriptor, or nil when managerd gave
    /// none (attd away, or a managerd that does not know the request).
    func renewDataChannel(then: @escaping @Sendable (_ descriptor: Int32?, _ token: Data, _ retry: Bool) -> Void) {
        wireRequests([(.manager { $0.renewDataChannel = .init() }, { [self] result in
            let descriptor = state.withLock { state in
                defer { state.dataDescriptor = nil }
                return state.dataDescriptor
            }
            switch result {
            case .success(let response): then(descriptor, response.manager.dataChannelRenewed.token, false)
            case .failure(let error):
                if let descriptor { Glibc.close(descriptor) }
                // Not ready: attd is coming back. Anything else (an older managerd, a closed session) is final.
                if case .remote(.notReady, _, _, _) = error { then(nil, Data(), true) } else { then(nil, Data(), false) }
            }
        })])
    }

    /// An app's data channel to attd (the descriptor a Welcome passed): its answers and events are handled on
    /// `queue`, the manager's session's, so that they keep their order with managerd's.
    init(dataChannel descriptor: Int32, queue: DispatchQueue, label: String, onEvent: @escaping @Sendable (Event) -> Void,
         onClose: @escaping @Sendable (String) -> Void) {
        fd = descriptor
        // The pair was made non-blocking for attd's loop; this end is read by a thread that blocks in poll.
        self.queue = queue
        self.onEvent = onEvent
        self.onClose = onClose
        let reader = Thread { [self] in self.readLoop() }
        reader.name = "beryl.\(label).data"
        reader.start()
    }

    /// A session that never opened: every request fails as unavailable, on its own queue as an answer would come.
    init(disconnected label: String) {
        fd = -1
        queue = DispatchQueue(label: "beryl.\(label)")
        onEvent = { _ in }
        onClose = { _ in }
        state.withLock { $0.closed = true }
    }

    deinit { if fd >= 0 { Glibc.close(fd) } }

    /// Whether the socket still carries anything (neither end has closed it).
    var isOpen: Bool { !state.withLock { $0.closed } }

    func close() {
        let wasOpen = state.withLock { state in
            defer { state.closed = true }
            return !state.closed
        }
        if wasOpen, fd >= 0 { shutdown(fd, Int32(SHUT_RDWR)) }
    }

    func request(_ request: Request, completion: @escaping Completion = { _ in }) {
        requests([(request, completion)])
    }

    /// Several requests in one datagram (a batch, in order), each answered on its own.
    func requests(_ requests: [(request: Request, completion: Completion)]) {
        wireRequests(requests.map { request in (request.request, { request.completion($0.mapError(BerylError.init)) }) })
    }

    /// As `requests`, answered with the daemon's typed error as it came.
    func wireRequests(_ requests: [(request: Request, completion: WireCompletion)]) {
        let ids: [UInt64]? = state.withLock { state in
            guard !state.closed else { return nil }
            return requests.map { state.pending.add($0.completion) }
        }
        guard let ids else {
            return queue.async { for request in requests { request.completion(.failure(.closed)) } }
        }
        var batch = EnvelopeBatch(capacity: IPCLimits.standard.maxMessageBytes)
        var sent = true
        for (id, request) in zip(ids, requests) {
            var envelope = Envelope.request(request.request, id: id)
            envelope.acceptsBatches = true
            let bytes = envelope.encoded()
            if !batch.fits(bytes) { sent = sent && SeqPacketSocket.send(fd, batch.take()) == .sent }
            batch.append(bytes)
        }
        sent = sent && SeqPacketSocket.send(fd, batch.take()) == .sent
        guard sent else {
            let failed = state.withLock { state in ids.compactMap { state.pending.cancel($0) } }
            queue.async { for completion in failed { completion(.failure(.closed)) } }
            return
        }
    }

    /// A request answered on the calling thread (Core Bluetooth's synchronous retrieve calls). Never call it on `queue`.
    func call(_ request: Request, timeout: Duration = .seconds(10)) -> Result<Response, BerylError> {
        let box = Mutex<Result<Response, BerylError>?>(nil)
        let done = DispatchSemaphore(value: 0)
        self.request(request) { result in
            box.withLock { $0 = result }
            done.signal()
        }
        let seconds = Double(timeout.components.seconds)
        guard done.wait(timeout: .now() + seconds) == .success else { return .failure(.failed("managerd did not answer in time")) }
        return box.withLock { $0 } ?? .failure(.failed("no answer"))
    }

    private func readLoop() {
        SeqPacketSocket.readDatagrams(fd) { dispatch($0, passed: $1) }
        finish("the stack closed the session")
    }

    /// A datagram's answers and events, handed to the session's queue in one hop, in order. A descriptor it carried is
    /// kept for a Welcome's handler (a data channel), and closed when the datagram holds no Welcome.
    private func dispatch(_ envelopes: [Envelope], passed descriptor: Int32?) {
        let work: [@Sendable () -> Void] = state.withLock { state in
            if let descriptor {
                if let earlier = state.dataDescriptor { Glibc.close(earlier) }
                // managerd passes a data channel with the answer to a Hello or a RenewDataChannel, alone in its datagram.
                let answers = envelopes.contains { if case .response? = $0.body { true } else { false } }
                state.dataDescriptor = answers ? descriptor : nil
                if !answers { Glibc.close(descriptor) }
            }
            return envelopes.compactMap { envelope in
                switch envelope.body {
                case .response?:
                    guard let (completion, outcome) = state.pending.answer(envelope) else { return nil }
                    return { completion(outcome) }
                case .event(let event)?:
                    return { self.onEvent(event) }
                default:
                    return nil
                }
            }
        }
        guard !work.isEmpty else { return }
        queue.async { for item in work { item() } }
    }

    private func finish(_ reason: String) {
        let pending = state.withLock { state -> [WireCompletion] in
            state.closed = true
            if let descriptor = state.dataDescriptor { Glibc.close(descriptor) }
            state.dataDescriptor = nil
            return state.pending.removeAll()
        }
        queue.async {
            for completion in pending { completion(.failure(.closed)) }
            self.onClose(reason)
        }
    }
}

/// Where a manager reports Core Bluetooth's API misuse that has no delegate callback (it logs them, as iOS does,
/// unless the app sets its own handler).
final class MisuseReporter: Sendable {
    private let handler = Mutex<Handler<BerylError>?>(nil)
    var current: (@Sendable (BerylError) -> Void)? {
        get { handler.withLock { $0 }?.body }
        set { handler.withLock { $0 = newValue.map(Handler.init) } }
    }
    func report(_ error: BerylError) {
        if let handler = current { return handler(error) }
        try? FileHandle.standardError.write(contentsOf: Data("Beryl: \(error)\n".utf8))
    }
}

/// Lets a manager receive its channel's events once it is fully initialised (the channel is made first).
final class EventRelay: Sendable {
    private let target = Mutex<Handler<Event>?>(nil)
    func bind(_ handler: @escaping @Sendable (Event) -> Void) { target.withLock { $0 = Handler(body: handler) } }
    func deliver(_ event: Event) { target.withLock { $0 }?.body(event) }
}

/// A closure kept in a Mutex inside a struct: a bare closure (or an optional one) as the Mutex's value is reabstracted
/// each time `withLock` hands it out and back, and the stored closure grows by two thunks per access (Swift 6.3, -O
/// and -Onone alike) until calling it overflows the stack — after some tens of thousands of events.
struct Handler<Argument>: Sendable {
    let body: @Sendable (Argument) -> Void
}
