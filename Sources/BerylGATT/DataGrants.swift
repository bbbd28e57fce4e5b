/// Apps' data channels (att.proto's OpenDataChannel), sans-IO: which of attd's sessions carries which app's values,
/// whether that app's grant is live, the identifiers managerd gave links' peers, and which apps hear a peripheral's
/// value on a link. A channel acts only for its own app, only while the grant is live, and only on what that app owns
/// (the values of services published for it, centrals managerd named); what is addressed to an app goes on its channel
/// while the grant is live and through managerd otherwise, so that managerd's lifecycle rules (holding, waking) still
/// see everything a background app is handed. managerd gives and takes back grants; attd enforces them here.
public struct DataGrants: Sendable {
    public typealias SessionID = UInt64

    /// Why a channel's request is refused (att.proto's GrantReason).
    public enum Refusal: Error, Equatable, Sendable {
        /// The app is not in the foreground, or its grant was never live: its data goes through managerd.
        case revoked
        /// A value, link or central its app does not own.
        case outsideGrant(String)
        /// A request a data channel does not carry (a publisher's or a security request).
        case notADataOperation
    }

    /// Where a peripheral's notification on a link goes: the channels of the audience's live apps, and the audience's
    /// other apps, which managerd (the publisher that set the audience) delivers to.
    public struct NotificationRoute: Equatable, Sendable {
        public var peripheral: String
        public var channels: [SessionID]
        public var publisher: PublisherID
        /// The apps whose channels carry it; the publisher delivers to the rest of its audience.
        public var delivered: [UInt64]
        /// Whether the publisher has anyone left to deliver to (an app without a live channel, or other listeners).
        public var publisherDelivers: Bool
    }

    private struct Channel: Sendable {
        var app: UpdateSender
        var live: Bool
    }

    private struct ValueKey: Hashable, Sendable {
        var link: UInt16
        var valueHandle: UInt16
    }

    private struct Audience: Sendable {
        var publisher: PublisherID
        var peripheral: String
        var apps: [UInt64]
        var others: Bool
    }

    private var channels: [SessionID: Channel] = [:]
    /// The links each app holds as central.
    private var heldLinks: [UpdateSender: Set<UInt16>] = [:]
    private var channelOfApp: [UpdateSender: SessionID] = [:]
    private var names: [UInt16: String] = [:]
    private var audiences: [ValueKey: Audience] = [:]

    public init() {}

    public var channelCount: Int { channels.count }

    /// A channel opened for `app`; the app's earlier channel, which it replaces (the shell closes it), if any.
    public mutating func opened(_ session: SessionID, for app: UpdateSender, live: Bool) -> SessionID? {
        let replaced = channelOfApp[app]
        if let replaced { channels[replaced] = nil }
        channels[session] = Channel(app: app, live: live)
        channelOfApp[app] = session
        return replaced
    }

    /// A session closed: a channel is forgotten (its app's events go through managerd again); for a publisher, the
    /// channels it opened, which the shell closes (their grants came from it), and the audiences it set.
    public mutating func sessionClosed(_ session: SessionID) -> [SessionID] {
        if let channel = channels.removeValue(forKey: session) {
            if channelOfApp[channel.app] == session { channelOfApp[channel.app] = nil }
            return []
        }
        heldLinks = heldLinks.filter { $0.key.publisher != session }
        let opened = channels.filter { $0.value.app.publisher == session }.map(\.key).sorted()
        for id in opened { _ = sessionClosed(id) }
        audiences = audiences.filter { $0.value.publisher != session }
        return opened
    }

    public func isChannel(_ session: SessionID) -> Bool { channels[session] != nil }

    /// The app's channel, live or not.
    public func channel(of app: UpdateSender) -> SessionID? { channelOfApp[app] }

    /// managerd turned the app's grant live or revoked it; the channel to tell, when it has one and the grant changed.
    public mutating func setLive(_ app: UpdateSender, _ live: Bool) -> SessionID? {
        guard let session = channelOfApp[app], channels[session]?.live != live else { return nil }
        channels[session]?.live = live
        return session
    }

    /// The channel that carries what is addressed to the app now: nil without one, or while its grant is revoked.
    public func liveChannel(of app: UpdateSender) -> SessionID? {
        guard let session = channelOfApp[app], channels[session]?.live == true else { return nil }
        return session
    }

    /// The channel's app, live or not (an answer it owes is taken even after its grant was revoked).
    public func app(of session: SessionID) -> UpdateSender? { channels[session]?.app }

    /// The identifier managerd gave a link's peer.
    public func name(of link: UInt16) -> String? { names[link] }

    /// The app a channel's request acts for: the channel's own, never one the request names.
    public func admit(_ session: SessionID) -> Result<UpdateSender, Refusal> {
        guard let channel = channels[session] else { return .failure(.notADataOperation) }
        return channel.live ? .success(channel.app) : .failure(.revoked)
    }

    // MARK: Links and audiences

    /// managerd's identifier for the peer of a link (empty: forgotten).
    public mutating func name(_ link: UInt16, _ identifier: String) {
        names[link] = identifier.isEmpty ? nil : identifier.uppercased()
    }

    /// The links of the centrals named, as managerd named them; centrals on no link are left out.
    public func links(named identifiers: [String]) -> [UInt16] {
        let wanted = Set(identifiers.map { $0.uppercased() })
        return names.filter { wanted.contains($0.value) }.map(\.key).sorted()
    }

    /// The links the app holds as central now (managerd's word), replacing what it held before.
    public mutating func setLinks(_ links: Set<UInt16>, heldBy app: UpdateSender) {
        heldLinks[app] = links.isEmpty ? nil : links
    }

    /// The link to the peripheral the app names, when the app holds it.
    public func link(to peripheral: String, heldBy app: UpdateSender) -> Result<UInt16, Refusal> {
        let wanted = peripheral.uppercased()
        guard let link = names.first(where: { $0.value == wanted })?.key, heldLinks[app]?.contains(link) == true else {
            return .failure(.outsideGrant("this app holds no link to \(peripheral)"))
        }
        return .success(link)
    }

    /// Which apps of `publisher` hear the value on the link, and whether others (that are no running app) do too;
    /// no apps forgets it (the publisher delivers to its own audience).
    public mutating func setAudience(_ apps: [UInt64], others: Bool, of valueHandle: UInt16, on link: UInt16, peripheral: String, publisher: PublisherID) {
        let key = ValueKey(link: link, valueHandle: valueHandle)
        audiences[key] = apps.isEmpty ? nil : Audience(publisher: publisher, peripheral: peripheral, apps: apps, others: others)
    }

    public mutating func linkClosed(_ link: UInt16) {
        names[link] = nil
        for app in heldLinks.keys { heldLinks[app]?.remove(link) }
        audiences = audiences.filter { $0.key.link != link }
    }

    /// Where a notification of the value on the link goes; nil when no audience was set (managerd delivers it).
    public func route(notificationOf valueHandle: UInt16, on link: UInt16) -> NotificationRoute? {
        guard let audience = audiences[ValueKey(link: link, valueHandle: valueHandle)] else { return nil }
        var route = NotificationRoute(peripheral: audience.peripheral, channels: [], publisher: audience.publisher, delivered: [],
                                      publisherDelivers: audience.others)
        for app in audience.apps {
            if let channel = liveChannel(of: UpdateSender(publisher: audience.publisher, onBehalfOf: app)) {
                route.channels.append(channel)
                route.delivered.append(app)
            } else {
                route.publisherDelivers = true
            }
        }
        return route
    }
}
