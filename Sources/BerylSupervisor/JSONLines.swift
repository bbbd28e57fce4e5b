import Foundation

/// What apps and tools report with `--json`: one object per line, naming its event. Tests read these rather than
/// the text meant for people; a line that is not such an object (a log line from elsewhere) is passed over.
public enum JSONLines {
    public static func events(inFile path: String) -> [[String: Any]] {
        events(in: (try? String(contentsOfFile: path, encoding: .utf8)) ?? "")
    }

    /// A command's output, say.
    public static func events(in text: String) -> [[String: Any]] {
        text.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    /// The events named `name`, in order.
    public static func events(_ name: String, inFile path: String) -> [[String: Any]] {
        events(inFile: path).filter { $0["event"] as? String == name }
    }

    public static func events(_ name: String, in text: String) -> [[String: Any]] {
        events(in: text).filter { $0["event"] as? String == name }
    }
}
