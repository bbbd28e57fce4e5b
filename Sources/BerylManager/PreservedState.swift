import BerylCore
import FoundationEssentials
import Glibc

/// What a preserved manager holds, as written to the restoration store and handed to its app as willRestoreState:
/// its own versioned record, not a wire message, so that the IPC schema can change without losing what is stored.
public struct PreservedState: Codable, Equatable, Sendable {
    /// 1: the IPC message `PreservedState`'s protobuf bytes (read by migration); 2: this struct as JSON.
    public static let currentVersion = 2

    public var version = PreservedState.currentVersion
    public var central: Central?
    public var peripheral: Peripheral?

    public init(central: Central? = nil, peripheral: Peripheral? = nil) {
        self.central = central
        self.peripheral = peripheral
    }

    public struct Central: Codable, Equatable, Sendable {
        /// The scan the manager had running (Core Bluetooth's restored scan services and options).
        public var scan: ScanRequest?
        public var links: [Link]
        public init(scan: ScanRequest? = nil, links: [Link] = []) {
            self.scan = scan
            self.links = links
        }
    }

    /// Core Bluetooth's connect options (CBConnectPeripheralOptionNotifyOn…).
    public struct ConnectOptions: Codable, Equatable, Sendable {
        public var notifyOnConnection = false
        public var notifyOnDisconnection = false
        public var notifyOnNotification = false
        public init(notifyOnConnection: Bool = false, notifyOnDisconnection: Bool = false, notifyOnNotification: Bool = false) {
            self.notifyOnConnection = notifyOnConnection
            self.notifyOnDisconnection = notifyOnDisconnection
            self.notifyOnNotification = notifyOnNotification
        }

        /// Whether the app asked to be alerted of this while suspended (Core Bluetooth's NotifyOn… connect options).
        public func alerts(_ kind: AlertKind) -> Bool {
            switch kind {
            case .connection: notifyOnConnection
            case .disconnection: notifyOnDisconnection
            case .notification: notifyOnNotification
            }
        }
    }

    /// A peripheral the manager is connected to (or waits for, `pending`), with what the app had found on it.
    public struct Link: Codable, Equatable, Sendable {
        public var identifier: String
        public var pending: Bool
        public var name: String
        public var options: ConnectOptions
        public var database: RemoteDatabase?
        public var notifyingValueHandles: [UInt16]
        public init(identifier: String, pending: Bool, name: String = "", options: ConnectOptions = .init(),
                    database: RemoteDatabase? = nil, notifyingValueHandles: [UInt16] = []) {
            self.identifier = identifier
            self.pending = pending
            self.name = name
            self.options = options
            self.database = database
            self.notifyingValueHandles = notifyingValueHandles
        }
    }

    public struct Peripheral: Codable, Equatable, Sendable {
        public var services: [PublishedService]
        public var advertising: Advertising?
        public var subscriptions: [Subscription]
        public init(services: [PublishedService] = [], advertising: Advertising? = nil, subscriptions: [Subscription] = []) {
            self.services = services
            self.advertising = advertising
            self.subscriptions = subscriptions
        }
    }

    /// What the app asked to advertise (CBAdvertisementDataLocalNameKey and ServiceUUIDsKey).
    public struct Advertising: Codable, Equatable, Sendable {
        public var localName: String
        public var serviceUUIDs: [BluetoothUUID]
        public init(localName: String, serviceUUIDs: [BluetoothUUID]) {
            self.localName = localName
            self.serviceUUIDs = serviceUUIDs
        }
    }

    /// A service the app published, and the handles the database gave it.
    public struct PublishedService: Codable, Equatable, Sendable {
        public var definition: ServiceDefinition
        public var handles: ClosedRange<UInt16>?
        public var valueHandles: [UInt16]
        public init(definition: ServiceDefinition, handles: ClosedRange<UInt16>? = nil, valueHandles: [UInt16] = []) {
            self.definition = definition
            self.handles = handles
            self.valueHandles = valueHandles
        }
    }

    /// A remote central subscribed to one of the manager's characteristics.
    public struct Subscription: Codable, Equatable, Sendable {
        public var central: String
        public var valueHandle: UInt16
        public var notify: Bool
        public var indicate: Bool
        public var maximumUpdateLength: UInt16
        public init(central: String, valueHandle: UInt16, notify: Bool, indicate: Bool, maximumUpdateLength: UInt16) {
            self.central = central
            self.valueHandle = valueHandle
            self.notify = notify
            self.indicate = indicate
            self.maximumUpdateLength = maximumUpdateLength
        }
    }
}

/// A service as an app defines it (CBMutableService): what is published again for a restored peripheral manager.
public struct ServiceDefinition: Codable, Equatable, Sendable {
    public struct Descriptor: Codable, Equatable, Sendable {
        public var uuid: BluetoothUUID
        public var value: [UInt8]
        public init(uuid: BluetoothUUID, value: [UInt8]) {
            self.uuid = uuid
            self.value = value
        }
    }

    public struct Characteristic: Codable, Equatable, Sendable {
        public var uuid: BluetoothUUID
        /// Core Bluetooth's property bits (read 0x02, write 0x08, notify 0x10, …, notifyEncryptionRequired 0x100,
        /// indicateEncryptionRequired 0x200): wider than a declaration's byte.
        public var properties: UInt16
        /// Readable 0x01, writeable 0x02, readEncryptionRequired 0x04, writeEncryptionRequired 0x08.
        public var permissions: UInt8
        /// A cached value is served by attd; otherwise reads and writes go to the app.
        public var cachedValue: [UInt8]?
        public var descriptors: [Descriptor]
        public init(uuid: BluetoothUUID, properties: UInt16, permissions: UInt8, cachedValue: [UInt8]? = nil, descriptors: [Descriptor] = []) {
            self.uuid = uuid
            self.properties = properties
            self.permissions = permissions
            self.cachedValue = cachedValue
            self.descriptors = descriptors
        }
    }

    public var uuid: BluetoothUUID
    public var primary: Bool
    public var characteristics: [Characteristic]
    /// Start handles of published services this one includes (Core Vol 3 Part G §3.2).
    public var includedStartHandles: [UInt16]

    public init(uuid: BluetoothUUID, primary: Bool, characteristics: [Characteristic] = [], includedStartHandles: [UInt16] = []) {
        self.uuid = uuid
        self.primary = primary
        self.characteristics = characteristics
        self.includedStartHandles = includedStartHandles
    }
}

/// Why a stored preserved state cannot be read; the record is left as it is.
public enum PreservedStateError: Error, Equatable, Sendable, CustomStringConvertible {
    /// Written by a newer Beryl: not guessed at.
    case newerVersion(Int)
    case unreadable(String)

    public var description: String {
        switch self {
        case .newerVersion(let version): "written by a newer Beryl (version \(version); this one reads up to \(PreservedState.currentVersion))"
        case .unreadable(let why): "unreadable: \(why)"
        }
    }
}

extension PreservedState {
    public func encoded() -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        // Every member is a plain value with a total encoding: a failure here is a programming error.
        guard let data = try? encoder.encode(self) else { preconditionFailure("PreservedState did not encode") }
        return Array(data)
    }

    /// Reads any version written so far: version 2 is JSON (it starts with `{`); what is not is version 1, which only
    /// the wire layer can read, so it is handed to `migrating`.
    public static func decode(_ bytes: [UInt8], migrating: ([UInt8]) throws(PreservedStateError) -> PreservedState) throws(PreservedStateError) -> PreservedState {
        guard bytes.first == UInt8(ascii: "{") else { return try migrating(bytes) }
        struct Version: Decodable { var version: Int }
        let data = Data(bytes)
        let version: Int
        do {
            version = try JSONDecoder().decode(Version.self, from: data).version
        } catch {
            throw .unreadable("\(error)")
        }
        guard version <= currentVersion else { throw .newerVersion(version) }
        do {
            return try JSONDecoder().decode(PreservedState.self, from: data)
        } catch {
            throw .unreadable("\(error)")
        }
    }
}
