/// A lab's factory reset as steps on virtual time: the lab's work ends and (unless kept) its bonds go; every link is
/// ended first, so that its peer hears so now rather than at its supervision timeout, as BlueZ does before powering a
/// controller off; once they are down, or after `linkGrace`, the controller is reset (HCI Reset, Core Vol 4 Part E
/// §7.3.2); then the identifiers only the lab made known are forgotten, and the lab is answered.
public struct LabReset: Sendable {
    public enum Output: Equatable, Sendable {
        /// The lab's advertising, scan, connection attempt and its own links end; its records stay.
        case endLabWork
        case removeLabBonds
        case disconnect(handle: UInt16)
        case resetController
        case forgetLabPeripherals
        /// The reset is over: the lab hears it succeeded, or why not.
        case finished(failure: String?)
    }

    public enum Refusal: Error, Equatable, Sendable {
        case underWay
    }

    /// How long the links have to end before the controller is reset anyway.
    public static let linkGrace: Duration = .seconds(1)

    private enum Phase: Equatable, Sendable {
        case idle
        case linksEnding(open: Set<UInt16>, deadline: Duration)
        case resettingController
    }

    private var phase = Phase.idle
    private var keepBonds = true

    public init() {}

    public var isUnderWay: Bool { phase != .idle }
    /// Apps stay poweredOn through the controller's reset: their database and managers are intact.
    public var isResettingController: Bool { phase == .resettingController }

    public var nextDeadline: Duration? {
        if case .linksEnding(_, let deadline) = phase { deadline } else { nil }
    }

    public mutating func start(keepBonds: Bool, links: Set<UInt16>, at now: Duration) throws(Refusal) -> [Output] {
        guard phase == .idle else { throw .underWay }
        self.keepBonds = keepBonds
        phase = .linksEnding(open: links, deadline: now + Self.linkGrace)
        return [.endLabWork] + (keepBonds ? [] : [.removeLabBonds]) + links.sorted().map { .disconnect(handle: $0) } + advance(at: now)
    }

    public mutating func linkEnded(_ handle: UInt16, at now: Duration) -> [Output] {
        guard case .linksEnding(var open, let deadline) = phase else { return [] }
        open.remove(handle)
        phase = .linksEnding(open: open, deadline: deadline)
        return advance(at: now)
    }

    public mutating func tick(at now: Duration) -> [Output] { advance(at: now) }

    /// hcid answered the reset: with the failure, when it could not reset the controller (or was not there to ask).
    public mutating func controllerReset(failure: String?) -> [Output] {
        guard phase == .resettingController else { return [] }
        phase = .idle
        guard failure == nil else { return [.finished(failure: failure)] }
        return (keepBonds ? [] : [.forgetLabPeripherals]) + [.finished(failure: nil)]
    }

    private mutating func advance(at now: Duration) -> [Output] {
        guard case .linksEnding(let open, let deadline) = phase, open.isEmpty || now >= deadline else { return [] }
        phase = .resettingController
        return [.resetController]
    }
}

extension LabReset {
    /// Of the identifiers only the lab made known, those a reset forgets: one a manager still wants (its link, an
    /// attempt) is kept, and taken back by a later reset.
    public static func peripheralsToForget(_ recorded: [String], book: ConnectionBook) -> (forget: [String], keep: [String]) {
        let wanted = Set(book.pendingIdentifiers)
        let kept = recorded.filter { book.link(for: $0) != nil || wanted.contains($0) }
        return (recorded.filter { !kept.contains($0) }, kept)
    }
}
