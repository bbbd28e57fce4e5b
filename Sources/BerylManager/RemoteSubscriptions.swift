/// Which managers asked a connected peripheral's value to notify. Core Bluetooth's setNotifyValue is per app, while a
/// peripheral keeps one Client Characteristic Configuration per client (Core Vol 3 Part G §3.3.3.3), and apps on
/// this stack share one link to a peripheral: the descriptor is written when the first manager subscribes and cleared
/// when the last lets go — by unsubscribing, cancelling its connection, or going away without being preserved.
public struct RemoteSubscriptions: Sendable, Equatable {
    public struct Value: Hashable, Sendable, Comparable {
        public var link: UInt16
        public var valueHandle: UInt16

        public init(link: UInt16, valueHandle: UInt16) {
            self.link = link
            self.valueHandle = valueHandle
        }

        public static func < (a: Value, b: Value) -> Bool { (a.link, a.valueHandle) < (b.link, b.valueHandle) }
    }

    /// A descriptor to clear: its last subscriber went.
    public struct Clearing: Equatable, Sendable {
        public var value: Value
        public var cccdHandle: UInt16

        public init(value: Value, cccdHandle: UInt16) {
            self.value = value
            self.cccdHandle = cccdHandle
        }
    }

    private struct Entry: Equatable {
        var holders: Set<ManagerHolder>
        var cccdHandle: UInt16
        /// The peripheral answered a descriptor write for it: until then each subscriber writes it (one that fails
        /// leaves none answered for a write that never happened).
        var written = false
    }

    private var entries: [Value: Entry] = [:]

    public init() {}

    /// setNotifyValue from `holder`: true when the peripheral's descriptor is to be written (the first to subscribe,
    /// or one subscribing before that write was answered, or the last to let go, or one this stack does not know to
    /// be subscribed); false when another manager's written subscription already stands for it (answered at once).
    public mutating func request(_ enable: Bool, _ value: Value, cccdHandle: UInt16, by holder: ManagerHolder) -> Bool {
        var entry = entries[value] ?? Entry(holders: [], cccdHandle: cccdHandle)
        let others = entry.holders.subtracting([holder])
        if enable { entry.holders.insert(holder) } else { entry.holders.remove(holder) }
        entries[value] = entry.holders.isEmpty ? nil : entry
        return others.isEmpty || (enable && !entry.written)
    }

    /// A subscription that stands already (kept by a preserved manager's record); its descriptor handle is not known,
    /// and attd takes the one after the value when it clears it.
    public mutating func adopt(_ value: Value, by holder: ManagerHolder) {
        entries[value, default: Entry(holders: [], cccdHandle: 0)].holders.insert(holder)
        entries[value]?.written = true
    }

    /// The peripheral took a subscription's descriptor write.
    public mutating func subscribed(_ value: Value) { entries[value]?.written = true }

    /// The descriptor write for a subscription failed: the holder is not subscribed.
    public mutating func subscribeFailed(_ value: Value, by holder: ManagerHolder) {
        entries[value]?.holders.remove(holder)
        if entries[value]?.holders.isEmpty == true { entries[value] = nil }
    }

    /// Who hears a value notified on a link: its subscribers, or nil when this stack does not know them (every
    /// holder of the link then hears it, as before managerd restarted under it).
    public func listeners(of value: Value) -> Set<ManagerHolder>? { entries[value]?.holders }

    public func holders(of value: Value) -> Set<ManagerHolder> { entries[value]?.holders ?? [] }

    /// The holder lets go of every subscription (on `link` only, when given); returns the descriptors nobody wants now.
    public mutating func release(_ holder: ManagerHolder, on link: UInt16? = nil) -> [Clearing] {
        var clearing: [Clearing] = []
        for (value, entry) in entries.sorted(by: { $0.key < $1.key }) where entry.holders.contains(holder) && (link == nil || value.link == link) {
            let remaining = entry.holders.subtracting([holder])
            if remaining.isEmpty {
                entries[value] = nil
                clearing.append(Clearing(value: value, cccdHandle: entry.cccdHandle))
            } else {
                entries[value]?.holders = remaining
            }
        }
        return clearing
    }

    /// A preserved manager's subscriptions are its app's again, or the other way round.
    public mutating func rebind(_ old: ManagerHolder, to new: ManagerHolder) {
        for (value, entry) in entries where entry.holders.contains(old) {
            entries[value]?.holders.remove(old)
            entries[value]?.holders.insert(new)
        }
    }

    /// The link went, and every descriptor on it with it (a bonded peer keeps its own copy, §3.3.3.3).
    public mutating func linkClosed(_ link: UInt16) {
        entries = entries.filter { $0.key.link != link }
    }
}
