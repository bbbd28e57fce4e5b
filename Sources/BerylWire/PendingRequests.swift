/// The request/response correlation every client of a stack socket shares: each request gets the next id (from 1,
/// per session), an answer is taken once by the one request waiting on its id, and whatever still waits when the
/// session ends is handed back, oldest first, to be failed.
public struct PendingRequests<Waiter> {
    private var nextID: UInt64 = 1
    private var waiting: [UInt64: Waiter] = [:]

    public init() {}

    public var count: Int { waiting.count }

    /// A new id, with `waiter` waiting on it.
    public mutating func add(_ waiter: Waiter) -> UInt64 {
        let id = nextID
        nextID += 1
        waiting[id] = waiter
        return id
    }

    /// The waiter of a response envelope, no longer waiting, with what the response says; nil for an envelope that
    /// is no response, or answers an id nobody waits on (answered already, or never asked).
    public mutating func answer(_ envelope: Envelope) -> (waiter: Waiter, outcome: Result<Response, IPCClientError>)? {
        guard case .response(let response)? = envelope.body, let waiter = waiting.removeValue(forKey: envelope.requestID) else { return nil }
        return (waiter, response.outcome)
    }

    /// The waiter of `id`, which no longer waits (its request could not be sent).
    public mutating func cancel(_ id: UInt64) -> Waiter? { waiting.removeValue(forKey: id) }

    /// Everything still waiting, oldest first; none from now on.
    public mutating func removeAll() -> [Waiter] {
        defer { waiting.removeAll() }
        return waiting.keys.sorted().compactMap { waiting[$0] }
    }
}

extension Response {
    /// The response, or the typed error it carries.
    public var outcome: Result<Response, IPCClientError> {
        guard case .error(let error)? = kind else { return .success(self) }
        return .failure(.remote(code: error.code, message: error.message, field: error.field, detail: RemoteDetail(error)))
    }
}
