/// The SPSMs this host listens on, host-wide, and who owns each (Core Vol 3 Part A §4.22): a fixed SPSM
/// (0x0001–0x007F, assigned by the SIG) when a profile asks for one, a dynamic one (0x0080–0x00FF) for an app that
/// publishes a channel, as Core Bluetooth's `publishL2CAPChannel` hands out. Dynamic SPSMs are handed out in turn, not
/// lowest first: a peer that cached an SPSM an app just unpublished does not reach the next app that publishes.
public struct SPSMRegistry: Sendable {
    public typealias Owner = UInt64

    public static let fixedSPSMs: ClosedRange<UInt16> = 0x0001...0x007F
    public static let dynamicSPSMs: ClosedRange<UInt16> = 0x0080...0x00FF

    public enum Refusal: Error, Equatable, Sendable {
        /// Not an SPSM of the range asked for.
        case outOfRange(UInt16)
        /// Another owner listens on it.
        case inUse(UInt16)
        /// All 128 dynamic SPSMs are published.
        case exhausted
    }

    private struct Entry: Sendable {
        var listener: CreditBasedChannels.Listener
        var owner: Owner
    }

    private var entries: [UInt16: Entry] = [:]
    private var lastDynamic: UInt16 = dynamicSPSMs.upperBound

    public init() {}

    /// A dynamic SPSM for `owner`, the one after the last handed out that is free.
    public mutating func publish(for owner: Owner, security: CreditBasedChannels.Security) -> Result<UInt16, Refusal> {
        let count = Self.dynamicSPSMs.count
        for step in 1...count {
            let spsm = Self.dynamicSPSMs.lowerBound + UInt16((Int(lastDynamic - Self.dynamicSPSMs.lowerBound) + step) % count)
            guard entries[spsm] == nil else { continue }
            lastDynamic = spsm
            entries[spsm] = Entry(listener: .init(spsm: spsm, security: security), owner: owner)
            return .success(spsm)
        }
        return .failure(.exhausted)
    }

    /// A fixed SPSM for `owner` (a profile's, such as 0x0027 for EATT or 0x0025 for OTS).
    public mutating func publish(fixed spsm: UInt16, for owner: Owner, security: CreditBasedChannels.Security) -> Result<UInt16, Refusal> {
        guard Self.fixedSPSMs.contains(spsm) else { return .failure(.outOfRange(spsm)) }
        if let entry = entries[spsm], entry.owner != owner { return .failure(.inUse(spsm)) }
        entries[spsm] = Entry(listener: .init(spsm: spsm, security: security), owner: owner)
        return .success(spsm)
    }

    /// Stops listening on `spsm`; false when `owner` does not own it.
    public mutating func unpublish(_ spsm: UInt16, by owner: Owner) -> Bool {
        guard entries[spsm]?.owner == owner else { return false }
        entries[spsm] = nil
        return true
    }

    /// The owner went (an app quit or its session ended): the SPSMs it listened on, now free.
    public mutating func ownerGone(_ owner: Owner) -> [UInt16] {
        let gone = entries.filter { $0.value.owner == owner }.keys.sorted()
        for spsm in gone { entries[spsm] = nil }
        return gone
    }

    /// Whether the owner's listeners take channels now (false: the peer hears Insufficient Authorization).
    public mutating func setAuthorized(_ authorized: Bool, for owner: Owner) {
        for (spsm, entry) in entries where entry.owner == owner { entries[spsm]?.listener.authorized = authorized }
    }

    public func listener(_ spsm: UInt16) -> CreditBasedChannels.Listener? { entries[spsm]?.listener }
    public func owner(of spsm: UInt16) -> Owner? { entries[spsm]?.owner }
    public var published: [UInt16] { entries.keys.sorted() }
}
