import BerylCore
import BerylHCI

/// Links and who holds them (sans-IO). A connect request never times out; a cancel is app-local and the link goes
/// down only when no one holds it; several pending peripherals are connected through the filter accept list.
public struct ConnectionBook: Sendable {
    public enum Action: Equatable, Sendable {
        /// LE Create Connection to one peer.
        case connect(DeviceAddress)
        /// Replace the filter accept list and connect to whichever of them shows up first.
        case connectAny([DeviceAddress])
        case cancelConnect
        case disconnect(handle: UInt16)
    }

    public struct Link: Equatable, Sendable {
        public var handle: UInt16
        public var address: DeviceAddress
        public var isCentral: Bool
        public var holders: Set<ManagerKey>
        /// No one holds it and its Disconnect is under way: not to be handed to a new connect.
        public var dropping = false
    }

    /// Peripheral identifier → who is waiting for it, and at which address.
    private var pending: [String: (address: DeviceAddress, waiting: Set<ManagerKey>)] = [:]
    public private(set) var links: [String: Link] = [:]
    /// What the controller is doing now.
    private var attempt: [DeviceAddress]?
    private var cancelling = false

    public init() {}

    public var pendingIdentifiers: [String] { pending.keys.sorted() }

    public func link(for identifier: String) -> Link? { links[identifier] }
    public func identifier(for handle: UInt16) -> String? { links.first { $0.value.handle == handle }?.key }

    public mutating func connect(_ key: ManagerKey, identifier: String, address: DeviceAddress) -> (alreadyConnected: Bool, actions: [Action]) {
        // A link on its way down is not handed out: the request waits for it to end, then connects anew.
        if var link = links[identifier], !link.dropping {
            link.holders.insert(key)
            links[identifier] = link
            return (true, [])
        }
        pending[identifier, default: (address, [])].waiting.insert(key)
        pending[identifier]?.address = address
        return (false, replan())
    }

    /// The key holds the link already up (its app kept it through managerd's restart): nothing goes on the air and
    /// nobody is told. False when the link is not known or is on its way down.
    public mutating func hold(_ key: ManagerKey, handle: UInt16) -> Bool {
        guard let identifier = identifier(for: handle), var link = links[identifier], !link.dropping else { return false }
        link.holders.insert(key)
        links[identifier] = link
        return true
    }

    /// App-local cancel; returns whether the key held or awaited the peripheral.
    public mutating func cancel(_ key: ManagerKey, identifier: String) -> (wasHeld: Bool, actions: [Action]) {
        if var entry = pending[identifier], entry.waiting.remove(key) != nil {
            pending[identifier] = entry.waiting.isEmpty ? nil : entry
            return (true, replan())
        }
        guard var link = links[identifier], link.holders.remove(key) != nil else { return (false, []) }
        link.dropping = link.holders.isEmpty && link.isCentral
        links[identifier] = link
        return (true, link.dropping ? [.disconnect(handle: link.handle)] : [])
    }

    /// The peripherals a manager holds a link to, and those it waits for.
    public func held(by key: ManagerKey) -> (connected: [String], pending: [String]) {
        (links.filter { $0.value.holders.contains(key) }.keys.sorted(), pending.filter { $0.value.waiting.contains(key) }.keys.sorted())
    }

    /// A preserved manager changes hands: its links and waits move to the new holder, nothing goes on the air.
    public mutating func rebind(_ old: ManagerHolder, to new: ManagerHolder) {
        func move(_ keys: Set<ManagerKey>) -> Set<ManagerKey> {
            Set(keys.map { $0.holder == old ? ManagerKey(new, manager: $0.manager) : $0 })
        }
        for (identifier, entry) in pending { pending[identifier]?.waiting = move(entry.waiting) }
        for (identifier, link) in links { links[identifier]?.holders = move(link.holders) }
    }

    /// Everything a holder held or awaited goes with it.
    public mutating func releaseAll(_ holder: ManagerHolder) -> [Action] {
        var actions: [Action] = []
        for (identifier, var entry) in pending {
            entry.waiting = entry.waiting.filter { $0.holder != holder }
            pending[identifier] = entry.waiting.isEmpty ? nil : entry
        }
        for (identifier, var link) in links {
            let before = link.holders.count
            link.holders = link.holders.filter { $0.holder != holder }
            if before > 0, link.holders.isEmpty, link.isCentral {
                link.dropping = true
                actions.append(.disconnect(handle: link.handle))
            }
            links[identifier] = link
        }
        return actions + replan()
    }

    /// A link came up: the waiting managers now hold it. Returns them (to tell) and what to do next.
    public mutating func connected(identifier: String, handle: UInt16, address: DeviceAddress, isCentral: Bool) -> (holders: Set<ManagerKey>, actions: [Action]) {
        if isCentral {
            attempt = nil
            cancelling = false
        }
        let waiting = isCentral ? pending.removeValue(forKey: identifier)?.waiting ?? [] : []
        links[identifier] = Link(handle: handle, address: address, isCentral: isCentral, holders: waiting)
        return (waiting, replan())
    }

    /// The controller's connection attempt ended without a link (cancelled or failed): try again.
    public mutating func attemptEnded() -> [Action] {
        attempt = nil
        cancelling = false
        return replan()
    }

    /// A link ended: its holders (to tell), and the connection attempt to make if someone asked for the peer while
    /// the link was going down.
    public mutating func disconnected(handle: UInt16) -> (identifier: String, holders: Set<ManagerKey>, actions: [Action])? {
        guard let identifier = identifier(for: handle), let link = links.removeValue(forKey: identifier) else { return nil }
        return (identifier, link.holders, replan())
    }

    /// The controller's attempt follows the pending set: one peer directly, several through the accept list.
    private mutating func replan() -> [Action] {
        // A peer still linked (its link going down) cannot be connected again until the link has ended.
        let wanted = pending.filter { links[$0.key] == nil }.values.map(\.address).sorted { $0.description < $1.description }
        guard wanted != (attempt ?? []) else { return [] }
        if attempt != nil {
            // A different set: stop the current attempt; its end (status 0x02) replans.
            guard !cancelling else { return [] }
            cancelling = true
            return [.cancelConnect]
        }
        guard !wanted.isEmpty else { return [] }
        attempt = wanted
        return [wanted.count == 1 ? .connect(wanted[0]) : .connectAny(wanted)]
    }
}

extension ConnectionBook.Action {
    /// The HCI commands that carry the action out, as `ownAddressType` (the lab's random address, or the controller's
    /// identity). No timeout: LE Create Connection waits until the peer advertises or is cancelled (Core Vol 4 Part E
    /// §7.8.12); several peers go through the filter accept list, and whichever is heard first connects.
    public func commands(ownAddressType: UInt8) -> [HCICommandPacket] {
        switch self {
        case .connect(let address):
            [HCICommands.leCreateConnection(peer: address, interval: 24, supervisionTimeout: 200, ownAddressType: ownAddressType)]
        case .connectAny(let addresses):
            [HCICommands.leClearFilterAcceptList] + addresses.map(HCICommands.leAddDeviceToFilterAcceptList)
                + [HCICommands.leCreateConnection(peer: addresses[0], interval: 24, supervisionTimeout: 200, useFilterAcceptList: true,
                                                  ownAddressType: ownAddressType)]
        case .cancelConnect:
            [HCICommands.leCreateConnectionCancel]
        case .disconnect(let handle):
            [HCICommands.disconnect(handle: handle)]
        }
    }
}
