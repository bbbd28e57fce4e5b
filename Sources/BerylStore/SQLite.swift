import CSQLite

public struct SQLiteError: Error, CustomStringConvertible, Equatable, Sendable {
    public var code: Int32
    public var message: String
    public var description: String { "SQLite error \(code): \(message)" }
}

/// A value bound to or read from a statement.
public enum SQLValue: Equatable, Sendable {
    case null
    case integer(Int64)
    case text(String)
    case blob([UInt8])

    public var integer: Int64? { if case .integer(let value) = self { value } else { nil } }
    public var text: String? { if case .text(let value) = self { value } else { nil } }
    public var blob: [UInt8]? { if case .blob(let value) = self { value } else { nil } }
}

/// A small, synchronous SQLite connection: write-ahead log with full sync, so a transaction that returned is on disk
/// and one cut short by kill -9 leaves nothing behind.
public final class SQLiteDatabase {
    private var handle: OpaquePointer?

    public init(path: String) throws(SQLiteError) {
        var opened: OpaquePointer?
        let status = sqlite3_open_v2(path, &opened, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nil)
        handle = opened
        guard status == SQLITE_OK else {
            let message = opened.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open"
            sqlite3_close(opened)
            handle = nil
            throw SQLiteError(code: status, message: "\(path): \(message)")
        }
        sqlite3_busy_timeout(handle, 2000)
        try execute("PRAGMA journal_mode=WAL")
        try execute("PRAGMA synchronous=FULL")
        try execute("PRAGMA foreign_keys=ON")
    }

    deinit { sqlite3_close_v2(handle) }

    private func error(_ status: Int32) -> SQLiteError {
        SQLiteError(code: status, message: String(cString: sqlite3_errmsg(handle)))
    }

    /// Runs one statement with parameters; returns its rows.
    @discardableResult
    public func execute(_ sql: String, _ parameters: [SQLValue] = []) throws(SQLiteError) -> [[SQLValue]] {
        var statement: OpaquePointer?
        let prepared = sqlite3_prepare_v2(handle, sql, -1, &statement, nil)
        guard prepared == SQLITE_OK else { throw error(prepared) }
        defer { sqlite3_finalize(statement) }
        // SQLITE_TRANSIENT: SQLite copies the bytes before the call returns.
        let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
        for (index, parameter) in parameters.enumerated() {
            let position = Int32(index + 1)
            let status: Int32
            switch parameter {
            case .null: status = sqlite3_bind_null(statement, position)
            case .integer(let value): status = sqlite3_bind_int64(statement, position, value)
            case .text(let value): status = sqlite3_bind_text(statement, position, value, -1, transient)
            case .blob(let value): status = value.withUnsafeBytes { sqlite3_bind_blob(statement, position, $0.baseAddress, Int32(value.count), transient) }
            }
            guard status == SQLITE_OK else { throw error(status) }
        }
        var rows: [[SQLValue]] = []
        while true {
            let step = sqlite3_step(statement)
            if step == SQLITE_DONE { break }
            guard step == SQLITE_ROW else { throw error(step) }
            var row: [SQLValue] = []
            for column in 0..<sqlite3_column_count(statement) {
                switch sqlite3_column_type(statement, column) {
                case SQLITE_INTEGER: row.append(.integer(sqlite3_column_int64(statement, column)))
                case SQLITE_TEXT: row.append(.text(String(cString: sqlite3_column_text(statement, column))))
                case SQLITE_BLOB:
                    let count = Int(sqlite3_column_bytes(statement, column))
                    let bytes = sqlite3_column_blob(statement, column).map { Array(UnsafeRawBufferPointer(start: $0, count: count)) } ?? []
                    row.append(.blob(bytes))
                default: row.append(.null)
                }
            }
            rows.append(row)
        }
        return rows
    }

    /// Everything in `body` lands together or not at all.
    public func transaction<T>(_ body: () throws(SQLiteError) -> T) throws(SQLiteError) -> T {
        try execute("BEGIN IMMEDIATE")
        do {
            let result = try body()
            try execute("COMMIT")
            return result
        } catch {
            _ = try? execute("ROLLBACK")
            throw error
        }
    }
}
