import FoundationEssentials
import Glibc

/// What managerd preserves for one manager that opted into restoration: its app, its restore identifier, its role,
/// and the manager's state (an encoded protobuf the store does not look into).
public struct PreservedRecord: Equatable, Sendable {
    public enum Role: Int64, Sendable {
        case central = 1
        case peripheral = 2
    }
    public var appID: String
    public var restoreID: String
    public var role: Role
    public var state: [UInt8]

    public init(appID: String, restoreID: String, role: Role, state: [UInt8]) {
        self.appID = appID
        self.restoreID = restoreID
        self.role = role
        self.state = state
    }
}

/// Where preserved managers' records are kept: a seam, so that what is written when can be tested without a disk.
public protocol PreservedRecordStorage: AnyObject {
    func all() throws(SQLiteError) -> [PreservedRecord]
    func save(_ record: PreservedRecord) throws(SQLiteError)
    func remove(appID: String, restoreID: String, role: PreservedRecord.Role) throws(SQLiteError)
    func removeAll(appID: String) throws(SQLiteError)
}

/// Preserved managers in `STATE_DIR/restoration.sqlite` (WAL, full sync): a record is written before the request
/// that changed it is acknowledged, so a kill -9 of managerd loses nothing an app was told had happened.
public final class RestorationStore: PreservedRecordStorage {
    private let database: SQLiteDatabase

    public init(path: String) throws(SQLiteError) {
        database = try SQLiteDatabase(path: path)
        try database.execute("""
            CREATE TABLE IF NOT EXISTS preserved (app_id TEXT NOT NULL, restore_id TEXT NOT NULL, role INTEGER NOT NULL,
                state BLOB NOT NULL, PRIMARY KEY (app_id, restore_id, role))
            """)
    }

    public func all() throws(SQLiteError) -> [PreservedRecord] {
        try database.execute("SELECT app_id, restore_id, role, state FROM preserved ORDER BY app_id, restore_id, role").compactMap { row in
            guard row.count == 4, let app = row[0].text, let restore = row[1].text, let role = row[2].integer.flatMap(PreservedRecord.Role.init),
                  let state = row[3].blob ?? (row[3] == .null ? nil : []) else { return nil }
            return PreservedRecord(appID: app, restoreID: restore, role: role, state: state)
        }
    }

    public func save(_ record: PreservedRecord) throws(SQLiteError) {
        try database.execute("INSERT OR REPLACE INTO preserved (app_id, restore_id, role, state) VALUES (?, ?, ?, ?)",
                             [.text(record.appID), .text(record.restoreID), .integer(record.role.rawValue), .blob(record.state)])
    }

    public func remove(appID: String, restoreID: String, role: PreservedRecord.Role) throws(SQLiteError) {
        try database.execute("DELETE FROM preserved WHERE app_id = ? AND restore_id = ? AND role = ?",
                             [.text(appID), .text(restoreID), .integer(role.rawValue)])
    }

    /// A user quit: everything the app preserved goes.
    public func removeAll(appID: String) throws(SQLiteError) {
        try database.execute("DELETE FROM preserved WHERE app_id = ?", [.text(appID)])
    }
}
