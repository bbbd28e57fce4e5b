import BerylCore

/// An ATT bearer attd has open, as it lists them when managerd attaches (attd and hcid may have outlived managerd).
public struct OpenBearer: Equatable, Sendable {
    public var link: UInt16
    public var mtu: UInt16
    /// nil when attd's word for the peer does not read as an address.
    public var peer: DeviceAddress?
    public var isCentral: Bool

    public init(link: UInt16, mtu: UInt16, peer: DeviceAddress?, isCentral: Bool) {
        self.link = link
        self.mtu = mtu
        self.peer = peer
        self.isCentral = isCentral
    }
}

/// The links managerd knows are the ones attd tells it of: attd says a link opened before anything else about it and
/// that it closed after everything else, so nothing about a link (a subscription, a request) reaches managerd before
/// the link does. hcid's own events are for what only managerd asked of the controller (a connection attempt failing).
extension ManagerCore {
    /// What attd's opening a bearer means for the links managerd knows.
    public enum BearerNews: Equatable, Sendable {
        /// A link managerd did not know: it came up.
        case linkUp
        /// A link managerd knows already (a new attd took it over): only its bearer is news.
        case bearerOnly
        /// The handle is another peer's now: the link managerd knew ended while attd was away, then this one came up.
        case replacesEndedLink
    }

    public func news(of bearer: OpenBearer) -> BearerNews {
        guard let identifier = book.identifier(for: bearer.link) else { return .linkUp }
        return book.link(for: identifier)?.address == bearer.peer ? .bearerOnly : .replacesEndedLink
    }

    /// attd's open bearers when managerd attaches to it, or as a new attd took over hcid's. The GATT requests that
    /// waited for them go on; each link's holders count their writes' readies afresh (a new attd refuses nothing yet
    /// and counts from zero: an app waiting for the old one's ready would wait for ever); the links managerd does not
    /// know — it restarted under hcid and attd, which kept them — are given back to be taken as if they had just come
    /// up, so that preserved managers get their peripherals back rather than asking the controller for a connection it
    /// has (which it refuses, 0x0B); and, when the list is `complete` (attd has every link hcid has), the links managerd
    /// knows that are not in it — and of `alsoKnown`, a lab's, which no app holds — ended while attd was away.
    public mutating func attdBearers(_ bearers: [OpenBearer], complete: Bool, alsoKnown: Set<UInt16> = [])
        -> (outputs: [Output], unknownLinks: [OpenBearer], endedLinks: [UInt16]) {
        var outputs: [Output] = []
        var unknown: [OpenBearer] = []
        for bearer in bearers {
            outputs += self.bearer(bearer.link, mtu: bearer.mtu)
            outputs.append(.writesReadyAfresh(link: bearer.link))
            if book.identifier(for: bearer.link) == nil, bearer.peer != nil { unknown.append(bearer) }
        }
        let ended = complete ? knownLinks(alsoKnown: alsoKnown).subtracting(bearers.map(\.link)).sorted() : []
        return (outputs, unknown, ended)
    }

    /// hcid went: its successor resets the controller (Core Vol 4 Part E §7.3.2), so every link ends with it — the
    /// apps' and `alsoEnding` (a lab's, which no app holds) — in handle order. managerd sees hcid go itself and ends
    /// them at once; attd's closing them after (stack failed) then names links managerd no longer has.
    public func linksEndingWithHcid(alsoEnding: Set<UInt16>) -> [UInt16] {
        knownLinks(alsoKnown: alsoEnding).sorted()
    }

    /// The links managerd has: the apps' (the book's) and `alsoKnown` (a lab's, which no app holds). attd's closing
    /// any other is past news (managerd ended it itself when hcid went).
    public func knownLinks(alsoKnown: Set<UInt16>) -> Set<UInt16> {
        Set(book.links.values.map(\.handle)).union(alsoKnown)
    }
}
