/// Timed actions in simulated time, earliest first; ties run in the order they were scheduled.
struct Scheduler {
    private struct Entry {
        let time: Duration
        let sequence: UInt64
        let action: () -> Void
    }

    private var heap: [Entry] = []
    private var sequence: UInt64 = 0

    var nextTime: Duration? { heap.first?.time }
    var count: Int { heap.count }

    mutating func schedule(at time: Duration, _ action: @escaping () -> Void) {
        sequence += 1
        heap.append(Entry(time: time, sequence: sequence, action: action))
        var child = heap.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard precedes(heap[child], heap[parent]) else { break }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    /// Removes and returns the earliest action due at or before `time`.
    mutating func popDue(at time: Duration) -> (Duration, () -> Void)? {
        guard let first = heap.first, first.time <= time else { return nil }
        let last = heap.removeLast()
        if !heap.isEmpty {
            heap[0] = last
            var parent = 0
            while true {
                let left = 2 * parent + 1
                let right = left + 1
                var smallest = parent
                if left < heap.count, precedes(heap[left], heap[smallest]) { smallest = left }
                if right < heap.count, precedes(heap[right], heap[smallest]) { smallest = right }
                guard smallest != parent else { break }
                heap.swapAt(parent, smallest)
                parent = smallest
            }
        }
        return (first.time, first.action)
    }

    mutating func removeAll() { heap.removeAll() }

    private func precedes(_ a: Entry, _ b: Entry) -> Bool {
        a.time != b.time ? a.time < b.time : a.sequence < b.sequence
    }
}

/// SplitMix64: small, fast and reproducible from a seed, which is all a simulator's dice need.
public struct SimRandom {
    private var state: UInt64

    public init(seed: UInt64) { state = seed }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    public mutating func unit() -> Double { Double(next() >> 11) / Double(1 << 53) }

    public mutating func chance(_ probability: Double) -> Bool { probability > 0 && unit() < probability }

    public mutating func bytes(_ count: Int) -> [UInt8] { (0..<count).map { _ in UInt8(truncatingIfNeeded: next()) } }

    public mutating func below(_ bound: Int) -> Int { Int(next() % UInt64(max(bound, 1))) }
}

extension Duration {
    var microseconds: Int64 { components.seconds * 1_000_000 + components.attoseconds / 1_000_000_000_000 }

    /// HCI time units: connection intervals count 1.25 ms, advertising and scan intervals 0.625 ms,
    /// supervision timeouts 10 ms (Core Vol 4 Part E §7.8).
    static func units1250us(_ count: UInt16) -> Duration { .microseconds(Int64(count) * 1250) }
    static func units625us(_ count: UInt16) -> Duration { .microseconds(Int64(count) * 625) }
    static func units10ms(_ count: UInt16) -> Duration { .milliseconds(Int64(count) * 10) }
}
