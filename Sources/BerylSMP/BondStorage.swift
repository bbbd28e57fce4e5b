import BerylCore
import BerylCrypto

/// Where the security manager keeps bonds and what belongs to them: the SQLite store in attd, a dictionary in tests.
/// Every call either happens whole or throws; a throw is reported and never loses what was stored before.
public protocol BondStorage: AnyObject {
    /// This device's Identity Resolving Key, made on first use and kept.
    func localIRK() throws -> [UInt8]
    /// Adds or replaces a bond; a replaced bond's subscriptions, pending change and SignCounters go with it.
    func save(_ bond: Bond) throws
    func bonds() throws -> [Bond]
    @discardableResult func remove(_ identity: DeviceAddress) throws -> Bool
    /// The SignCounter for our next signed write, advanced before it is returned; nil when spent or unbonded.
    func takeLocalSignCounter(_ identity: DeviceAddress) throws -> UInt32?
    func peerSignCounter(_ identity: DeviceAddress) throws -> UInt32?
    func setPeerSignCounter(_ identity: DeviceAddress, _ counter: UInt32) throws
    /// Ignored for an identity with no bond.
    func saveClientState(_ identity: DeviceAddress, configurations: [UInt16: UInt16], features: [UInt8]) throws
    func clientState(_ identity: DeviceAddress) throws -> (configurations: [UInt16: UInt16], features: [UInt8])
    /// Widens any range already pending.
    func addPendingServiceChange(_ identity: DeviceAddress, _ range: ClosedRange<UInt16>) throws
    func takePendingServiceChange(_ identity: DeviceAddress) throws -> ClosedRange<UInt16>?
    /// Where the bonded peer's Service Changed value is, as our GATT client found it (Core Vol 3 Part G §2.5.2).
    func peerServiceChanged(_ identity: DeviceAddress) throws -> UInt16?
    /// Ignored for an identity with no bond.
    func setPeerServiceChanged(_ identity: DeviceAddress, _ valueHandle: UInt16) throws
}

/// Bonds in memory, with the SQLite store's rules: for tests of the security manager and for a stack without a state
/// directory.
public final class InMemoryBondStorage: BondStorage {
    private struct Entry {
        var bond: Bond
        var configurations: [UInt16: UInt16] = [:]
        var features: [UInt8] = [0]
        var pendingChange: ClosedRange<UInt16>?
        var localSignCounter: UInt32 = 0
        var peerSignCounter: UInt32?
        var peerServiceChanged: UInt16?
    }

    private var entries: [DeviceAddress: Entry] = [:]
    private var irk: [UInt8]?
    /// Makes every call throw, as a full disk or a locked file would.
    public var failing = false

    public struct Failure: Error, CustomStringConvertible {
        public var description: String { "the in-memory store was told to fail" }
    }

    public init(bonds: [Bond] = []) {
        for bond in bonds { entries[bond.identity] = Entry(bond: bond) }
    }

    private func check() throws {
        if failing { throw Failure() }
    }

    public func localIRK() throws -> [UInt8] {
        try check()
        if let irk { return irk }
        let made = SecureRandom.bytes(16)
        irk = made
        return made
    }

    public func save(_ bond: Bond) throws {
        try check()
        entries[bond.identity] = Entry(bond: bond)
    }

    public func bonds() throws -> [Bond] {
        try check()
        return entries.values.map(\.bond).sorted { $0.identity.description < $1.identity.description }
    }

    public func remove(_ identity: DeviceAddress) throws -> Bool {
        try check()
        return entries.removeValue(forKey: identity) != nil
    }

    public func takeLocalSignCounter(_ identity: DeviceAddress) throws -> UInt32? {
        try check()
        guard let current = entries[identity]?.localSignCounter, current < UInt32.max else { return nil }
        entries[identity]?.localSignCounter = current + 1
        return current
    }

    public func peerSignCounter(_ identity: DeviceAddress) throws -> UInt32? {
        try check()
        return entries[identity]?.peerSignCounter
    }

    public func setPeerSignCounter(_ identity: DeviceAddress, _ counter: UInt32) throws {
        try check()
        entries[identity]?.peerSignCounter = counter
    }

    public func saveClientState(_ identity: DeviceAddress, configurations: [UInt16: UInt16], features: [UInt8]) throws {
        try check()
        entries[identity]?.configurations = configurations.filter { $0.value != 0 }
        entries[identity]?.features = features.isEmpty ? [0] : features
    }

    public func clientState(_ identity: DeviceAddress) throws -> (configurations: [UInt16: UInt16], features: [UInt8]) {
        try check()
        return (entries[identity]?.configurations ?? [:], entries[identity]?.features ?? [0])
    }

    public func addPendingServiceChange(_ identity: DeviceAddress, _ range: ClosedRange<UInt16>) throws {
        try check()
        guard entries[identity] != nil else { return }
        let old = entries[identity]?.pendingChange
        entries[identity]?.pendingChange = min(range.lowerBound, old?.lowerBound ?? .max)...max(range.upperBound, old?.upperBound ?? 0)
    }

    public func takePendingServiceChange(_ identity: DeviceAddress) throws -> ClosedRange<UInt16>? {
        try check()
        defer { entries[identity]?.pendingChange = nil }
        return entries[identity]?.pendingChange
    }

    public func peerServiceChanged(_ identity: DeviceAddress) throws -> UInt16? {
        try check()
        return entries[identity]?.peerServiceChanged
    }

    public func setPeerServiceChanged(_ identity: DeviceAddress, _ valueHandle: UInt16) throws {
        try check()
        entries[identity]?.peerServiceChanged = valueHandle
    }
}
