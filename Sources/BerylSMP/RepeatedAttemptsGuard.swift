import BerylCore

/// Repeated attempts protection (Core Vol 3 Part H §2.3.6): after a pairing the verifier (the responder) failed,
/// the same claimant must wait, and the wait doubles with each further failure; a success clears it.
public struct RepeatedAttemptsGuard: Sendable {
    public static let firstWait: Duration = .seconds(2)
    public static let longestWait: Duration = .seconds(64)
    private var state: [BDAddress: (until: Duration, wait: Duration)] = [:]

    public init() {}

    public func allows(_ peer: BDAddress, at now: Duration) -> Bool { (state[peer]?.until ?? .zero) <= now }

    public mutating func failed(_ peer: BDAddress, at now: Duration) {
        let wait = state[peer].map { min($0.wait * 2, Self.longestWait) } ?? Self.firstWait
        state[peer] = (now + wait, wait)
    }

    public mutating func succeeded(_ peer: BDAddress) { state[peer] = nil }
}
