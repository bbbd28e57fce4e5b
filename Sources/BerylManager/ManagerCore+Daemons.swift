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

/// hcid and attd come and go under managerd, and managerd under them.
extension ManagerCore {
    /// attd's open bearers when managerd attaches to it. The GATT requests that waited for them go on; each link's
    /// holders count their writes' readies afresh (a new attd refuses nothing yet and counts from zero: an app waiting
    /// for the old one's ready would wait for ever); and the links managerd does not know — it restarted under hcid
    /// and attd, which kept them — are given back to be taken as if they had just come up, so that preserved managers
    /// get their peripherals back rather than asking the controller for a connection it has (which it refuses, 0x0B).
    public mutating func attdBearers(_ bearers: [OpenBearer]) -> (outputs: [Output], unknownLinks: [OpenBearer]) {
        var outputs: [Output] = []
        var unknown: [OpenBearer] = []
        for bearer in bearers {
            outputs += self.bearer(bearer.link, mtu: bearer.mtu)
            outputs.append(.writesReadyAfresh(link: bearer.link))
            if book.identifier(for: bearer.link) == nil, bearer.peer != nil { unknown.append(bearer) }
        }
        return (outputs, unknown)
    }

    /// hcid went: its successor resets the controller (Core Vol 4 Part E §7.3.2), so every link ends with it — the
    /// apps' and `alsoEnding` (a lab's, which no app holds) — in handle order.
    public func linksEndingWithHcid(alsoEnding: Set<UInt16>) -> [UInt16] {
        Set(book.links.values.map(\.handle)).union(alsoEnding).sorted()
    }
}
