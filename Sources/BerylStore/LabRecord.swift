import FoundationEssentials
import Glibc

/// What lab sessions made on this board that a factory reset takes back, and nothing else: the bonds they created and
/// the peripheral identifiers they caused to be known. Kept in the state directory, so that the next session (or a
/// restarted managerd) can still take back what an earlier one left.
public struct LabRecord: Codable, Equatable, Sendable {
    public static let currentVersion = 1
    public var version = LabRecord.currentVersion
    /// Identity addresses of the peers the lab bonded with.
    public var bonds: [String] = []
    /// Identifiers the lab's own links made known, until an app is handed one.
    public var peripherals: [String] = []

    public init(bonds: [String] = [], peripherals: [String] = []) {
        self.bonds = bonds
        self.peripherals = peripherals
    }
}

/// `STATE_DIR/lab.json`, cached: the record is read once and written whole (atomically) on every change.
public final class LabRecordFile {
    public enum Failure: Error, CustomStringConvertible {
        case unreadable(path: String, reason: String)
        case newerVersion(path: String, version: Int)
        case unwritable(path: String, reason: String)

        public var description: String {
            switch self {
            case .unreadable(let path, let reason): "\(path) is unreadable: \(reason)"
            case .newerVersion(let path, let version): "\(path) is version \(version); this managerd knows \(LabRecord.currentVersion)"
            case .unwritable(let path, let reason): "cannot write \(path): \(reason)"
            }
        }
    }

    public let path: String
    public private(set) var record: LabRecord

    /// A missing file is an empty record; a damaged or newer one is an error, so that it is never overwritten unread.
    public init(path: String) throws(Failure) {
        self.path = path
        guard let data = FileManager.default.contents(atPath: path) else {
            record = LabRecord()
            return
        }
        let decoded: LabRecord
        do {
            decoded = try JSONDecoder().decode(LabRecord.self, from: data)
        } catch {
            throw .unreadable(path: path, reason: "\(error)")
        }
        guard decoded.version <= LabRecord.currentVersion else { throw .newerVersion(path: path, version: decoded.version) }
        record = decoded
    }

    /// Changes the record and writes it if it changed.
    public func update(_ change: (inout LabRecord) -> Void) throws(Failure) {
        var changed = record
        change(&changed)
        changed.bonds = Self.unique(changed.bonds)
        changed.peripherals = Self.unique(changed.peripherals)
        guard changed != record else { return }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
        do {
            try encoder.encode(changed).write(to: URL(fileURLWithPath: path), options: .atomic)
        } catch {
            throw .unwritable(path: path, reason: "\(error)")
        }
        record = changed
    }

    /// `STATE_DIR/lab.json`, with the bonds the first lab sessions kept alone (`lab-bonds.json`) taken in.
    public static func open(stateDir: String) throws(Failure) -> LabRecordFile {
        let file = try LabRecordFile(path: stateDir + "/lab.json")
        let legacy = stateDir + "/lab-bonds.json"
        if let data = FileManager.default.contents(atPath: legacy), let bonds = try? JSONDecoder().decode([String].self, from: data) {
            try file.update { $0.bonds += bonds }
            try? FileManager.default.removeItem(atPath: legacy)
        }
        return file
    }

    private static func unique(_ values: [String]) -> [String] { Array(Set(values)).sorted() }
}
