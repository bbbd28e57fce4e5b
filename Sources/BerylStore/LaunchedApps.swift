import FoundationEssentials
import Glibc

/// The apps this stack launched, kept in the state directory so that a managerd started after one that crashed
/// knows them: it supervises them as its own and ends them when it is stopped. A pid counts only while the process
/// with that pid started when the record says (its start time in clock ticks, /proc/PID/stat field 22), so a reused
/// pid is never mistaken for an app.
public struct LaunchedApps: Codable, Equatable, Sendable {
    public struct Entry: Codable, Equatable, Sendable {
        public var app: String
        public var pid: Int32
        public var start: UInt64

        public init(app: String, pid: Int32, start: UInt64) {
            self.app = app
            self.pid = pid
            self.start = start
        }
    }

    public private(set) var entries: [Entry]

    public init(_ entries: [Entry] = []) { self.entries = entries.sorted { $0.app < $1.app } }

    /// A missing or damaged file is no apps: what it named is not known to be this stack's.
    public static func load(from path: String) -> LaunchedApps {
        guard let data = FileManager.default.contents(atPath: path),
              let decoded = try? JSONDecoder().decode(LaunchedApps.self, from: data) else { return LaunchedApps() }
        return decoded
    }

    /// The entries whose process is still the one launched: `startOf` gives a live pid's start time, nil for none.
    public func stillRunning(startOf: (Int32) -> UInt64?) -> [Entry] {
        entries.filter { startOf($0.pid) == $0.start }
    }

    public func save(to path: String) throws {
        try JSONEncoder().encode(self).write(to: URL(fileURLWithPath: path), options: .atomic)
    }
}
