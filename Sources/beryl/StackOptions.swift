import ArgumentParser
import BerylDaemonKit
import BerylSupervisor
import Foundation

/// Every command names the stack it works on, so several run side by side.
struct StackOptions: ParsableArguments {
    @Option(help: "The stack's runtime directory (default: $BERYL_RUNTIME_DIR or /run/beryl).")
    var runtimeDir: String?

    @Option(help: "The stack's state directory (default: $BERYL_STATE_DIR or /var/lib/beryl).")
    var stateDir: String?

    var paths: DaemonPaths { DaemonPaths.resolve(runtimeDir: runtimeDir, stateDir: stateDir) }
}

enum Output {
    static func json<T: Encodable>(_ value: T) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return (try? encoder.encode(value)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
    }

    static func fail(_ message: String, code: Int32 = 1) -> ExitCode {
        Console.error("beryl: \(message)\n")
        return ExitCode(code)
    }
}
