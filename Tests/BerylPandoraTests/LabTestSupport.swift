import BerylDaemonKit
import BerylIPC
import BerylPandora
import BerylSupervisor
import BerylTestSupport
import Foundation
import GRPCCore
import GRPCInProcessTransport
import PandoraInterfaces
import Synchronization

// What the lab-session process tests share beyond BerylTestSupport.

extension IPCClient {
    /// The lab scan reports heard for `duration`, or until `enough` is satisfied.
    func labReports(for duration: Duration, until enough: ([Beryl_Ipc_V1_LabScanReport]) -> Bool = { _ in false }) -> [Beryl_Ipc_V1_LabScanReport] {
        var reports: [Beryl_Ipc_V1_LabScanReport] = []
        func take(_ event: Event) {
            if case .lab(let lab)? = event.manager.kind, case .scanReport(let report)? = lab.kind { reports.append(report) }
        }
        for event in takeEvents() { take(event) }
        let deadline = ContinuousClock.now + duration
        while ContinuousClock.now < deadline, !enough(reports) {
            guard let envelope = try? receive(timeout: .milliseconds(100)) else {
                usleep(5_000)
                continue
            }
            _ = takeEvents()
            if case .event(let event)? = envelope.body { take(event) }
        }
        return reports
    }
}

/// The AD structures in advertising data (length byte, type, value), read as a scanner reads them.
func adStructures(_ data: Data) -> [[UInt8]] {
    let bytes = [UInt8](data)
    var structures: [[UInt8]] = []
    var index = 0
    while index < bytes.count {
        let length = Int(bytes[index])
        guard length > 0, index + length < bytes.count else { break }
        structures.append(Array(bytes[index...(index + length)]))
        index += 1 + length
    }
    return structures
}

/// "AA:BB:CC:DD:EE:FF[/random]" → its six bytes, most significant first (Pandora's order).
func addressBytes(_ text: String) -> Data? {
    let octets = text.split(separator: "/").first?.split(separator: ":").compactMap { UInt8($0, radix: 16) } ?? []
    return octets.count == 6 ? Data(octets) : nil
}

// MARK: Async waits with a hard bound

private final class Outcome<T: Sendable>: Sendable {
    private let result = Mutex<Result<T, any Error>?>(nil)
    func set(_ value: Result<T, any Error>) { result.withLock { $0 = value } }
    var value: Result<T, any Error>? { result.withLock { $0 } }
}

/// Runs `operation` in its own task and waits at most `timeout` for it: its result, or nil (and the task cancelled)
/// when it had not finished. Never waits on a task that ignores cancellation.
func finish<T: Sendable>(within timeout: Duration, _ operation: @escaping @Sendable () async throws -> T) async -> Result<T, any Error>? {
    let outcome = Outcome<T>()
    let task = Task {
        do {
            outcome.set(.success(try await operation()))
        } catch {
            outcome.set(.failure(error))
        }
    }
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if let value = outcome.value { return value }
        try? await Task.sleep(for: .milliseconds(20))
    }
    if let value = outcome.value { return value }
    task.cancel()
    return nil
}

extension Result where Failure == any Error {
    /// The gRPC status code of a failed call (nil on success, or for an error that is not an RPCError).
    var rpcCode: RPCError.Code? {
        guard case .failure(let error) = self else { return nil }
        return (error as? RPCError)?.code
    }
}

extension CallOptions {
    static func within(_ timeout: Duration) -> CallOptions {
        var options = CallOptions.defaults
        options.timeout = timeout
        return options
    }
}

/// What a streaming call has delivered so far, and how it ended.
final class StreamWatch: Sendable {
    struct Seen: Sendable {
        var messages = 0
        var ended: String?
    }

    private let seen = Mutex(Seen())

    func heard() { seen.withLock { $0.messages += 1 } }
    func end(_ how: String) { seen.withLock { $0.ended = how } }
    var now: Seen { seen.withLock { $0 } }

    /// Polls until `condition` holds, for at most `timeout`.
    func wait(_ timeout: Duration, until condition: (Seen) -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if condition(now) { return true }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return condition(now)
    }
}

// MARK: beryl-pandora's services, in process

/// beryl-pandora's gRPC services over a lab session, served over the in-process transport, with a client for them.
final class PandoraHarness: Sendable {
    let lab: LabClient
    let host: Pandora_Host.Client<InProcessTransport.Client>
    private let running: Task<Void, Never>

    static func start(managerSocket: String) async throws -> PandoraHarness {
        let lab = try await LabClient.open(socketPath: managerSocket)
        return PandoraHarness(lab: lab)
    }

    private init(lab: LabClient) {
        let transport = InProcessTransport()
        let services = PandoraServices(lab: lab, deviceName: "Beryl Lab")
        let server = GRPCServer(transport: transport.server, services: services.all)
        let client = GRPCClient(transport: transport.client)
        self.lab = lab
        host = Pandora_Host.Client(wrapping: client)
        // As beryl-pandora runs them: the server, the pairing desk beside it, and here the client too.
        running = Task {
            await withTaskGroup(of: Void.self) { group in
                group.addTask { _ = try? await server.serve() }
                group.addTask { await services.runPairingDesk() }
                group.addTask { _ = try? await client.runConnections() }
            }
        }
    }

    /// Ends the lab session (every call waiting on managerd fails at once) and cancels the server and the client, without
    /// waiting for them: a handler that never ends cannot hold up a test's tearDown.
    func abandon() {
        lab.channel.close()
        running.cancel()
    }
}
