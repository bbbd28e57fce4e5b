import BerylSim

/// What the fault-injection suite does to a running pair of stacks, and when.
public enum Fault: String, CaseIterable, Sendable {
    case killHcid = "kill-hcid"
    case killAttd = "kill-attd"
    case killManagerd = "kill-managerd"
    case killApp = "kill-app"
    case killAll = "kill-all"
    /// hcid, then the app a moment later: managerd lives on and hears the links go, and the app may die before it asks
    /// for them again, so the preserved manager must (the records of links the stack lost).
    case killHcidThenApp = "kill-hcid-app"
    case outOfRange = "out-of-range"
    case linkLoss = "link-loss"
    case frozenController = "frozen-controller"
    case corruptHCI = "corrupt-hci"
    case rogueIPC = "rogue-ipc"
    case roguePDU = "rogue-pdu"
    case oversizedValue = "oversized-value"
    case deadHandle = "dead-handle"

    public var title: String {
        switch self {
        case .killHcid: "kill -9 hcid"
        case .killAttd: "kill -9 attd"
        case .killManagerd: "kill -9 managerd"
        case .killApp: "kill -9 the app"
        case .killAll: "kill -9 all (3 daemons + app)"
        case .killHcidThenApp: "kill -9 hcid, then the app"
        case .outOfRange: "out of range and back"
        case .linkLoss: "10-30% link-layer loss"
        case .frozenController: "frozen controller"
        case .corruptHCI: "corrupted HCI stream"
        case .rogueIPC: "malformed IPC (rogue client)"
        case .roguePDU: "malformed PDUs (rogue remote)"
        case .oversizedValue: "oversized values"
        case .deadHandle: "requests on dead handles"
        }
    }

    /// Daemons this fault kills on the side it hits; every other daemon must keep its pid.
    var killedDaemons: [String] {
        switch self {
        case .killHcid, .killHcidThenApp: ["hcid"]
        case .killAttd: ["attd"]
        case .killManagerd: ["managerd"]
        case .killAll: ["hcid", "attd", "managerd"]
        default: []
        }
    }
}

/// Where the workload is when the fault hits.
public enum Phase: String, CaseIterable, Sendable {
    /// Linked and subscribed: the central app takes the peripheral app's notifications.
    case subscribed
    /// The central is writing and reading the peripheral app's dynamic characteristic.
    case serving
    /// The peripheral is out of range: the central app's connection request is pending.
    case connecting
    /// The central app was killed: its manager is preserved, and the next notification relaunches it.
    case restoring
    /// The central takes the thermostat's stream as fast as the link carries it: every queue between the two apps is
    /// full and the thermostat waits for peripheralManagerIsReady.
    case streaming
}

/// The two stacks: the central app (doorlock) runs on one, the peripheral app (thermostat) on the other.
public enum Side: Int, CaseIterable, Sendable, CustomStringConvertible {
    case central = 0
    case peripheral = 1

    public var description: String { self == .central ? "central" : "peripheral" }
    var other: Side { self == .central ? .peripheral : .central }
}

/// The seed's choices, from the simulator's own generator (SplitMix64), so that a printed seed replays them.
struct FaultRandom {
    private var dice: SimRandom
    init(seed: UInt64) { dice = SimRandom(seed: seed) }

    mutating func next() -> UInt64 { dice.next() }
    mutating func int(_ range: ClosedRange<Int>) -> Int { range.lowerBound + dice.below(range.count) }
    mutating func double(_ range: ClosedRange<Double>) -> Double { range.lowerBound + dice.unit() * (range.upperBound - range.lowerBound) }
    mutating func side() -> Side { dice.below(2) == 0 ? .central : .peripheral }
    mutating func bytes(_ count: Int) -> [UInt8] { dice.bytes(count) }
}
