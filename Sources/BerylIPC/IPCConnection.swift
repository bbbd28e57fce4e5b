import BerylCore
import BerylEventLoop
import SwiftProtobuf
#if canImport(Glibc)
import Glibc
#endif

/// A client connection that lives on an event loop (daemon to daemon): requests are answered through
/// callbacks, events arrive through `onEvent`, and nothing blocks the loop.
public final class IPCConnection {
    public let path: String
    public var onEvent: (Event) -> Void = { _ in }
    public var onClose: (String) -> Void = { _ in }
    public private(set) var isOpen = true
    private let fd: Int32
    private let loop: EventLoop
    private var reader: EventRegistration?
    private var writer: EventRegistration?
    private var outbound: [[UInt8]] = []
    private var pending = PendingRequests<(Result<Response, IPCClientError>) -> Void>()
    private var buffer: [UInt8] = []
    /// The descriptor the datagram being delivered carried (SCM_RIGHTS), until a completion takes it.
    private var passed: Int32?
    /// The requests of this loop wake-up, sent as one datagram when it ends.
    private lazy var batch = WakeUpBatch(loop: loop, capacity: IPCLimits.standard.maxMessageBytes) { [unowned self] datagram in
        if isOpen { sendDatagram(datagram) }
    }

    public init(loop: EventLoop, path: String) throws(IPCClientError) {
        self.loop = loop
        self.path = path
        do {
            fd = try SeqPacketSocket.connect(path: path, nonBlocking: true)
        } catch {
            throw .connect(error)
        }
        reader = try? loop.onReadable(fd) { [unowned self] in self.readAvailable() }
    }

    deinit {
        if isOpen { close(fd) }
    }

    /// Sends a request; `completion` runs once with the response, the remote error, or `.closed`.
    public func request(_ request: Request, completion: @escaping (Result<Response, IPCClientError>) -> Void = { _ in }) {
        guard isOpen else { return completion(.failure(.closed)) }
        var envelope = Envelope.request(request, id: pending.add(completion))
        envelope.acceptsBatches = true
        batch.add(envelope.encoded())
    }

    private func sendDatagram(_ bytes: [UInt8]) {
        if outbound.isEmpty, SeqPacketSocket.send(fd, bytes) == .sent { return }
        outbound.append(bytes)
        if writer == nil { writer = try? loop.onWritable(fd) { [unowned self] in self.flush() } }
    }

    private func flush() {
        while let first = outbound.first {
            switch SeqPacketSocket.send(fd, first) {
            case .sent: outbound.removeFirst()
            case .wouldBlock: return
            case .closed: shut("peer closed"); return
            }
        }
        writer?.cancel()
        writer = nil
    }

    /// In a response's completion: the descriptor its datagram carried, now the caller's (nil when none, or taken).
    /// One that no completion takes is closed once the datagram is delivered.
    public func takePassedDescriptor() -> Int32? {
        defer { passed = nil }
        return passed
    }

    private func readAvailable() {
        for _ in 0..<64 {
            switch SeqPacketSocket.receive(fd, cap: IPCLimits.standard.maxMessageBytes, buffer: &buffer, passed: &passed) {
            case .message(let bytes):
                defer { if let descriptor = takePassedDescriptor() { close(descriptor) } }
                guard let datagram = try? Envelope(serializedBytes: bytes) else { continue }
                for envelope in datagram.unbatched {
                    deliver(envelope)
                    guard isOpen else { return }
                }
            case .tooLarge:
                if let descriptor = takePassedDescriptor() { close(descriptor) }
                continue
            case .wouldBlock:
                return
            case .closed:
                shut("peer disconnected")
                return
            }
        }
    }

    private func deliver(_ envelope: Envelope) {
        switch envelope.body {
        case .event(let event)?:
            onEvent(event)
        case .response?:
            guard let (completion, outcome) = pending.answer(envelope) else { return }
            completion(outcome)
        default:
            return
        }
    }

    public func shut(_ reason: String) {
        guard isOpen else { return }
        isOpen = false
        reader?.cancel()
        writer?.cancel()
        close(fd)
        for completion in pending.removeAll() { completion(.failure(.closed)) }
        onClose(reason)
    }
}
