import BerylCore
import BerylGAP

/// Who holds a manager's work: the app's live session, or managerd itself for a preserved manager whose app is not
/// running (by the preserved manager's own id, which is never a session's).
public enum ManagerHolder: Hashable, Sendable, Comparable, CustomStringConvertible {
    case session(UInt64)
    case preserved(UInt64)

    public var sessionID: UInt64? {
        if case .session(let id) = self { return id }
        return nil
    }

    public var description: String {
        switch self {
        case .session(let id): "session \(id)"
        case .preserved(let id): "preserved manager \(id)"
        }
    }
}

/// Who is scanning: an app session and one of its central managers.
public struct ManagerKey: Hashable, Sendable, Comparable {
    public var holder: ManagerHolder
    public var manager: UInt32

    public init(_ holder: ManagerHolder, manager: UInt32) {
        self.holder = holder
        self.manager = manager
    }

    /// A manager of a live session.
    public init(session: UInt64, manager: UInt32) { self.init(.session(session), manager: manager) }

    public static func < (a: ManagerKey, b: ManagerKey) -> Bool { (a.holder, a.manager) < (b.holder, b.manager) }
}

public struct ScanRequest: Codable, Equatable, Sendable {
    public var services: [BluetoothUUID]
    public var allowDuplicates: Bool
    public var solicited: [BluetoothUUID]

    public init(services: [BluetoothUUID] = [], allowDuplicates: Bool = false, solicited: [BluetoothUUID] = []) {
        self.services = services
        self.allowDuplicates = allowDuplicates
        self.solicited = solicited
    }

    /// Core Bluetooth's filter: no services means everything; otherwise any advertised (or solicited) service matches.
    func matches(_ advertisement: AdvertisementData) -> Bool {
        if services.isEmpty && solicited.isEmpty { return true }
        let advertised = advertisement.serviceUUIDs + advertisement.overflowServiceUUIDs
        return services.contains { wanted in
            advertised.contains(wanted) || advertisement.overflowMask.map { OverflowArea.mayContain($0, wanted) } == true
        }
            || solicited.contains { advertisement.solicitedServiceUUIDs.contains($0) }
    }
}

/// Many apps' scans merged into one controller scan (sans-IO): the controller scans while anyone does, with the
/// controller's own duplicate filter off so each scanner gets its own rule — one discovery per peripheral per scan
/// unless it asked for duplicates.
public struct ScanCoordinator: Sendable {
    private var scans: [ManagerKey: ScanRequest] = [:]
    private var reported: [ManagerKey: Set<String>] = [:]

    public init() {}

    /// Scans of suspended apps: kept, but neither run nor routed until the app returns.
    public var paused: Set<ManagerHolder> = []
    /// Holders whose duplicates are coalesced whatever they asked (background apps).
    public var coalesced: Set<ManagerHolder> = []

    public var isScanning: Bool { scans.keys.contains { !paused.contains($0.holder) } }
    public var scanners: [ManagerKey] { scans.keys.filter { !paused.contains($0.holder) }.sorted() }

    /// Starts or replaces a scan (Core Bluetooth: a new scanForPeripherals replaces the previous one).
    public mutating func start(_ key: ManagerKey, _ request: ScanRequest) {
        scans[key] = request
        reported[key] = []
    }

    public mutating func stop(_ key: ManagerKey) {
        scans[key] = nil
        reported[key] = nil
    }

    public func request(for key: ManagerKey) -> ScanRequest? { scans[key] }

    /// A preserved manager changes hands (its app went, or came back): its scan, and what it was told, go along.
    public mutating func rebind(_ old: ManagerHolder, to new: ManagerHolder) {
        for key in scans.keys where key.holder == old {
            let moved = ManagerKey(new, manager: key.manager)
            scans[moved] = scans.removeValue(forKey: key)
            reported[moved] = reported.removeValue(forKey: key)
        }
    }

    public mutating func stopAll(_ holder: ManagerHolder) {
        for key in scans.keys where key.holder == holder { stop(key) }
    }

    /// The scanners to tell about this peripheral's (merged) advertisement; `only`: just that scanner, as when a
    /// fresh scan is told of what was heard before it (the others are not marked told of what they were not told).
    public mutating func route(identifier: String, advertisement: AdvertisementData, only: ManagerKey? = nil) -> [ManagerKey] {
        var targets: [ManagerKey] = []
        for (key, request) in scans.sorted(by: { $0.key < $1.key })
        where (only == nil || key == only) && !paused.contains(key.holder) && request.matches(advertisement) {
            let duplicates = request.allowDuplicates && !coalesced.contains(key.holder)
            if reported[key, default: []].insert(identifier).inserted || duplicates { targets.append(key) }
        }
        return targets
    }
}
