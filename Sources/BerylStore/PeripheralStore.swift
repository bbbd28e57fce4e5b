import BerylCore
import FoundationEssentials
import Glibc

/// A peripheral (or central) managerd has seen, under the identifier it gave it.
public struct KnownDevice: Equatable, Sendable {
    public var identifier: String
    public var address: DeviceAddress
    public var name: String?
    public var lastSeen: Double

    public init(identifier: String, address: DeviceAddress, name: String? = nil, lastSeen: Double) {
        self.identifier = identifier
        self.address = address
        self.name = name
        self.lastSeen = lastSeen
    }
}

/// Stable identifiers for devices (Core Bluetooth's peripheral.identifier): one UUID per address, kept in the state
/// directory so `retrievePeripherals(withIdentifiers:)` finds them after a restart. Cached in memory; written when a
/// device is new, renamed, or its last-seen time is a minute stale.
public final class PeripheralStore {
    private let database: SQLiteDatabase
    private var byAddress: [DeviceAddress: KnownDevice] = [:]
    private var byIdentifier: [String: DeviceAddress] = [:]
    private var persistedSeen: [String: Double] = [:]

    public init(path: String) throws(SQLiteError) {
        database = try SQLiteDatabase(path: path)
        try database.execute("""
            CREATE TABLE IF NOT EXISTS devices (identifier TEXT PRIMARY KEY, address TEXT NOT NULL UNIQUE, name TEXT, last_seen REAL NOT NULL)
            """)
        for row in try database.execute("SELECT identifier, address, name, last_seen FROM devices") {
            guard row.count == 4, let identifier = row[0].text, let text = row[1].text, let address = DeviceAddress(text) else { continue }
            let device = KnownDevice(identifier: identifier, address: address, name: row[2].text, lastSeen: Double(row[3].integer ?? 0))
            byAddress[address] = device
            byIdentifier[identifier] = address
            persistedSeen[identifier] = device.lastSeen
        }
    }

    public var count: Int { byAddress.count }
    public var all: [KnownDevice] { byAddress.values.sorted { $0.lastSeen > $1.lastSeen } }

    public func device(_ identifier: String) -> KnownDevice? { byIdentifier[identifier].flatMap { byAddress[$0] } }
    public func device(at address: DeviceAddress) -> KnownDevice? { byAddress[address] }

    /// Forgets a device: its identifier is never handed out again, and the address gets a new one if it is seen again.
    @discardableResult
    public func forget(_ identifier: String) throws(SQLiteError) -> Bool {
        guard let address = byIdentifier[identifier] else { return false }
        try database.execute("DELETE FROM devices WHERE identifier = ?", [.text(identifier)])
        byIdentifier[identifier] = nil
        byAddress[address] = nil
        persistedSeen[identifier] = nil
        return true
    }

    /// The device at `address`, made known (with a new identifier) if it was not.
    @discardableResult
    public func seen(_ address: DeviceAddress, name: String? = nil, at time: Double) -> KnownDevice {
        var device = byAddress[address] ?? KnownDevice(identifier: UUID().uuidString, address: address, lastSeen: time)
        let isNew = byAddress[address] == nil
        let renamed = name != nil && name != device.name
        if let name { device.name = name }
        device.lastSeen = max(device.lastSeen, time)
        byAddress[address] = device
        byIdentifier[device.identifier] = address
        if isNew || renamed || device.lastSeen - (persistedSeen[device.identifier] ?? 0) >= 60 {
            // An identifier already handed out must not change across restarts, so a failed write is retried on the next sighting.
            if (try? database.execute("INSERT OR REPLACE INTO devices (identifier, address, name, last_seen) VALUES (?, ?, ?, ?)",
                                      [.text(device.identifier), .text(address.description), device.name.map(SQLValue.text) ?? .null,
                                       .integer(Int64(device.lastSeen))])) != nil {
                persistedSeen[device.identifier] = device.lastSeen
            }
        }
        return device
    }
}
