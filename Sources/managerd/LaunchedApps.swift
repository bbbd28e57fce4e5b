import BerylDaemonKit
import Foundation

/// The apps this stack launched, kept in the state directory so that a managerd started after one that crashed
/// knows them: it supervises them as its own and ends them when it is stopped. A pid counts only while the
/// process with that pid started when the record says, so a reused pid is never mistaken for an app.
struct LaunchedApps: Codable {
    struct Entry: Codable {
        var app: String
        var pid: Int32
        var start: UInt64
    }

    var entries: [Entry] = []

    static func load(from path: String) -> LaunchedApps {
        guard let data = FileManager.default.contents(atPath: path),
              let decoded = try? JSONDecoder().decode(LaunchedApps.self, from: data) else { return LaunchedApps() }
        return decoded
    }

    /// The recorded apps whose process is still the one that was launched.
    func stillRunning() -> [Entry] {
        entries.filter { ProcessStats.isAlive(pid: $0.pid) && ProcessStats.startTicks(pid: $0.pid) == $0.start }
    }

    init() {}

    init(running: [(app: String, pid: Int32)]) {
        entries = running.compactMap { app, pid in ProcessStats.startTicks(pid: pid).map { Entry(app: app, pid: pid, start: $0) } }
            .sorted { $0.app < $1.app }
    }

    func save(to path: String) throws {
        try JSONEncoder().encode(self).write(to: URL(fileURLWithPath: path), options: .atomic)
    }
}
