import ArgumentParser
import BerylCore

extension LogLevel: ExpressibleByArgument {
    public init?(argument: String) {
        guard let level = LogLevel.allCases.first(where: { $0.label == argument }) else { return nil }
        self = level
    }

    public static var allValueStrings: [String] { allCases.map(\.label) }
}

/// The options every Beryl daemon takes.
public struct DaemonOptions: ParsableArguments {
    @Option(help: "Directory for sockets and pid files (default: $BERYL_RUNTIME_DIR or /run/beryl).")
    public var runtimeDir: String?

    @Option(help: "Directory for persistent state (default: $BERYL_STATE_DIR or /var/lib/beryl).")
    public var stateDir: String?

    @Option(help: "Log level: error, warning, info, debug or trace.")
    public var logLevel: LogLevel = .info

    public init() {}

    public var paths: DaemonPaths { DaemonPaths.resolve(runtimeDir: runtimeDir, stateDir: stateDir) }
}
