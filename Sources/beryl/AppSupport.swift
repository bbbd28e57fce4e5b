import ArgumentParser
import Beryl
import BerylCore
import BerylIPC
import BerylSupervisor
import BerylTools
import Dispatch
import Foundation
import Synchronization

/// What the app-side commands (connect, gatt, serve, advertise) share: they are ordinary apps of managerd, written
/// against the Beryl library as any Linux app would be.
enum AppSupport {
    /// Runs an async body from a synchronous command; the library calls back on its own queues.
    static func blocking(_ body: @escaping @Sendable () async throws -> Void) throws {
        let failure = Mutex<(any Error)?>(nil)
        let done = DispatchSemaphore(value: 0)
        Task {
            do { try await body() } catch { failure.withLock { $0 = error } }
            done.signal()
        }
        done.wait()
        if let error = failure.withLock({ $0 }) { throw error }
    }

    /// Ends the process with a message once `seconds` pass (a connection request never times out by itself).
    /// `event`: what a script reads of the timeout (`--json`), printed before the message for people.
    static func watchdog(seconds: Double, event: (@Sendable () -> Void)? = nil, _ message: @escaping @Sendable () -> String) {
        DispatchQueue.global().asyncAfter(deadline: .now() + seconds) {
            event?()
            Console.error("beryl: \(message())\n")
            exit(1)
        }
    }

    /// Waits for SIGINT or SIGTERM (or `seconds`, when given, or whatever `alsoWhen` arranges to call).
    static func waitForStop(seconds: Double?, alsoWhen: (@escaping @Sendable () -> Void) -> Void = { _ in }) async {
        let (stops, stop) = AsyncStream<Void>.makeStream()
        alsoWhen { stop.yield() }
        let sources = [SIGINT, SIGTERM].map { number -> any DispatchSourceSignal in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { stop.yield() }
            source.resume()
            return source
        }
        if let seconds { DispatchQueue.global().asyncAfter(deadline: .now() + seconds) { stop.yield() } }
        for await _ in stops { break }
        for source in sources { source.cancel() }
    }

    /// Waits for the manager's first definite state; anything but poweredOn is a clear failure.
    static func poweredOn(_ state: @Sendable () -> ManagerState, reason: @Sendable () -> String?, runtimeDir: String) async throws {
        let deadline = ContinuousClock.now + .seconds(10)
        while state() == .unknown, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        guard state() == .poweredOn else {
            throw Output.fail("the stack in \(runtimeDir) is not powered on (state \(state())\(reason().map { ": \($0)" } ?? "")); is `beryl up` running with a controller?")
        }
    }

    /// `--peer`: a peripheral identifier (as `beryl scan` prints) or an address.
    static func peripheral(_ peer: String, on central: CentralManager) throws -> Peripheral {
        if let identifier = UUID(uuidString: peer) {
            guard let found = central.retrievePeripherals(withIdentifiers: [identifier]).first else {
                throw Output.fail("no peripheral has the identifier \(peer); `beryl peripherals` lists the known ones")
            }
            return found
        }
        guard DeviceAddress(peer) != nil, let found = central.retrievePeripheral(address: peer) else {
            throw Output.fail("'\(peer)' is neither a peripheral identifier nor an address like AA:BB:CC:DD:EE:FF[/random]")
        }
        return found
    }

    static func validatePeer(_ peer: String) throws {
        guard UUID(uuidString: peer) != nil || DeviceAddress(peer) != nil else {
            throw ValidationError("'\(peer)' is neither a peripheral identifier nor an address like AA:BB:CC:DD:EE:FF[/random]")
        }
    }
}

/// A command's output: key=value lines, or one JSON object per line.
struct EventPrinter: Sendable {
    let json: Bool

    func emit(_ fields: [String: Any]) {
        let line: String
        if json, let data = try? JSONSerialization.data(withJSONObject: fields, options: [.sortedKeys]) {
            line = String(decoding: data, as: UTF8.self)
        } else {
            line = fields.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        }
        Console.out(line + "\n")
    }

    func say(_ line: String) {
        Console.out(line + "\n")
    }

    /// A line for people, or the report's fields as JSON.
    func report(_ report: ServeReport) {
        json ? emit(report.fields) : say(report.text)
    }
}

/// Answers the library's pairing prompts for a command: a passkey given up front, --auto-accept, or the terminal;
/// the lines are those `--direct` prints from attd's prompts.
final class CommandPairing: PairingDelegate, Sendable {
    let agent: PairingAgent
    let report: @Sendable (PairingEvent) -> Void

    init(agent: PairingAgent, report: @escaping @Sendable (PairingEvent) -> Void) {
        self.agent = agent
        self.report = report
    }

    func pairing(with peer: UUID, prompt: PairingPrompt, responder: PairingResponder) {
        var asked = Beryl_Ipc_V1_PairingPrompt()
        asked.peer = responder.address
        switch prompt {
        case .displayPasskey(let number): asked.kind = .displayPasskey; asked.number = number
        case .enterPasskey: asked.kind = .enterPasskey
        case .confirmNumber(let number): asked.kind = .confirmNumber; asked.number = number
        }
        let (line, answer) = agent.respond(to: asked)
        report(.prompt(asked, line: line))
        guard let answer else { return }
        switch prompt {
        case .enterPasskey: answer.accept ? responder.enter(passkey: answer.passkey) : responder.cancel()
        case .confirmNumber: responder.confirm(answer.accept)
        case .displayPasskey: break
        }
    }

    func pairing(with peer: UUID, finished outcome: PairingOutcome) {
        report(.finished(.init(outcome)))
    }
}

extension Beryl_Ipc_V1_PairingFinished {
    /// The library's outcome as attd reports it, so that `--direct` and the managerd path describe pairings alike.
    init(_ outcome: PairingOutcome) {
        self.init()
        peer = outcome.address
        success = outcome.success
        reason = UInt32(outcome.reason)
        remote = outcome.endedByPeer
        result = .with {
            $0.bonded = outcome.bonded
            $0.authenticated = outcome.authenticated
            $0.secureConnections = outcome.secureConnections
            $0.identity = outcome.identity ?? outcome.address
        }
    }
}
