import Dispatch
import Foundation
import Synchronization

/// What a long-running command started (berylsim, whole stacks) is stopped when the command is interrupted (Ctrl-C,
/// SIGTERM), instead of being left running with its scratch directory.
public enum Interruption {
    private static let stops = Mutex<[UUID: @Sendable () -> Void]>([:])
    private static let sources = Mutex<[any DispatchSourceSignal]>([])

    /// Registers `stop`; the returned token unregisters it.
    public static func onInterrupt(_ stop: @escaping @Sendable () -> Void) -> UUID {
        installOnce()
        let token = UUID()
        stops.withLock { $0[token] = stop }
        return token
    }

    public static func remove(_ token: UUID) { _ = stops.withLock { $0.removeValue(forKey: token) } }

    /// Stops what was registered and exits: for a command that can no longer go on (its output closed).
    public static func interrupt(exitCode: Int32) -> Never {
        let pending = stops.withLock { stops in
            defer { stops.removeAll() }
            return Array(stops.values)
        }
        for stop in pending { stop() }
        exit(exitCode)
    }

    private static func installOnce() {
        sources.withLock { sources in
            guard sources.isEmpty else { return }
            // A closed pipe must not kill the command before it stops what it started: the writer sees EPIPE
            // instead, and calls `interrupt` (Console does).
            Foundation.signal(SIGPIPE, SIG_IGN)
            // A closed terminal ends the run as ^C does.
            for signal in [SIGINT, SIGTERM, SIGHUP] {
                Foundation.signal(signal, SIG_IGN)
                let source = DispatchSource.makeSignalSource(signal: signal, queue: .global())
                source.setEventHandler { interrupt(exitCode: 128 + signal) }
                source.resume()
                sources.append(source)
            }
        }
    }
}
