import BerylCore

/// An app's lifecycle state, as iOS has them.
public enum LifecycleState: String, Sendable, CaseIterable {
    case foreground, background, suspended
    case notRunning = "not running"
}

/// What an app's managers may do in its current state, given its background modes (Core Bluetooth's background
/// execution rules).
public struct LifecyclePolicy: Equatable, Sendable {
    /// Its scans run at all.
    public var scans: Bool
    /// Every advertisement reported once per peripheral, even if the app asked for duplicates.
    public var coalesceDuplicates: Bool
    /// The scan may run at the slow background interval.
    public var slowScan: Bool
    public var advertises: Bool
    /// Background advertising: no local name, every service UUID in the overflow area, a slower interval.
    public var backgroundAdvertising: Bool
    /// Events are delivered at once (foreground, or background with the mode that wakes it); otherwise queued.
    public var deliversEvents: Bool
    /// A remote central's read or write of a dynamic value reaches the app (else it is refused at once).
    public var answersRequests: Bool

    public static func of(_ state: LifecycleState, modes: Set<BackgroundMode>) -> LifecyclePolicy {
        switch state {
        case .foreground, .notRunning:
            // Not running is only ever a preserved manager, which works as its background modes allow; an app
            // without them has nothing preserved.
            if state == .notRunning { return .of(.background, modes: modes) }
            return LifecyclePolicy(scans: true, coalesceDuplicates: false, slowScan: false, advertises: true, backgroundAdvertising: false,
                                   deliversEvents: true, answersRequests: true)
        case .background:
            let central = modes.contains(.central), peripheral = modes.contains(.peripheral)
            if !central && !peripheral {
                // A foreground-only app in the background has a few seconds before suspension; it keeps working.
                return LifecyclePolicy(scans: true, coalesceDuplicates: false, slowScan: false, advertises: true, backgroundAdvertising: false,
                                       deliversEvents: true, answersRequests: true)
            }
            return LifecyclePolicy(scans: central, coalesceDuplicates: true, slowScan: true, advertises: peripheral, backgroundAdvertising: true,
                                   deliversEvents: true, answersRequests: peripheral || central)
        case .suspended:
            return LifecyclePolicy(scans: false, coalesceDuplicates: true, slowScan: true, advertises: false, backgroundAdvertising: true,
                                   deliversEvents: false, answersRequests: false)
        }
    }
}

/// What a held event replaces: only the latest of each is worth delivering when the app returns.
public enum HeldKey: Hashable, Sendable {
    /// A discovery of the peripheral (its latest advertisement and RSSI).
    case discovery(peripheral: String)
    /// Room to send writes without response to the peripheral again.
    case readyToWrite(peripheral: String)
    /// Room to update subscribers again (its count is the latest).
    case readyToUpdate

    /// The library waits for these (canSendWriteWithoutResponse, its update queue): an app that came back without one
    /// could not send again, so they are never what a full queue lets go.
    var isReadiness: Bool {
        switch self {
        case .readyToWrite, .readyToUpdate: true
        case .discovery: false
        }
    }
}

/// Events held for a suspended app: bounded, in order, one of each `HeldKey` (the latest); when full, the oldest event
/// that is not a readiness goes.
public struct SuspendedQueue<Event>: Sendable where Event: Sendable {
    public private(set) var events: [(key: HeldKey?, event: Event)] = []
    public let capacity: Int
    public private(set) var dropped = 0

    public init(capacity: Int = 256) { self.capacity = capacity }

    /// `replacing`: the key of an event that supersedes an earlier one (nil: every such event counts).
    public mutating func append(_ event: Event, replacing key: HeldKey?) {
        if let key { events.removeAll { $0.key == key } }
        if events.count >= capacity {
            // At most one readiness per peripheral and one for updates, so a queue of them alone is a small one.
            events.remove(at: events.firstIndex { !($0.key?.isReadiness ?? false) } ?? 0)
            dropped += 1
        }
        events.append((key, event))
    }

    public mutating func drain() -> [Event] {
        defer { events.removeAll() }
        return events.map(\.event)
    }

    public var count: Int { events.count }
}
