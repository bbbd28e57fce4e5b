import FoundationEssentials
import Glibc

/// Where one stack keeps its sockets and its databases; both settable so stacks run side by side.
public struct DaemonPaths: Sendable, Equatable {
    public var runtimeDir: String
    public var stateDir: String

    public static let defaultRuntimeDir = "/run/beryl"
    public static let defaultStateDir = "/var/lib/beryl"

    public init(runtimeDir: String, stateDir: String) {
        self.runtimeDir = runtimeDir
        self.stateDir = stateDir
    }

    /// Flag, else `$BERYL_RUNTIME_DIR` / `$BERYL_STATE_DIR`, else the system defaults.
    public static func resolve(runtimeDir: String?, stateDir: String?,
                               environment: [String: String] = ProcessInfo.processInfo.environment) -> DaemonPaths {
        DaemonPaths(
            runtimeDir: runtimeDir ?? environment["BERYL_RUNTIME_DIR"] ?? defaultRuntimeDir,
            stateDir: stateDir ?? environment["BERYL_STATE_DIR"] ?? defaultStateDir)
    }

    public func socket(_ name: String) -> String { "\(runtimeDir)/\(name).sock" }
    public func pidFile(_ name: String) -> String { "\(runtimeDir)/\(name).pid" }
    public var logDir: String { "\(runtimeDir)/logs" }
    public func logFile(_ name: String) -> String { "\(logDir)/\(name).log" }

    public func createDirectories() throws {
        let manager = FileManager.default
        try manager.createDirectory(atPath: runtimeDir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        try manager.createDirectory(atPath: stateDir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    }
}
