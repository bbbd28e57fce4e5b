import BerylWire
import Foundation

/// Core Bluetooth's CBManagerAuthorization, mapped from the app's manifest (see `CentralManager.authorization`).
public enum ManagerAuthorization: Int, Sendable {
    case notDetermined = 0, restricted = 1, denied = 2, allowedAlways = 3
}

/// Core Bluetooth's CBConnectionEvent, with Apple's raw values.
public enum ConnectionEvent: Int, Sendable {
    case peerDisconnected = 0, peerConnected = 1
}

/// Core Bluetooth's CBConnectionEventMatchingOption: the keys of `registerForConnectionEvents(options:)`.
public struct ConnectionEventMatchingOption: Hashable, Sendable, RawRepresentable {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    /// `[BluetoothUUID]`: links to peripherals offering any of these services (advertised or discovered).
    public static let serviceUUIDs = ConnectionEventMatchingOption(rawValue: "kCBConnectionEventMatchingOptionServiceUUIDs")
    /// `[UUID]`: links to these peripherals.
    public static let peripheralUUIDs = ConnectionEventMatchingOption(rawValue: "kCBConnectionEventMatchingOptionPeripheralUUIDs")
}

/// Core Bluetooth's CBPeripheralManagerConnectionLatency.
public enum PeripheralManagerConnectionLatency: Int, Sendable {
    case low = 0, medium = 1, high = 2
}

extension CentralManager {
    /// Core Bluetooth's CBCentralManager.Feature.
    public struct Feature: OptionSet, Sendable {
        public let rawValue: UInt
        public init(rawValue: UInt) { self.rawValue = rawValue }
        public static let extendedScanAndConnect = Feature(rawValue: 1 << 0)
    }

    /// Beryl scans and connects with the legacy LE commands (Core Vol 4 Part E §7.8.10, §7.8.12), which hear extended
    /// advertisers only through their legacy PDUs, whatever the controller supports: so no, for now.
    public static func supports(_ features: Feature) -> Bool {
        features.isEmpty
    }

    /// CBManager.authorization: whether this app may use Bluetooth, as its manifest says (`allowedAlways` for an app
    /// declared for this user or not declared at all, `denied` when declared for another user or when managerd's
    /// socket refuses this user, `notDetermined` while there is no stack to ask).
    public static var authorization: ManagerAuthorization { askAuthorization() }

    /// Core Bluetooth's registerForConnectionEvents(options:): the delegate's `connectionEventDidOccur` hears of every
    /// link that comes up or goes to a peripheral matching the options (every link, for none).
    public func registerForConnectionEvents(options: [ConnectionEventMatchingOption: Any]? = nil) {
        let services = options?[.serviceUUIDs] as? [BluetoothUUID] ?? []
        let peripherals = options?[.peripheralUUIDs] as? [UUID] ?? []
        channel.request(.manager {
            $0.registerConnectionEvents = .with {
                $0.manager = managerID
                $0.serviceUuids = services.map(\.description)
                $0.peripheralUuids = peripherals.map(\.uuidString)
            }
        }) { [misuse] result in
            if case .failure(let error) = result { misuse.report(.failed("registerForConnectionEvents(options:) failed: \(error)")) }
        }
    }
}

extension PeripheralManager {
    /// As `CentralManager.authorization`.
    public static var authorization: ManagerAuthorization { askAuthorization() }

    /// Core Bluetooth's setDesiredConnectionLatency(_:for:): asks the central, over the link, for the connection
    /// parameters of that latency. The central decides, as on iOS; a central not connected is misuse.
    public func setDesiredConnectionLatency(_ latency: PeripheralManagerConnectionLatency, for central: Central) {
        channel.request(.manager {
            $0.setConnectionLatency = .with {
                $0.central = central.identifier.uuidString
                $0.latency = switch latency {
                case .low: .low
                case .medium: .medium
                case .high: .high
                }
            }
        }) { [misuse] result in
            if case .failure(let error) = result { misuse.report(.failed("setDesiredConnectionLatency(_:for:) failed: \(error)")) }
        }
    }
}

/// One question to managerd on a session of its own, as Core Bluetooth's class property needs no manager.
private func askAuthorization() -> ManagerAuthorization {
    let channel: Channel
    do {
        channel = try Channel(path: Channel.defaultSocketPath, label: "authorization", onEvent: { _ in }, onClose: { _ in })
    } catch {
        if case .permissionDenied = error { return .denied }
        return .notDetermined
    }
    defer { channel.close() }
    guard case .success(let response) = channel.call(.manager { $0.getCapabilities.appID = LaunchOptions.current.appID ?? "" }, timeout: .seconds(2)) else {
        return .notDetermined
    }
    return switch response.manager.capabilities.authorization {
    case .allowedAlways: .allowedAlways
    case .denied: .denied
    case .restricted: .restricted
    default: .notDetermined
    }
}
