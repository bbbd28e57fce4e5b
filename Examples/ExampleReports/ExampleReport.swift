import Foundation

/// What an example reports as it goes: a line for people, or with `--json` one JSON object per line (the event's name,
/// its fields and the same text), which `beryl demo` and the tests read instead of the text.
public protocol ExampleReport {
    var text: String { get }
    /// The event's name under "event", and what a reader needs of it.
    var fields: [String: Any] { get }
}

extension ExampleReport {
    /// The report as one line: its text, or (`json`) its fields and text as a JSON object with sorted keys.
    public func line(json: Bool) -> String {
        guard json else { return text }
        var object = fields
        object["text"] = text
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) else { return text }
        return String(decoding: data, as: UTF8.self)
    }

    /// One line to stdout at once (examples are often read through a pipe), as the example was asked (`--json`).
    public func write() {
        FileHandle.standardOutput.write(Data((line(json: ReportFormat.json) + "\n").utf8))
    }
}

public enum ReportFormat {
    /// Whether the example was started with `--json`.
    public static let json = CommandLine.arguments.dropFirst().contains("--json")
}
