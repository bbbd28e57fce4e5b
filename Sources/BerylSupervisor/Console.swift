import BerylCore
import Foundation

/// A command's own output, written straight to the descriptor. A reader that went away (`beryl scan --json | head`)
/// ends the command as ^C would, stopping what it started, where FileHandle's `write(_:)` would crash on EPIPE.
public enum Console {
    public static func out(_ text: String) {
        do {
            try FileHandle.standardOutput.write(contentsOf: Data(text.utf8))
        } catch {
            Interruption.interrupt(exitCode: 128 + SIGPIPE)
        }
    }

    /// Diagnostics: nobody left to tell is no reason to stop.
    public static func error(_ text: String) { StandardError.write(text) }
}
