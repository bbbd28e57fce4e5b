import BerylCore
import BerylEventLoop
import SwiftProtobuf
#if canImport(Glibc)
import Glibc
#endif

/// A request received by a server. It is answered exactly once: by `respond`, or, if the handler
/// lets go of it unanswered, by an INTERNAL error when it is released, so no client waits forever.
public final class IncomingRequest {
    public let id: UInt64
    public let request: Request
    public private(set) weak var session: IPCSession?
    private var answered = false

    init(id: UInt64, request: Request, session: IPCSession) {
        self.id = id
        self.request = request
        self.session = session
    }

    public var isAnswered: Bool { answered }

    /// Returns false when the request was already answered; the second answer is not sent.
    @discardableResult
    public func respond(_ response: Response) -> Bool {
        guard !answered else { return false }
        answered = true
        session?.send(.response(response, to: id))
        return true
    }

    /// Answers with `descriptor` passed on the answer's datagram (SCM_RIGHTS); the descriptor is the session's to close
    /// (closed at once when the request was answered already or its session is gone).
    @discardableResult
    public func respond(_ response: Response, passing descriptor: Int32) -> Bool {
        guard !answered, let session else {
            Glibc.close(descriptor)
            return false
        }
        answered = true
        session.send(.response(response, to: id), passing: descriptor)
        return true
    }

    @discardableResult
    public func fail(_ code: IPCErrorCode, _ message: String, field: String = "", detail: RemoteDetail = RemoteDetail()) -> Bool {
        respond(.error(code, message, field: field, detail: detail))
    }

    @discardableResult
    public func fail(_ failure: WireFailure) -> Bool { fail(failure.code, failure.message, field: failure.field, detail: failure.detail) }

    /// Passes on another daemon's typed error as it came (its code, field and detail); a daemon that could not be asked
    /// at all makes this one not ready.
    @discardableResult
    public func fail(relaying error: IPCClientError, from daemon: String) -> Bool {
        guard case .remote(let code, let message, let field, let detail) = error else { return fail(.notReady, "\(daemon): \(error)") }
        return fail(code, message, field: field, detail: detail)
    }

    deinit {
        if !answered { session?.send(.response(.error(.internal, "request was dropped without an answer"), to: id)) }
    }
}

/// One connected client. Lives on the server's loop.
public final class IPCSession {
    public let id: UInt64
    public let peer: PeerCredentials
    public private(set) var isOpen = true

    let fd: Int32
    private unowned let server: IPCServer
    private struct Outgoing {
        var bytes: [UInt8]
        /// A descriptor the datagram passes (SCM_RIGHTS), closed here once sent or dropped.
        var descriptor: Int32?
    }
    private var outbound: [Outgoing] = []
    private var outboundHead = 0
    private var outboundBytes = 0
    private var readWatcher: EventRegistration?
    private var writeWatcher: EventRegistration?
    private var receiveBuffer: [UInt8] = []
    /// The peer said it takes batches (Envelope.accepts_batches): what this wake-up sends it leaves as one datagram.
    public internal(set) var acceptsBatches = false
    private lazy var batch = WakeUpBatch(loop: server.loop, capacity: server.limits.maxMessageBytes) { [unowned self] datagram in
        if isOpen { sendDatagram(datagram) }
    }

    init(id: UInt64, fd: Int32, peer: PeerCredentials, server: IPCServer) {
        self.id = id
        self.fd = fd
        self.peer = peer
        self.server = server
    }

    func start() throws(EventLoopError) {
        readWatcher = try server.loop.onReadable(fd) { [unowned self] in self.readAvailable() }
    }

    public var queuedMessages: Int { outbound.count - outboundHead }

    /// Queues the envelope; a peer that lets its queue pass the limits is dropped rather than buffered without bound.
    public func send(_ envelope: Envelope) {
        guard isOpen else { return }
        send(encoded: envelope.encoded())
    }

    /// An envelope encoded once for every session it goes to (a broadcast), rather than once per session.
    public func send(encoded bytes: [UInt8]) {
        guard isOpen else { return }
        guard acceptsBatches else { return sendDatagram(bytes) }
        batch.add(bytes)
    }

    /// What this wake-up sent so far, now.
    func flushBatch() { batch.flush() }

    /// Sends the envelope in a datagram of its own, after what this wake-up queued, with `descriptor` passed on it
    /// (SCM_RIGHTS). The session takes `descriptor`: it is closed once sent, or when the session closes first.
    public func send(_ envelope: Envelope, passing descriptor: Int32) {
        guard isOpen else { return _ = Glibc.close(descriptor) }
        batch.flush()
        sendDatagram(envelope.encoded(), passing: descriptor)
    }

    private func sendDatagram(_ bytes: [UInt8], passing descriptor: Int32? = nil) {
        if queuedMessages == 0 {
            switch send(Outgoing(bytes: bytes, descriptor: descriptor)) {
            case .sent: return
            case .closed:
                if let descriptor { Glibc.close(descriptor) }
                close(reason: "peer closed while sending")
                return
            case .wouldBlock: break
            }
        }
        outbound.append(Outgoing(bytes: bytes, descriptor: descriptor))
        outboundBytes += bytes.count
        if queuedMessages > server.limits.maxQueuedMessages || outboundBytes > server.limits.maxQueuedBytes {
            server.logger.warning("dropping session \(id) (pid \(peer.pid)): \(queuedMessages) messages, \(outboundBytes) bytes unread")
            close(reason: "flooded past its output limits")
            return
        }
        if writeWatcher == nil {
            writeWatcher = try? server.loop.onWritable(fd) { [unowned self] in self.flush() }
        }
    }

    private func send(_ outgoing: Outgoing) -> Sent {
        guard let descriptor = outgoing.descriptor else { return SeqPacketSocket.send(fd, outgoing.bytes) }
        let sent = SeqPacketSocket.send(fd, outgoing.bytes, passing: descriptor)
        if sent == .sent { Glibc.close(descriptor) }
        return sent
    }

    private func flush() {
        while outboundHead < outbound.count {
            switch send(outbound[outboundHead]) {
            case .sent:
                outboundBytes -= outbound[outboundHead].bytes.count
                outboundHead += 1
            case .wouldBlock:
                return
            case .closed:
                close(reason: "peer closed while sending")
                return
            }
        }
        outbound.removeAll(keepingCapacity: true)
        outboundHead = 0
        writeWatcher?.cancel()
        writeWatcher = nil
    }

    private func readAvailable() {
        // The budget counts envelopes, not datagrams, so that one peer's batches cannot starve the others.
        var budget = server.limits.readBudget
        while budget > 0 {
            budget -= 1
            guard isOpen else { return }
            switch SeqPacketSocket.receive(fd, cap: server.limits.maxMessageBytes, buffer: &receiveBuffer) {
            case .message(let bytes):
                budget -= server.dispatch(bytes, from: self) - 1
            case .tooLarge(let length):
                send(.response(.error(.messageTooLarge, "message of \(length) bytes exceeds the \(server.limits.maxMessageBytes)-byte cap"), to: 0))
            case .wouldBlock:
                return
            case .closed:
                close(reason: "peer disconnected")
                return
            }
        }
    }

    /// Closes the connection; the server forgets the session and tells the daemon.
    public func close(reason: String) {
        guard isOpen else { return }
        isOpen = false
        readWatcher?.cancel()
        writeWatcher?.cancel()
        readWatcher = nil
        writeWatcher = nil
        for outgoing in outbound[outboundHead...] { if let descriptor = outgoing.descriptor { Glibc.close(descriptor) } }
        outbound.removeAll()
        Glibc.close(fd)
        server.sessionClosed(self, reason: reason)
    }
}

/// A SOCK_SEQPACKET server on an event loop: accepts clients, decodes envelopes, rejects bad input with typed errors.
public final class IPCServer {
    public let path: String
    public let limits: IPCLimits
    let loop: EventLoop
    let logger: Logger
    private let listener: Int32
    private var acceptWatcher: EventRegistration?
    private var nextSessionID: UInt64 = 1
    public private(set) var sessions: [UInt64: IPCSession] = [:]

    /// Called for each well-formed request. The handler answers through the `IncomingRequest`, now or later.
    public var onRequest: (IncomingRequest) -> Void = { $0.fail(.unsupported, "no handler") }
    public var onSessionOpened: (IPCSession) -> Void = { _ in }
    public var onSessionClosed: (IPCSession, String) -> Void = { _, _ in }

    public init(loop: EventLoop, path: String, limits: IPCLimits = .standard, logger: Logger, mode: mode_t = 0o660) throws {
        self.loop = loop
        self.path = path
        self.limits = limits
        self.logger = logger
        listener = try SeqPacketSocket.listen(path: path, mode: mode)
        acceptWatcher = try loop.onReadable(listener) { [unowned self] in self.acceptAll() }
    }

    private func acceptAll() {
        while let fd = SeqPacketSocket.accept(listener: listener) {
            let peer = SeqPacketSocket.peerCredentials(fd) ?? PeerCredentials(pid: 0, uid: UInt32.max, gid: UInt32.max)
            guard let session = open(fd, peer: peer) else { continue }
            logger.debug("session \(session.id) opened by pid \(peer.pid) uid \(peer.uid)")
            onSessionOpened(session)
        }
    }

    private func open(_ fd: Int32, peer: PeerCredentials) -> IPCSession? {
        let session = IPCSession(id: nextSessionID, fd: fd, peer: peer, server: self)
        nextSessionID += 1
        do {
            try session.start()
        } catch {
            logger.error("cannot watch session fd \(fd): \(error)")
            Glibc.close(fd)
            return nil
        }
        sessions[session.id] = session
        return session
    }

    /// A session on one end of a socket pair this daemon made (a data channel), served as any accepted one; its peer
    /// is who the other end is passed to, so its credentials are the daemon's own until that one speaks. Not announced
    /// through `onSessionOpened`: the caller knows it.
    public func adopt(_ fd: Int32) -> IPCSession? {
        open(fd, peer: PeerCredentials(pid: getpid(), uid: getuid(), gid: getgid()))
    }

    /// Handles a datagram; returns how many envelopes it held.
    @discardableResult
    func dispatch(_ bytes: [UInt8], from session: IPCSession) -> Int {
        let envelope: Envelope
        do {
            envelope = try Envelope(serializedBytes: bytes)
        } catch {
            session.send(.response(.error(.malformedMessage, "datagram of \(bytes.count) bytes is not an Envelope: \(error)"), to: 0))
            return 1
        }
        guard case .batch(let batch)? = envelope.body else {
            dispatchOne(envelope, from: session)
            return 1
        }
        // The batch itself is checked as a lone envelope would be: nothing this schema does not know, no request id of
        // its own, and no more envelopes than a batch may hold.
        guard envelope.unknownFields.data.isEmpty, batch.unknownFields.data.isEmpty, envelope.requestID == 0 else {
            session.send(.response(.error(.unknownMessage, "a batch carries fields this daemon's schema does not know, or a request id of its own"), to: envelope.requestID))
            return 1
        }
        guard batch.envelopes.count <= EnvelopeBatch.maxEnvelopes else {
            session.send(.response(.error(.messageTooLarge, "a batch of \(batch.envelopes.count) envelopes; at most \(EnvelopeBatch.maxEnvelopes)"), to: 0))
            return 1
        }
        for inner in batch.envelopes {
            guard session.isOpen else { return batch.envelopes.count }
            if case .batch? = inner.body {
                session.send(.response(.error(.malformedMessage, "a batch inside a batch"), to: inner.requestID))
                continue
            }
            dispatchOne(inner, from: session)
        }
        return max(batch.envelopes.count, 1)
    }

    private func dispatchOne(_ envelope: Envelope, from session: IPCSession) {
        if envelope.acceptsBatches { session.acceptsBatches = true }
        let id = envelope.requestID
        guard case .request(let request)? = envelope.body else {
            session.send(.response(.error(.unknownMessage, "expected a request; got \(envelope.body.map(Self.describe) ?? "an empty envelope")"), to: id))
            return
        }
        guard request.kind != nil, !envelope.hasUnknownFields else {
            session.send(.response(.error(.unknownMessage, "request carries no message this daemon's schema knows"), to: id))
            return
        }
        guard id != 0 else {
            session.send(.response(.error(.missingField, "a request needs a non-zero request id", field: "request_id"), to: 0))
            return
        }
        onRequest(IncomingRequest(id: id, request: request, session: session))
    }

    private static func describe(_ body: Envelope.OneOf_Body) -> String {
        switch body {
        case .request: "a request"
        case .response: "a response"
        case .event: "an event"
        case .batch: "a batch"
        }
    }

    func sessionClosed(_ session: IPCSession, reason: String) {
        sessions.removeValue(forKey: session.id)
        logger.debug("session \(session.id) closed: \(reason)")
        onSessionClosed(session, reason)
    }

    /// Sends an event to every open session `wanted` picks, encoded once for all of them.
    public func broadcast(_ event: Event, where wanted: (IPCSession) -> Bool = { _ in true }) {
        var encoded: [UInt8]?
        for session in sessions.values where wanted(session) {
            let bytes = encoded ?? Envelope.event(event).encoded()
            encoded = bytes
            session.send(encoded: bytes)
        }
    }

    /// Stops accepting, closes every session and removes the socket file.
    public func shutdown() {
        acceptWatcher?.cancel()
        acceptWatcher = nil
        for session in Array(sessions.values) {
            session.flushBatch()
            session.close(reason: "server shutting down")
        }
        Glibc.close(listener)
        unlink(path)
    }
}
