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
        /// What the app presents to a restarted managerd to have it adopt this channel.
        var resumeToken: [UInt8]
        /// The publisher that opened it is gone: it waits for a successor to adopt it, carrying the app's values meanwhile.
        var orphaned = false
    }

    public struct LostLink: Equatable, Sendable {
        public var peripheral: String
        public var reason: UInt8?
    }

    /// What a session's closing meant.
    public enum Closed: Equatable, Sendable {
        /// An app's channel: its app, and whether its publisher had gone before it (nobody else will withdraw what
        /// was published for that app then; the shell does).
        case channel(app: UpdateSender, wasOrphaned: Bool)
        /// A publisher: the channels it opened, which outlive it as orphans until a successor adopts them.
        case publisher(orphaned: [SessionID])
    }

    /// A channel taken over by a restarted publisher.
    public struct Adoption: Equatable, Sendable {
        public var channel: SessionID
        /// The app's name under the publisher that went.
        public var was: UpdateSender
        /// The links the app holds as central, and the values it hears on them (link, value handle).
        public var heldLinks: [UInt16]
        public var hears: [(link: UInt16, valueHandle: UInt16)]
        /// Links it held that ended while it was orphaned: the peer as managerd named it, and the HCI reason.
        public var lost: [LostLink] = []

        public static func == (lhs: Adoption, rhs: Adoption) -> Bool {
            lhs.channel == rhs.channel && lhs.was == rhs.was && lhs.heldLinks == rhs.heldLinks && lhs.lost == rhs.lost
                && lhs.hears.map(\.link) == rhs.hears.map(\.link) && lhs.hears.map(\.valueHandle) == rhs.hears.map(\.valueHandle)
        }
    }

    private struct ValueKey: Hashable, Sendable {
        var link: UInt16
        var valueHandle: UInt16
    }

    private struct Audience: Sendable {
        /// The publisher that set it, which delivers to the rest of its audience.
        var publisher: PublisherID
        var peripheral: String
        /// By their names under the publisher that opened their channels (an orphan's, until it is adopted).
        var apps: [UpdateSender]
        var others: Bool
    }

    private var channels: [SessionID: Channel] = [:]
    /// The links each app holds as central.
    private var heldLinks: [UpdateSender: Set<UInt16>] = [:]
    private var channelOfApp: [UpdateSender: SessionID] = [:]
    private var names: [UInt16: String] = [:]
    private var audiences: [ValueKey: Audience] = [:]
    /// Links orphans' apps held that ended before a successor adopted them.
    private var lostByOrphans: [UpdateSender: [LostLink]] = [:]

    public init() {}

    public var channelCount: Int { channels.count }

    /// A channel opened for `app`; the app's earlier channel, which it replaces (the shell closes it), if any.
    public mutating func opened(_ session: SessionID, for app: UpdateSender, live: Bool, resumeToken: [UInt8] = []) -> SessionID? {
        let replaced = channelOfApp[app]
        if let replaced { channels[replaced] = nil }
        channels[session] = Channel(app: app, live: live, resumeToken: resumeToken)
        channelOfApp[app] = session
        return replaced
    }

    /// A session closed. A channel is forgotten (its app's events go through managerd again). A publisher's channels
    /// outlive it, orphaned, with their grants, held links and audiences, so that the apps' values keep flowing while
    /// a successor starts (att.proto's AdoptDataChannel); the shell closes those not adopted in time. What the
    /// publisher set for apps without a channel goes.
    public mutating func sessionClosed(_ session: SessionID) -> Closed {
        if let channel = channels.removeValue(forKey: session) {
            if channelOfApp[channel.app] == session { channelOfApp[channel.app] = nil }
            // An orphan's grants had no publisher left to take them back; a renewed channel inherits the others.
            if channel.orphaned {
                heldLinks[channel.app] = nil
                lostByOrphans[channel.app] = nil
                for key in audiences.keys { audiences[key]?.apps.removeAll { $0 == channel.app } }
                audiences = audiences.filter { !$0.value.apps.isEmpty || $0.value.others }
            }
            return .channel(app: channel.app, wasOrphaned: channel.orphaned)
        }
        let opened = channels.filter { $0.value.app.publisher == session }.map(\.key).sorted()
        for id in opened { channels[id]?.orphaned = true }
        let kept = Set(opened.compactMap { channels[$0]?.app })
        heldLinks = heldLinks.filter { $0.key.publisher != session || kept.contains($0.key) }
        for key in audiences.keys where audiences[key]?.publisher == session {
            audiences[key]?.apps.removeAll { !kept.contains($0) }
            audiences[key]?.others = false
        }
        audiences = audiences.filter { !$0.value.apps.isEmpty || $0.value.others }
        return .publisher(orphaned: opened)
    }

    /// Whether the channel's publisher is gone and no successor has adopted it yet.
    public func isOrphaned(_ session: SessionID) -> Bool { channels[session]?.orphaned == true }

    public var orphanCount: Int { channels.values.filter(\.orphaned).count }

    /// A restarted publisher takes over the orphaned channel whose app presented `token`, for the app's new session
    /// `app`: the channel, its held links and its place in audiences go by the new name. Nil when no orphan has it.
    public mutating func adopt(token: [UInt8], as app: UpdateSender, live: Bool) -> Adoption? {
        guard !token.isEmpty, let found = channels.first(where: { $0.value.orphaned && $0.value.resumeToken == token }) else { return nil }
        let (session, channel) = (found.key, found.value)
        let was = channel.app
        if let replaced = channelOfApp[app], replaced != session { channels[replaced] = nil }
        channelOfApp[was] = nil
        channelOfApp[app] = session
        channels[session] = Channel(app: app, live: live, resumeToken: channel.resumeToken)
        let held = heldLinks.removeValue(forKey: was) ?? []
        if !held.isEmpty { heldLinks[app] = held }
        var hears: [(link: UInt16, valueHandle: UInt16)] = []
        for (key, audience) in audiences where audience.apps.contains(was) {
            audiences[key]?.apps = audience.apps.map { $0 == was ? app : $0 }
            // The successor is the audience's publisher from now on: attd's broadcast of the value must skip it, as
            // it skips a publisher, or it would hand the app the value a second time, behind the channel's.
            audiences[key]?.publisher = app.publisher
            hears.append((key.link, key.valueHandle))
        }
        hears.sort { ($0.link, $0.valueHandle) < ($1.link, $1.valueHandle) }
        return Adoption(channel: session, was: was, heldLinks: held.sorted(), hears: hears, lost: lostByOrphans.removeValue(forKey: was) ?? [])
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
    /// no apps forgets it (the publisher delivers to its own audience). Apps of a publisher that went, whose orphaned
    /// channels still carry their values, keep their place until they are adopted.
    public mutating func setAudience(_ apps: [UInt64], others: Bool, of valueHandle: UInt16, on link: UInt16, peripheral: String, publisher: PublisherID) {
        let key = ValueKey(link: link, valueHandle: valueHandle)
        let orphans = (audiences[key]?.apps ?? []).filter { $0.publisher != publisher && channelOfApp[$0].map(isOrphaned) == true }
        let members = apps.map { UpdateSender(publisher: publisher, onBehalfOf: $0) } + orphans
        audiences[key] = members.isEmpty ? nil : Audience(publisher: publisher, peripheral: peripheral, apps: members, others: others)
    }

    public mutating func linkClosed(_ link: UInt16, reason: UInt8? = nil) {
        for (app, links) in heldLinks where links.contains(link) && channelOfApp[app].map(isOrphaned) == true {
            if let name = names[link] { lostByOrphans[app, default: []].append(LostLink(peripheral: name, reason: reason)) }
        }
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
            if let channel = liveChannel(of: app) {
                route.channels.append(channel)
                if app.publisher == audience.publisher { route.delivered.append(app.onBehalfOf) }
            } else if app.publisher == audience.publisher {
                route.publisherDelivers = true
            }
        }
        return route
    }
}
