import BerylIPC
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// beryl-pandora's session with managerd: requests awaited from any task, and every event fanned out to the
/// subscribers of the moment (each gRPC stream subscribes for as long as it runs). A reader thread does the blocking
/// receive, so the gRPC server's executor never blocks on the socket.
public final class LabChannel: Sendable {
    private struct State {
        var pending = PendingRequests<CheckedContinuation<Response, any Error>>()
        var subscribers: [UInt64: AsyncStream<Event>.Continuation] = [:]
        var nextSubscriber: UInt64 = 1
        var closed: String?
    }

    private let fd: Int32
    private let state = Mutex(State())

    public init(socketPath: String) throws(IPCClientError) {
        do {
            fd = try SeqPacketSocket.connect(path: socketPath)
        } catch {
            throw .connect(error)
        }
        let reader = Thread { [self] in self.readLoop() }
        reader.name = "beryl-pandora.reader"
        reader.start()
    }

    deinit { Glibc.close(fd) }

    /// Why the session ended, once managerd has gone (requests fail with `.closed` from then on).
    public var closedReason: String? { state.withLock { $0.closed } }

    public func close() {
        shutdown(fd, Int32(SHUT_RDWR))
    }

    /// Sends a request and waits for its one answer; a typed managerd error comes back as `.remote`.
    public func call(_ request: Request) async throws(IPCClientError) -> Response {
        do {
            return try await withCheckedThrowingContinuation { continuation in
                let id: UInt64? = state.withLock { state in
                    guard state.closed == nil else { return nil }
                    return state.pending.add(continuation)
                }
                guard let id else { return continuation.resume(throwing: IPCClientError.closed) }
                guard case .sent = SeqPacketSocket.send(fd, Envelope.request(request, id: id).encoded()) else {
                    let waiting = state.withLock { $0.pending.cancel(id) }
                    waiting?.resume(throwing: IPCClientError.closed)
                    return
                }
            }
        } catch let error as IPCClientError {
            throw error
        } catch {
            throw .closed
        }
    }

    /// Every event from now on, until the stream is dropped or the session ends (then the stream finishes).
    public func events() -> AsyncStream<Event> {
        let (stream, continuation) = AsyncStream<Event>.makeStream(bufferingPolicy: .bufferingNewest(4096))
        let id: UInt64? = state.withLock { state in
            guard state.closed == nil else { return nil }
            let id = state.nextSubscriber
            state.nextSubscriber += 1
            state.subscribers[id] = continuation
            return id
        }
        guard let id else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in _ = self?.state.withLock { $0.subscribers.removeValue(forKey: id) } }
        return stream
    }

    private func readLoop() {
        SeqPacketSocket.readEnvelopes(fd) { dispatch($0) }
        finish("managerd closed the lab session")
    }

    private func dispatch(_ envelope: Envelope) {
        switch envelope.body {
        case .response?:
            guard let (waiting, outcome) = state.withLock({ $0.pending.answer(envelope) }) else { return }
            waiting.resume(with: outcome.mapError { $0 as any Error })
        case .event(let event)?:
            for subscriber in state.withLock({ Array($0.subscribers.values) }) { subscriber.yield(event) }
        default:
            break
        }
    }

    private func finish(_ reason: String) {
        let (waiting, subscribers) = state.withLock { state in
            state.closed = reason
            defer { state.subscribers.removeAll() }
            return (state.pending.removeAll(), Array(state.subscribers.values))
        }
        for continuation in waiting { continuation.resume(throwing: IPCClientError.closed) }
        for subscriber in subscribers { subscriber.finish() }
    }
}
