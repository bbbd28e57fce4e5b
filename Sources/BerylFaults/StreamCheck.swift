import BerylCore
import BerylSupervisor
import Foundation
import Synchronization

/// What a central took of the thermostat's stream (`beryl gatt subscribe --json`): each value carries the app run's
/// epoch and a sequence number. Within an epoch every number must be above the last (a repeat or a step back is
/// reordering or duplication by the stack); a new epoch is the app started again, and an epoch seen before coming
/// back is reordering across the restart. Gaps are allowed unless `gapless`: a notification has no acknowledgement,
/// and a daemon killed with values in its queue takes them with it — but managerd carries no values while the apps'
/// data channels are live, so killing it must lose none, and the thermostat must not start again.
struct StreamCheck: Equatable {
    private(set) var received = 0
    private(set) var problems: [String] = []
    private var epochs: [UInt32] = []
    private var last: UInt32?
    private var gapless = false

    /// Every notification line of a `beryl gatt subscribe --json` run.
    init(subscribeOutput: String, gapless: Bool = false) {
        self.gapless = gapless
        for line in subscribeOutput.split(separator: "\n") {
            guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                  object["event"] as? String == "notification", let hex = object["value"] as? String else { continue }
            guard let value = Hex.decode(hex), value.count >= 8 else {
                problems.append("a stream value of the wrong shape: \(hex)")
                continue
            }
            take(epoch: Self.word(value, at: 0), sequence: Self.word(value, at: 4))
        }
    }

    init(gapless: Bool = false) { self.gapless = gapless }

    mutating func take(epoch: UInt32, sequence: UInt32) {
        received += 1
        if epoch != epochs.last {
            if epochs.contains(epoch) { problems.append("epoch \(epoch) came back after \(epochs.last ?? 0), at sequence \(sequence)") }
            if gapless, let previous = epochs.last { problems.append("the stream started again (epoch \(epoch) after \(previous))") }
            epochs.append(epoch)
            last = sequence
            return
        }
        if let last, sequence <= last { problems.append("sequence \(sequence) after \(last) in epoch \(epoch)") }
        if gapless, let last, sequence > last &+ 1 { problems.append("values \(last &+ 1)–\(sequence &- 1) lost in epoch \(epoch)") }
        last = sequence
    }

    private static func word(_ bytes: [UInt8], at offset: Int) -> UInt32 {
        (0..<4).reduce(UInt32(0)) { $0 | UInt32(bytes[offset + $1]) << (8 * $1) }
    }
}

/// The streaming phase's first subscriber, which runs through the fault on its own thread.
final class StreamRun: Sendable {
    private let run = Mutex<ToolRun?>(nil)
    func finish(_ result: ToolRun) { run.withLock { $0 = result } }
    var result: ToolRun? { run.withLock { $0 } }
}
