import BerylCore

/// The central role's connections as Core Bluetooth keeps them, sans-IO, over the `ConnectionBook`: a connection
/// request never times out; a cancel is the app's own (it hears a disconnection whether or not the link stays up for
/// others); a preserved manager whose app is away keeps wanting its peripheral when the link drops; the controller is
/// asked only while it is powered on, and an attempt it refused is made again after `retryDelay`.
public struct CentralConnections: Sendable {
    public enum Event: Equatable, Sendable {
        case connected(ManagerKey, identifier: String)
        case disconnected(ManagerKey, identifier: String, reason: UInt8)
        /// The link of a preserved manager whose app is not running dropped: it is requested again, and the app hears
        /// nothing until the link is back (the guide's door lock).
        case requestedAgain(ManagerKey, identifier: String, reason: UInt8)

        public var key: ManagerKey {
            switch self {
            case .connected(let key, _), .disconnected(let key, _, _), .requestedAgain(let key, _, _): key
            }
        }
    }

    public enum Output: Equatable, Sendable {
        case event(Event)
        /// What the controller is to do; the shell lays out the HCI commands (with the own address a lab asked for).
        case controller(ConnectionBook.Action)
    }

    public enum Refusal: Error, Equatable, Sendable {
        /// The manager neither holds nor awaits that peripheral.
        case notHeld
    }

    /// How long after the controller refused LE Create Connection it is asked again.
    public static let retryDelay: Duration = .seconds(1)

    public private(set) var book = ConnectionBook()
    public private(set) var poweredOn = false
    /// When the refused attempt is made again.
    public private(set) var retryAt: Duration?

    public init() {}

    public var nextDeadline: Duration? { retryAt }

    public mutating func connect(_ key: ManagerKey, identifier: String, address: DeviceAddress) -> [Output] {
        let (already, actions) = book.connect(key, identifier: identifier, address: address)
        return (already ? [.event(.connected(key, identifier: identifier))] : []) + controller(actions)
    }

    /// Core Bluetooth reports a cancel as a disconnection to the app that asked: with Connection Terminated By Local
    /// Host (0x16, Core Vol 1 Part F §2) when it held the link, with no reason when it was only waiting.
    public mutating func cancel(_ key: ManagerKey, identifier: String) throws(Refusal) -> [Output] {
        let held = book.link(for: identifier)?.holders.contains(key) ?? false
        let (wasHeld, actions) = book.cancel(key, identifier: identifier)
        guard wasHeld else { throw .notHeld }
        return controller(actions) + [.event(.disconnected(key, identifier: identifier, reason: held ? 0x16 : 0))]
    }

    public mutating func linkUp(handle: UInt16, identifier: String, address: DeviceAddress, isCentral: Bool) -> [Output] {
        let (holders, actions) = book.connected(identifier: identifier, handle: handle, address: address, isCentral: isCentral)
        return holders.sorted().map { .event(.connected($0, identifier: identifier)) } + controller(actions)
    }

    /// A manager holds links that are up already without asking for them (its app kept them, and its data channel,
    /// through managerd's restart): no event, no controller work. Returns the handles it now holds.
    public mutating func adopt(_ key: ManagerKey, links handles: [UInt16]) -> [UInt16] {
        handles.filter { book.hold(key, handle: $0) }
    }

    /// The controller's attempt ended without a link (failed, or cancelled to change the set): the next one is planned.
    public mutating func attemptEnded() -> [Output] {
        retryAt = nil
        return controller(book.attemptEnded())
    }

    /// The controller answered a connection action's last command: a refused attempt, to one peer or through the
    /// filter accept list, is made again after `retryDelay`. True when it was one.
    public mutating func answered(_ action: ConnectionBook.Action, status: UInt8, at now: Duration) -> Bool {
        switch action {
        case .connect, .connectAny:
            guard status != 0 else { return false }
            attemptRefused(at: now)
            return true
        case .cancelConnect, .disconnect:
            return false
        }
    }

    /// LE Create Connection was refused with a status: asked again after `retryDelay`.
    public mutating func attemptRefused(at now: Duration) {
        retryAt = now + Self.retryDelay
    }

    public mutating func tick(at now: Duration) -> [Output] {
        guard let retryAt, retryAt <= now else { return [] }
        return attemptEnded()
    }

    /// A link ended. `isAway` says whether a holder is a preserved manager whose app is not running; those ask again.
    public mutating func linkDown(handle: UInt16, reason: UInt8, isAway: (ManagerHolder) -> Bool) -> (identifier: String, outputs: [Output])? {
        let address = book.identifier(for: handle).flatMap { book.link(for: $0)?.address }
        guard let (identifier, holders, resumed) = book.disconnected(handle: handle), let address else { return nil }
        var events: [Output] = []
        var actions = resumed
        for key in holders.sorted() {
            if isAway(key.holder) {
                actions += book.connect(key, identifier: identifier, address: address).actions
                events.append(.event(.requestedAgain(key, identifier: identifier, reason: reason)))
            } else {
                events.append(.event(.disconnected(key, identifier: identifier, reason: reason)))
            }
        }
        return (identifier, events + controller(actions))
    }

    /// Everything a holder held or awaited goes with it (an app that ended, a lab that closed).
    public mutating func releaseAll(_ holder: ManagerHolder) -> [Output] { controller(book.releaseAll(holder)) }

    public mutating func rebind(_ old: ManagerHolder, to new: ManagerHolder) { book.rebind(old, to: new) }

    /// A controller that comes back powered on forgot every attempt: the pending set is asked for again.
    public mutating func controller(poweredOn: Bool) -> [Output] {
        self.poweredOn = poweredOn
        return poweredOn ? attemptEnded() : []
    }

    private func controller(_ actions: [ConnectionBook.Action]) -> [Output] {
        poweredOn ? actions.map(Output.controller) : []
    }
}
