import BerylManager
import BerylStore

/// The preserved managers' records: written when the core says, read back when managerd starts. A record this
/// managerd cannot read (a newer Beryl's, or damaged) is never overwritten or resumed, so the manager an app makes
/// under its identifier runs unpreserved until the app is quit (which forgets it with the app's others).
public struct PreservedRecords {
    public struct Key: Hashable, Sendable {
        public var appID: String
        public var restoreID: String
        public var role: ManagerRole

        public init(appID: String, restoreID: String, role: ManagerRole) {
            self.appID = appID
            self.restoreID = restoreID
            self.role = role
        }
    }

    /// A record read back: its manager's state, to resume.
    public struct Resumable {
        public var key: Key
        public var state: PreservedState
    }

    private let storage: (any PreservedRecordStorage)?
    public private(set) var unreadable: Set<Key> = []

    /// Without storage (it could not be opened), nothing is kept and nothing comes back.
    public init(storage: (any PreservedRecordStorage)?) { self.storage = storage }

    public mutating func save(_ key: Key, _ state: PreservedState) throws(SQLiteError) {
        guard let storage, !unreadable.contains(key) else { return }
        try storage.save(PreservedRecord(appID: key.appID, restoreID: key.restoreID, role: .init(key.role), state: state.encoded()))
    }

    public func forget(_ key: Key) throws(SQLiteError) {
        try storage?.remove(appID: key.appID, restoreID: key.restoreID, role: .init(key.role))
    }

    /// A user quit: every record of the app goes, the unreadable ones too, so its managers are preserved again.
    public mutating func forgetApp(_ appID: String) throws(SQLiteError) {
        unreadable = unreadable.filter { $0.appID != appID }
        try storage?.removeAll(appID: appID)
    }

    /// Every record, read: the ones to resume, and why each other cannot be (it stays as it is). A version 1 record
    /// (the wire message) is written again in the current version once read.
    public mutating func load() throws(SQLiteError) -> (resumable: [Resumable], unreadable: [(Key, PreservedStateError)]) {
        guard let storage else { return ([], []) }
        var resumable: [Resumable] = []
        var refused: [(Key, PreservedStateError)] = []
        for record in try storage.all() {
            let key = Key(appID: record.appID, restoreID: record.restoreID, role: ManagerRole(record.role))
            do {
                let state = try PreservedState.decodeStored(record.state)
                if record.state.first != UInt8(ascii: "{") { try? save(key, state) }
                resumable.append(Resumable(key: key, state: state))
            } catch {
                unreadable.insert(key)
                refused.append((key, error))
            }
        }
        return (resumable, refused)
    }
}

extension PreservedManager {
    public var recordKey: PreservedRecords.Key { .init(appID: appID, restoreID: restoreID, role: role) }
}

extension ManagerRole {
    public init(_ role: PreservedRecord.Role) { self = role == .central ? .central : .peripheral }
}

extension PreservedRecord.Role {
    public init(_ role: ManagerRole) { self = role == .central ? .central : .peripheral }
}
