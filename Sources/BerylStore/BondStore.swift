import BerylCore
import BerylCrypto
import BerylSMP

public enum BondStoreError: Error, Equatable, Sendable, CustomStringConvertible {
    case database(SQLiteError)
    /// A row that fails its own checks (a key of the wrong length): reported, never used.
    case corruptRow(String)

    public var description: String {
        switch self {
        case .database(let error): "bond store: \(error)"
        case .corruptRow(let why): "bond store: \(why)"
        }
    }
}

/// Bonds, the CCCD values and client features of bonded peers, pending Service Changed ranges, and this device's IRK,
/// in one SQLite file in the state directory. Every change is one transaction: a kill at any moment leaves the old or
/// the new bond, never part of one.
public final class BondStore {
    private let database: SQLiteDatabase
    public let path: String

    public init(path: String) throws(BondStoreError) {
        self.path = path
        do {
            database = try SQLiteDatabase(path: path)
            try database.transaction { () throws(SQLiteError) in
                try database.execute("""
                    CREATE TABLE IF NOT EXISTS bonds (
                      identity TEXT PRIMARY KEY, irk BLOB, peer_ltk BLOB, peer_ediv INTEGER NOT NULL, peer_rand BLOB NOT NULL,
                      local_ltk BLOB, local_ediv INTEGER NOT NULL, local_rand BLOB NOT NULL, csrk BLOB,
                      authenticated INTEGER NOT NULL, secure_connections INTEGER NOT NULL, key_size INTEGER NOT NULL,
                      client_features BLOB NOT NULL DEFAULT x'00')
                    """)
                try database.execute("""
                    CREATE TABLE IF NOT EXISTS cccds (
                      identity TEXT NOT NULL REFERENCES bonds(identity) ON DELETE CASCADE, handle INTEGER NOT NULL, value INTEGER NOT NULL,
                      PRIMARY KEY (identity, handle))
                    """)
                try database.execute("""
                    CREATE TABLE IF NOT EXISTS service_changed (
                      identity TEXT PRIMARY KEY REFERENCES bonds(identity) ON DELETE CASCADE, start INTEGER NOT NULL, end INTEGER NOT NULL)
                    """)
                try database.execute("CREATE TABLE IF NOT EXISTS local (key TEXT PRIMARY KEY, value BLOB NOT NULL)")
                // Added after the first schema: stores made before it gain the column.
                let columns = try database.execute("PRAGMA table_info(bonds)").compactMap { $0.count > 1 ? $0[1].text : nil }
                if !columns.contains("paired_from") { try database.execute("ALTER TABLE bonds ADD COLUMN paired_from TEXT") }
                // Data signing (Core Vol 3 Part C §10.4): our CSRK and both SignCounters; a new pairing starts them over.
                if !columns.contains("local_csrk") { try database.execute("ALTER TABLE bonds ADD COLUMN local_csrk BLOB") }
                if !columns.contains("local_sign_counter") {
                    try database.execute("ALTER TABLE bonds ADD COLUMN local_sign_counter INTEGER NOT NULL DEFAULT 0")
                }
                if !columns.contains("peer_sign_counter") { try database.execute("ALTER TABLE bonds ADD COLUMN peer_sign_counter INTEGER") }
                // Where the peer's Service Changed value is, for our GATT client on its next links (Core Vol 3 Part G §2.5.2).
                if !columns.contains("peer_service_changed") { try database.execute("ALTER TABLE bonds ADD COLUMN peer_service_changed INTEGER") }
            }
        } catch {
            throw .database(error)
        }
    }

    private func run<T>(_ body: () throws(SQLiteError) -> T) throws(BondStoreError) -> T {
        do { return try body() } catch { throw .database(error) }
    }

    /// This device's Identity Resolving Key, made once and kept.
    public func localIRK() throws(BondStoreError) -> [UInt8] {
        try run { () throws(SQLiteError) in
            try database.transaction { () throws(SQLiteError) in
                if let stored = try database.execute("SELECT value FROM local WHERE key = 'irk'").first?.first?.blob, stored.count == 16 { return stored }
                let irk = SecureRandom.bytes(16)
                try database.execute("INSERT OR REPLACE INTO local (key, value) VALUES ('irk', ?)", [.blob(irk)])
                return irk
            }
        }
    }

    /// Adds or replaces a bond. A new pairing replaces the keys, and the old CCCDs go with them (a fresh bond starts clean).
    public func save(_ bond: Bond) throws(BondStoreError) {
        func optionalBlob(_ bytes: [UInt8]?) -> SQLValue { bytes.map(SQLValue.blob) ?? .null }
        try run { () throws(SQLiteError) in
            try database.transaction { () throws(SQLiteError) in
                try database.execute("DELETE FROM bonds WHERE identity = ?", [.text(bond.identity.description)])
                try database.execute("""
                    INSERT INTO bonds (identity, irk, peer_ltk, peer_ediv, peer_rand, local_ltk, local_ediv, local_rand, csrk,
                                       authenticated, secure_connections, key_size, paired_from, local_csrk)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """, [.text(bond.identity.description), optionalBlob(bond.irk), optionalBlob(bond.peerLTK), .integer(Int64(bond.peerEDIV)),
                          .blob(bond.peerRand), optionalBlob(bond.localLTK), .integer(Int64(bond.localEDIV)), .blob(bond.localRand),
                          optionalBlob(bond.csrk), .integer(bond.authenticated ? 1 : 0), .integer(bond.secureConnections ? 1 : 0),
                          .integer(Int64(bond.keySize)), bond.pairedFrom.map { SQLValue.text($0.description) } ?? .null, optionalBlob(bond.localCSRK)])
            }
        }
    }

    public func bonds() throws(BondStoreError) -> [Bond] {
        let rows = try run { () throws(SQLiteError) in
            try database.execute("""
                SELECT identity, irk, peer_ltk, peer_ediv, peer_rand, local_ltk, local_ediv, local_rand, csrk, authenticated, secure_connections, key_size,
                       paired_from, local_csrk
                FROM bonds ORDER BY identity
                """)
        }
        return try rows.map { row throws(BondStoreError) in try decode(row) }
    }

    private func decode(_ row: [SQLValue]) throws(BondStoreError) -> Bond {
        guard row.count == 14, let text = row[0].text, let identity = DeviceAddress(text) else { throw .corruptRow("a bond without a valid identity") }
        func key(_ value: SQLValue, _ length: Int, _ name: String) throws(BondStoreError) -> [UInt8]? {
            if value == .null { return nil }
            guard let bytes = value.blob, bytes.count == length else { throw .corruptRow("\(identity): \(name) is not \(length) bytes") }
            return bytes
        }
        guard let peerRand = try key(row[4], 8, "peer rand"), let localRand = try key(row[7], 8, "local rand") else {
            throw .corruptRow("\(identity): missing rand")
        }
        return Bond(identity: identity, irk: try key(row[1], 16, "IRK"), peerLTK: try key(row[2], 16, "peer LTK"),
                    peerEDIV: UInt16(truncatingIfNeeded: row[3].integer ?? 0), peerRand: peerRand, localLTK: try key(row[5], 16, "local LTK"),
                    localEDIV: UInt16(truncatingIfNeeded: row[6].integer ?? 0), localRand: localRand, csrk: try key(row[8], 16, "CSRK"),
                    localCSRK: try key(row[13], 16, "local CSRK"), authenticated: row[9].integer == 1, secureConnections: row[10].integer == 1, keySize: UInt8(truncatingIfNeeded: row[11].integer ?? 16),
                    pairedFrom: row[12].text.flatMap(DeviceAddress.init))
    }

    /// Removes a bond with its CCCDs; false when there was none.
    @discardableResult
    public func remove(_ identity: DeviceAddress) throws(BondStoreError) -> Bool {
        try run { () throws(SQLiteError) in
            try database.transaction { () throws(SQLiteError) in
                let existed = try !database.execute("SELECT 1 FROM bonds WHERE identity = ?", [.text(identity.description)]).isEmpty
                try database.execute("DELETE FROM bonds WHERE identity = ?", [.text(identity.description)])
                return existed
            }
        }
    }

    // MARK: SignCounters (Core Vol 3 Part C §10.4.1–10.4.2)

    /// The counter to sign our next write to this peer with; the stored one moves past it first, so a crash cannot
    /// make the stack sign two writes with one counter.
    public func takeLocalSignCounter(_ identity: DeviceAddress) throws(BondStoreError) -> UInt32? {
        try run { () throws(SQLiteError) in
            try database.transaction { () throws(SQLiteError) in
                guard let current = try database.execute("SELECT local_sign_counter FROM bonds WHERE identity = ?", [.text(identity.description)])
                    .first?.first?.integer, current < Int64(UInt32.max) else { return nil }
                try database.execute("UPDATE bonds SET local_sign_counter = ? WHERE identity = ?", [.integer(current + 1), .text(identity.description)])
                return UInt32(current)
            }
        }
    }

    /// The last SignCounter accepted from this peer, if any.
    public func peerSignCounter(_ identity: DeviceAddress) throws(BondStoreError) -> UInt32? {
        try run { () throws(SQLiteError) in
            try database.execute("SELECT peer_sign_counter FROM bonds WHERE identity = ?", [.text(identity.description)])
                .first?.first?.integer.map { UInt32(truncatingIfNeeded: $0) }
        }
    }

    public func setPeerSignCounter(_ identity: DeviceAddress, _ counter: UInt32) throws(BondStoreError) {
        _ = try run { () throws(SQLiteError) in
            try database.execute("UPDATE bonds SET peer_sign_counter = ? WHERE identity = ?", [.integer(Int64(counter)), .text(identity.description)])
        }
    }

    // MARK: GATT state of bonded peers (Core Vol 3 Part G §3.3.3.3, §7.1)

    public func saveClientState(_ identity: DeviceAddress, configurations: [UInt16: UInt16], features: [UInt8]) throws(BondStoreError) {
        try run { () throws(SQLiteError) in
            try database.transaction { () throws(SQLiteError) in
                guard try !database.execute("SELECT 1 FROM bonds WHERE identity = ?", [.text(identity.description)]).isEmpty else { return }
                try database.execute("DELETE FROM cccds WHERE identity = ?", [.text(identity.description)])
                for (handle, value) in configurations where value != 0 {
                    try database.execute("INSERT INTO cccds (identity, handle, value) VALUES (?, ?, ?)",
                                         [.text(identity.description), .integer(Int64(handle)), .integer(Int64(value))])
                }
                try database.execute("UPDATE bonds SET client_features = ? WHERE identity = ?", [.blob(features.isEmpty ? [0] : features), .text(identity.description)])
            }
        }
    }

    public func clientState(_ identity: DeviceAddress) throws(BondStoreError) -> (configurations: [UInt16: UInt16], features: [UInt8]) {
        try run { () throws(SQLiteError) in
            let rows = try database.execute("SELECT handle, value FROM cccds WHERE identity = ?", [.text(identity.description)])
            var configurations: [UInt16: UInt16] = [:]
            for row in rows {
                guard let handle = row[0].integer, let value = row[1].integer else { continue }
                configurations[UInt16(truncatingIfNeeded: handle)] = UInt16(truncatingIfNeeded: value)
            }
            let features = try database.execute("SELECT client_features FROM bonds WHERE identity = ?", [.text(identity.description)]).first?.first?.blob ?? [0]
            return (configurations, features)
        }
    }

    /// Remembers a database change for a bonded peer that is away, widening any range already pending.
    public func addPendingServiceChange(_ identity: DeviceAddress, _ range: ClosedRange<UInt16>) throws(BondStoreError) {
        try run { () throws(SQLiteError) in
            try database.transaction { () throws(SQLiteError) in
                var start = range.lowerBound
                var end = range.upperBound
                if let row = try database.execute("SELECT start, end FROM service_changed WHERE identity = ?", [.text(identity.description)]).first,
                   let oldStart = row[0].integer, let oldEnd = row[1].integer {
                    start = min(start, UInt16(truncatingIfNeeded: oldStart))
                    end = max(end, UInt16(truncatingIfNeeded: oldEnd))
                }
                try database.execute("INSERT OR REPLACE INTO service_changed (identity, start, end) VALUES (?, ?, ?)",
                                     [.text(identity.description), .integer(Int64(start)), .integer(Int64(end))])
            }
        }
    }

    /// Takes (and clears) the change pending for a peer that has just come back.
    public func takePendingServiceChange(_ identity: DeviceAddress) throws(BondStoreError) -> ClosedRange<UInt16>? {
        try run { () throws(SQLiteError) in
            try database.transaction { () throws(SQLiteError) in
                guard let row = try database.execute("SELECT start, end FROM service_changed WHERE identity = ?", [.text(identity.description)]).first,
                      let start = row[0].integer, let end = row[1].integer else { return nil }
                try database.execute("DELETE FROM service_changed WHERE identity = ?", [.text(identity.description)])
                return UInt16(truncatingIfNeeded: start)...max(UInt16(truncatingIfNeeded: start), UInt16(truncatingIfNeeded: end))
            }
        }
    }

    public func peerServiceChanged(_ identity: DeviceAddress) throws(BondStoreError) -> UInt16? {
        try run { () throws(SQLiteError) in
            let row = try database.execute("SELECT peer_service_changed FROM bonds WHERE identity = ?", [.text(identity.description)]).first
            return row?.first?.integer.flatMap { UInt16(exactly: $0) }
        }
    }

    public func setPeerServiceChanged(_ identity: DeviceAddress, _ valueHandle: UInt16) throws(BondStoreError) {
        _ = try run { () throws(SQLiteError) in
            try database.execute("UPDATE bonds SET peer_service_changed = ? WHERE identity = ?", [.integer(Int64(valueHandle)), .text(identity.description)])
        }
    }

    /// PRAGMA integrity_check: "ok" when the file is sound.
    public func integrityCheck() throws(BondStoreError) -> String {
        try run { () throws(SQLiteError) in try database.execute("PRAGMA integrity_check").first?.first?.text ?? "no answer" }
    }
}

extension BondStore: BondStorage {}
