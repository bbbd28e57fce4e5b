import BerylCore

/// CBPeripheralManagerConnectionLatency as connection parameters a peripheral asks its central for. Core Bluetooth
/// does not publish its figures; these follow Apple's accessory guidelines (intervals of 15 ms and up, multiples of
/// 15 ms preferred), with a supervision timeout that keeps the link through a few missed events at each latency.
public enum ConnectionLatency: Sendable, CaseIterable {
    case low, medium, high

    public var parameters: ConnectionParameters {
        switch self {
        case .low: ConnectionParameters(intervalMin: 12, intervalMax: 24, latency: 0, timeout: 200)  // 15–30 ms, 2 s
        case .medium: ConnectionParameters(intervalMin: 24, intervalMax: 48, latency: 0, timeout: 300)  // 30–60 ms, 3 s
        case .high: ConnectionParameters(intervalMin: 72, intervalMax: 96, latency: 4, timeout: 600)  // 90–120 ms, 4 skipped, 6 s
        }
    }
}

/// Who asked to hear of links (CBCentralManager.registerForConnectionEvents(options:)), and which links each hears
/// of: those to a peripheral it named, or offering a service it named (advertised or discovered); empty lists match
/// every link.
public struct ConnectionEventInterests: Sendable {
    public struct Interest: Sendable, Equatable {
        public var peripherals: Set<String>
        public var services: Set<BluetoothUUID>

        public init(peripherals: Set<String>, services: Set<BluetoothUUID>) {
            self.peripherals = peripherals
            self.services = services
        }

        public func matches(identifier: String, services offered: Set<BluetoothUUID>) -> Bool {
            if peripherals.isEmpty, services.isEmpty { return true }
            return peripherals.contains(identifier) || !services.isDisjoint(with: offered)
        }
    }

    private var interests: [ManagerKey: Interest] = [:]

    public init() {}

    /// Registering again replaces what the manager asked for before, as Core Bluetooth's does.
    public mutating func register(_ key: ManagerKey, _ interest: Interest) { interests[key] = interest }

    public mutating func remove(_ holder: ManagerHolder) { interests = interests.filter { $0.key.holder != holder } }

    /// The managers to tell of a link to `identifier`, in a stable order.
    public func listeners(identifier: String, services: Set<BluetoothUUID>) -> [ManagerKey] {
        interests.filter { $0.value.matches(identifier: identifier, services: services) }.map(\.key).sorted()
    }
}
