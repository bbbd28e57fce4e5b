/// When a peripheral asks again for the security the central has not acted on: after 1, 2, 4 and 8 seconds, then no
/// more (15 s in all, half the SMP timeout a pairing would have, Core Vol 3 Part H §3.4).
struct SecurityRequestRepeats: Equatable {
    static let delays: [Duration] = [.seconds(1), .seconds(2), .seconds(4), .seconds(8)]
    private(set) var repeatsSent = 0
    private var lastSentAt: Duration

    init(firstSentAt: Duration) { lastSentAt = firstSentAt }

    var isExhausted: Bool { repeatsSent >= Self.delays.count }

    func isDue(at now: Duration) -> Bool { !isExhausted && now >= lastSentAt + Self.delays[repeatsSent] }

    mutating func sent(at now: Duration) {
        repeatsSent += 1
        lastSentAt = now
    }
}
