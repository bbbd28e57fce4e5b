import BerylATT
import BerylCore

/// Who publishes a service over attd's socket.
public typealias PublisherID = UInt64

/// attd's server side between the peers and the apps that publish services, sans-IO: which publisher owns which
/// handles, the answers publishers owe the peers' reads and writes (each with a deadline, after which the peer gets
/// Unlikely Error rather than silence until its 30-second ATT timeout, Core Vol 3 Part F §3.3.3), and what goes
/// when a publisher does.
public struct ServiceRouter: Sendable {
    public struct Owner: Equatable, Sendable {
        public var range: ClosedRange<UInt16>
        public var publisher: PublisherID
        /// The app the publisher added it for (att.proto's PublishService.on_behalf_of; 0: its own).
        public var app: UInt64
    }

    /// A peer's request a publisher must answer.
    public struct OwedAnswer: Equatable, Sendable {
        public var link: UInt16
        /// The link's ATT server's id for the request.
        public var serverID: UInt64
        public var isRead: Bool
        public var offset: UInt16
        public var publisher: PublisherID
        public var deadline: Duration
        /// The app whose values were asked for (0: the publisher's own).
        public var app: UInt64

        public init(link: UInt16, serverID: UInt64, isRead: Bool, offset: UInt16, publisher: PublisherID, deadline: Duration, app: UInt64 = 0) {
            self.link = link
            self.serverID = serverID
            self.isRead = isRead
            self.offset = offset
            self.publisher = publisher
            self.deadline = deadline
            self.app = app
        }
    }

    public enum AnswerError: Error, Equatable, Sendable {
        /// Answered already, timed out, its link gone, or the other kind (a read answered as a write).
        case notPending
        /// Owed by another app than the one answering (on a data channel).
        case anotherApps
    }

    public let answerTimeout: Duration
    public private(set) var owners: [Owner] = []
    private var owed: [UInt64: OwedAnswer] = [:]
    private var nextAnswerID: UInt64 = 1

    public init(answerTimeout: Duration) { self.answerTimeout = answerTimeout }

    // MARK: Owners

    public func owner(of handle: UInt16) -> PublisherID? { owners.first { $0.range.contains(handle) }?.publisher }

    /// The publisher and app a handle's service was published by and for.
    public func ownerApp(of handle: UInt16) -> UpdateSender? {
        owners.first { $0.range.contains(handle) }.map { UpdateSender(publisher: $0.publisher, onBehalfOf: $0.app) }
    }

    public func owns(_ publisher: PublisherID, _ handle: UInt16) -> Bool {
        owners.contains { $0.publisher == publisher && $0.range.contains(handle) }
    }

    /// Whether the handle is in a service published for the app (a data channel's grant: its app's own values).
    public func owns(_ handle: UInt16, for app: UpdateSender) -> Bool {
        owners.contains { $0.publisher == app.publisher && $0.app == app.onBehalfOf && $0.range.contains(handle) }
    }

    public mutating func published(_ range: ClosedRange<UInt16>, by publisher: PublisherID, for app: UInt64 = 0) {
        owners.append(Owner(range: range, publisher: publisher, app: app))
    }

    /// The range of the publisher's service starting at `start`, now no longer routed; nil when it has none there.
    public mutating func unpublish(startingAt start: UInt16, by publisher: PublisherID) -> ClosedRange<UInt16>? {
        guard let index = owners.firstIndex(where: { $0.range.lowerBound == start && $0.publisher == publisher }) else { return nil }
        return owners.remove(at: index).range
    }

    /// The publisher went away: its ranges, for the shell to remove and announce, and the answers it still owed,
    /// oldest first, for the shell to fail at once rather than at their deadlines — but for the apps in `kept`, whose
    /// data channels outlive it: their services stay, and their answers can still come on their channels.
    public mutating func publisherGone(_ publisher: PublisherID, keeping kept: Set<UInt64> = []) -> (ranges: [ClosedRange<UInt16>], unanswered: [OwedAnswer]) {
        gone { $0 == publisher && !kept.contains($1) }
    }

    /// One app's services and owed answers go (its orphaned channel was not adopted in time, or closed).
    public mutating func appGone(_ app: UpdateSender) -> (ranges: [ClosedRange<UInt16>], unanswered: [OwedAnswer]) {
        gone { $0 == app.publisher && $1 == app.onBehalfOf }
    }

    private mutating func gone(_ goes: (PublisherID, UInt64) -> Bool) -> (ranges: [ClosedRange<UInt16>], unanswered: [OwedAnswer]) {
        let ranges = owners.filter { goes($0.publisher, $0.app) }.map(\.range)
        owners.removeAll { goes($0.publisher, $0.app) }
        let unanswered = owed.filter { goes($0.value.publisher, $0.value.app) }.sorted { $0.key < $1.key }
        for (id, _) in unanswered { owed[id] = nil }
        return (ranges, unanswered.map(\.value))
    }

    /// The ranges of the services published for the app, in handle order.
    public func ranges(of app: UpdateSender) -> [ClosedRange<UInt16>] {
        owners.filter { $0.publisher == app.publisher && $0.app == app.onBehalfOf }.map(\.range).sorted { $0.lowerBound < $1.lowerBound }
    }

    /// The app's services and the answers it owes, under its new name (a restarted publisher adopted its channel).
    public mutating func rebind(_ old: UpdateSender, to new: UpdateSender) {
        for index in owners.indices where owners[index].publisher == old.publisher && owners[index].app == old.onBehalfOf {
            (owners[index].publisher, owners[index].app) = (new.publisher, new.onBehalfOf)
        }
        for (id, answer) in owed where answer.publisher == old.publisher && answer.app == old.onBehalfOf {
            (owed[id]!.publisher, owed[id]!.app) = (new.publisher, new.onBehalfOf)
        }
    }

    // MARK: Answers owed

    /// Remembers an answer the publisher owes; the id is what the publisher answers with.
    public mutating func owe(link: UInt16, serverID: UInt64, isRead: Bool, offset: UInt16, by publisher: PublisherID, for app: UInt64 = 0,
                             at now: Duration) -> UInt64 {
        let id = nextAnswerID
        nextAnswerID += 1
        owed[id] = OwedAnswer(link: link, serverID: serverID, isRead: isRead, offset: offset, publisher: publisher, deadline: now + answerTimeout, app: app)
        return id
    }

    /// A peer's read or write of published values (`handles`: the read's, or each queued write's of an Execute Write)
    /// goes to the live publisher (or live app channel, `isLive`) that holds them all, owing an answer under the returned id when the peer waits for
    /// one (0 for a write command); nil when no one live publisher does, and the peer is answered Unlikely Error (a
    /// write command is dropped): one publisher is never handed another's values.
    public mutating func route(handles: [UInt16], link: UInt16, serverID: UInt64, isRead: Bool, offset: UInt16, expectsAnswer: Bool,
                               isLive: (UpdateSender) -> Bool, at now: Duration) -> (owner: UpdateSender, answerID: UInt64)? {
        let owners = Set(handles.map { ownerApp(of: $0) })
        guard owners.count == 1, let owner = owners.first ?? nil, isLive(owner) else { return nil }
        let id = expectsAnswer ? owe(link: link, serverID: serverID, isRead: isRead, offset: offset, by: owner.publisher, for: owner.onBehalfOf, at: now) : 0
        return (owner, id)
    }

    /// Takes the answer given now: by the publisher, or (`by`) on the data channel of the app whose values were asked for.
    public mutating func answer(_ id: UInt64, isRead: Bool, by app: UpdateSender? = nil) throws(AnswerError) -> OwedAnswer {
        guard let answer = owed[id], answer.isRead == isRead else { throw .notPending }
        if let app, app != UpdateSender(publisher: answer.publisher, onBehalfOf: answer.app) { throw .anotherApps }
        owed[id] = nil
        return answer
    }

    /// Answers whose time ran out, oldest first: the shell fails each with Unlikely Error.
    public mutating func expired(at now: Duration) -> [(id: UInt64, answer: OwedAnswer)] {
        let due = owed.filter { $0.value.deadline <= now }.sorted { $0.key < $1.key }
        for (id, _) in due { owed[id] = nil }
        return due.map { ($0.key, $0.value) }
    }

    public var nextDeadline: Duration? { owed.values.map(\.deadline).min() }

    /// The link is gone: nobody is owed anything on it.
    public mutating func linkClosed(_ link: UInt16) {
        owed = owed.filter { $0.value.link != link }
    }
}
