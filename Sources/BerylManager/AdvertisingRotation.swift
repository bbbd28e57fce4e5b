import BerylCore
import BerylGAP
import BerylHCI

/// What an app advertises: the payload Core Bluetooth's rules make of its data, and what the background form keeps.
public struct Advertiser: Equatable, Sendable {
    public var payload: AdvertisingPayload
    public var localName: String
    public var serviceUUIDs: [BluetoothUUID]

    public init(payload: AdvertisingPayload, localName: String, serviceUUIDs: [BluetoothUUID]) {
        self.payload = payload
        self.localName = localName
        self.serviceUUIDs = serviceUUIDs
    }

    /// What an app asked for (an empty name: none), laid out by Core Bluetooth's payload rules.
    public init(localName: String, serviceUUIDs: [BluetoothUUID]) {
        self.init(payload: AdvertisingPayload(localName: localName.isEmpty ? nil : localName, serviceUUIDs: serviceUUIDs),
                  localName: localName, serviceUUIDs: serviceUUIDs)
    }
}

/// Who advertises now on a controller with one advertiser (legacy advertising, no advertising sets): one advertiser
/// alone; several each in turn for a second, a lab session's after the apps'; none: off. Each app advertises as its
/// lifecycle allows: not while suspended, and in the background without its name, every service UUID in the overflow
/// area, at a 1 s interval (Core Bluetooth's background rules).
public struct AdvertisingRotation: Sendable {
    public static let turnLength: Duration = .seconds(1)

    public enum Plan: Equatable, Sendable {
        /// Nothing to advertise now. `disable`: advertising this rotation started is to be turned off (advertising it
        /// did not start, by a tool driving hcid directly, is left alone). `wanted`: someone would advertise, but the
        /// controller is not powered on.
        case off(disable: Bool, wanted: Bool)
        /// The commands for this turn, advertising off first since parameters change only then (Core Vol 4 Part E
        /// §7.8.5); `rotates`: others wait, so the turn ends after `turnLength`.
        case advertise([HCICommandPacket], rotates: Bool)
    }

    public struct Candidate: Sendable {
        public var key: ManagerKey
        public var advertiser: Advertiser
        public var policy: LifecyclePolicy

        public init(key: ManagerKey, advertiser: Advertiser, policy: LifecyclePolicy) {
            self.key = key
            self.advertiser = advertiser
            self.policy = policy
        }
    }

    private var turn = 0
    public private(set) var enabled = false
    /// When the turn being advertised ends; nil when no one waits for it (one advertiser, or none).
    public private(set) var turnEnds: Duration?

    public init() {}

    /// The plan for `now`, a new turn's full second when others wait. `lab`: a lab session's advertising commands, if
    /// it advertises.
    public mutating func plan(_ candidates: [Candidate], lab: [HCICommandPacket]?, poweredOn: Bool, ownAddressRandom: Bool,
                              at now: Duration) -> Plan {
        let order = candidates.filter(\.policy.advertises).sorted { $0.key < $1.key }
        let turns = order.count + (lab != nil ? 1 : 0)
        guard poweredOn, turns > 0 else {
            defer { enabled = false }
            turnEnds = nil
            return .off(disable: enabled, wanted: turns > 0)
        }
        enabled = true
        turn %= turns
        turnEnds = turns > 1 ? now + Self.turnLength : nil
        // The last turn is the lab session's, when it advertises.
        guard turn < order.count else { return .advertise(lab ?? [], rotates: turns > 1) }
        let current = order[turn]
        let background = current.policy.backgroundAdvertising
        let payload = background ? AdvertisingPayload.background(serviceUUIDs: current.advertiser.serviceUUIDs) : current.advertiser.payload
        return .advertise([
            HCICommands.leSetAdvertisingEnable(false),
            // 100 ms in the foreground; 1 s in the background.
            HCICommands.leSetAdvertisingParameters(interval: background ? 0x0640 : 0x00A0, ownAddressRandom: ownAddressRandom),
            HCICommands.leSetAdvertisingData(payload.advertising),
            HCICommands.leSetAdvertisingData(payload.scanResponse, scanResponse: true),
            HCICommands.leSetAdvertisingEnable(true),
        ], rotates: turns > 1)
    }

    /// True when the turn ran its second by `now`: the next advertiser's comes, and the shell plans again.
    public mutating func tick(at now: Duration) -> Bool {
        guard let due = turnEnds, due <= now else { return false }
        turnEnds = nil
        turn += 1
        return true
    }

    /// The controller was reset: it advertises nothing until told again.
    public mutating func controllerForgot() {
        enabled = false
        turnEnds = nil
    }
}
