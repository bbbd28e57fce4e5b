import BerylDaemonKit
import Foundation

/// What a benchmark's receiver counts of a sequenced stream: each value starts with its 32-bit little-endian
/// sequence number; one not above every number seen before (a repeat too) is out of order and not received; only
/// those received inside the window count toward the rate.
public struct SequenceTally: Sendable {
    public private(set) var total = 0
    public private(set) var inWindow = 0
    public private(set) var outOfOrder = 0
    private var highest: Int64 = -1
    public var window: Range<ContinuousClock.Instant>?

    public init() {}

    /// Writes `sequence` over the first four bytes of `value`.
    public static func stamp(_ sequence: UInt32, into value: inout Data) {
        withUnsafeBytes(of: sequence.littleEndian) { value.replaceSubrange(0..<4, with: $0) }
    }

    public mutating func received(_ value: Data, at time: ContinuousClock.Instant) {
        guard value.count >= 4 else { return }
        let sequence = Int64(UInt32(littleEndian: value.prefix(4).withUnsafeBytes { $0.loadUnaligned(as: UInt32.self) }))
        // A number seen before, or below one seen, is out of order (a repeat included); only a new highest counts as
        // received, so that a value that never came with its own number is lost.
        guard sequence > highest else {
            outOfOrder += 1
            return
        }
        total += 1
        highest = sequence
        if window?.contains(time) == true { inWindow += 1 }
    }
}

/// CPU time of named processes, sampled at a window's start and taken as what each used since.
public struct ProcessCPU {
    public let pids: [String: Int32]
    private var start: [String: Duration] = [:]

    public init(pids: [String: Int32]) { self.pids = pids }

    public mutating func startWindow() { start = pids.compactMapValues(ProcessStats.cpuTime) }

    /// CPU per unit of work (a read, a notification) since the window opened, in µs per process.
    public func microsecondsSinceStart(per units: Double) -> [String: Double] {
        usedSinceStart().mapValues { HCIBenchmark.durationSeconds($0) * 1e6 / max(units, 1) }
    }

    public func usedSinceStart() -> [String: Duration] {
        var used: [String: Duration] = [:]
        for (name, now) in pids.compactMapValues(ProcessStats.cpuTime) { used[name] = now - (start[name] ?? now) }
        return used
    }
}

extension NotificationFigures {
    /// One window's figures from what the receiver counted, what the stack accepted and what the processes used.
    public init(valueBytes: Int, seconds: Double, tally: SequenceTally, accepted: Int, refused: Int, cpu: [String: Duration]) {
        let received = Double(max(tally.inWindow, 1))
        self.init(valueBytes: valueBytes, perSecond: Double(tally.inWindow) / seconds, bytesPerSecond: Double(tally.inWindow * valueBytes) / seconds,
                  sent: accepted, lost: accepted - tally.total, outOfOrder: tally.outOfOrder, refused: refused,
                  cpuMicrosecondsPerNotification: cpu.mapValues { HCIBenchmark.durationSeconds($0) * 1e6 / received })
    }
}
