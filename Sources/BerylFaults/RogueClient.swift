import BerylIPC
import Foundation

/// A rogue local client: datagrams that are not envelopes, datagrams over the size cap, and envelopes that decode but
/// ask for nonsense, sent to a daemon's socket. The daemon must answer each (a typed error, or closing that one
/// connection for bytes it cannot read) exactly once, and go on serving everyone else.
enum RogueClient {
    /// What went wrong; empty when every datagram was answered as it should be.
    static func abuse(socket: String, daemon: String, random: inout FaultRandom, nonsense: [Request]) -> [String] {
        var failures: [String] = []
        // Bytes: random, truncated envelopes, and one datagram over the cap.
        // Random bytes, led by a tag with wire type 7 (which no protobuf decoder accepts), so that garbage never happens
        // to decode as a real request (a random HCI command would be a fault of its own, not malformed input).
        var garbage: [[UInt8]] = (0..<8).map { _ in [0x07 | UInt8(truncatingIfNeeded: random.next() << 3)] + random.bytes(random.int(0...299)) }
        var ping = Request()
        ping.ping = .init()
        if let valid = try? Envelope.with({ $0.requestID = 7; $0.request = ping }).serializedBytes() as [UInt8], valid.count > 2 {
            garbage.append(Array(valid.prefix(valid.count - 1)))
        }
        garbage.append([UInt8](repeating: 0x0A, count: IPCLimits.standard.maxMessageBytes + 1024))
        for bytes in garbage {
            guard let client = try? IPCClient(path: socket) else {
                failures.append("\(daemon): refused a connection")
                continue
            }
            do {
                try client.sendRaw(bytes)
                _ = try client.receive(timeout: .seconds(3))  // an error envelope (or whatever the bytes happened to ask)
            } catch IPCClientError.closed {
                // Closing a connection that sent what cannot be read is an answer too.
            } catch {
                failures.append("\(daemon): \(bytes.count) garbage bytes got \(error), neither an answer nor a close")
            }
        }
        // Envelopes that decode but ask for nonsense: each gets a typed error, once.
        guard let client = try? IPCClient(path: socket) else { return failures + ["\(daemon): refused a connection"] }
        var answered: Set<UInt64> = []
        var empty = Request()
        empty.kind = nil
        for request in [empty] + nonsense {
            do {
                let id = try client.send(request)
                let response = try answer(to: id, on: client)
                answered.insert(id)
                if request == empty, case .error? = response.kind {} else if request == empty {
                    failures.append("\(daemon): an empty request was not refused")
                }
            } catch {
                failures.append("\(daemon): \(String(describing: request.kind).prefix(80)) got \(error) instead of an answer")
            }
        }
        // A second answer to any of them would be a bug. (Bounded in time: a daemon may stream events, such as attd's
        // notifications, to every session.)
        let drainUntil = ContinuousClock.now + .milliseconds(300)
        while ContinuousClock.now < drainUntil, let late = try? client.receive(timeout: .milliseconds(100)) {
            if case .response? = late.body, answered.contains(late.requestID) { failures.append("\(daemon): request \(late.requestID) was answered twice") }
        }
        return failures
    }

    /// The response to request `id`, skipping events.
    private static func answer(to id: UInt64, on client: IPCClient) throws(IPCClientError) -> Response {
        let deadline = ContinuousClock.now + .seconds(5)
        while ContinuousClock.now < deadline {
            let envelope = try client.receive(timeout: .seconds(5), requestID: id)
            if envelope.requestID == id, case .response(let response)? = envelope.body { return response }
        }
        throw .timedOut(requestID: id)
    }
}
