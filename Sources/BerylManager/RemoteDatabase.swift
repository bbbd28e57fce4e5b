import BerylCore

/// What a client has found of a peer's GATT database: Core Bluetooth's services, characteristics and descriptors as
/// discovered so far. managerd keeps it per peripheral for a preserved central, so that a restored app need not
/// discover again.
public struct RemoteDatabase: Codable, Equatable, Sendable {
    public struct Descriptor: Codable, Equatable, Sendable {
        public var uuid: BluetoothUUID
        public var handle: UInt16
        public init(uuid: BluetoothUUID, handle: UInt16) {
            self.uuid = uuid
            self.handle = handle
        }
    }

    public struct Characteristic: Codable, Equatable, Sendable {
        public var uuid: BluetoothUUID
        public var properties: UInt8
        public var valueHandle: UInt16
        public var descriptors: [Descriptor]
        public init(uuid: BluetoothUUID, properties: UInt8, valueHandle: UInt16, descriptors: [Descriptor] = []) {
            self.uuid = uuid
            self.properties = properties
            self.valueHandle = valueHandle
            self.descriptors = descriptors
        }
    }

    public struct Included: Codable, Equatable, Sendable {
        public var uuid: BluetoothUUID
        public var handles: ClosedRange<UInt16>
        public init(uuid: BluetoothUUID, handles: ClosedRange<UInt16>) {
            self.uuid = uuid
            self.handles = handles
        }
    }

    public struct Service: Codable, Equatable, Sendable {
        public var uuid: BluetoothUUID
        public var handles: ClosedRange<UInt16>
        public var characteristics: [Characteristic]
        public var included: [Included]
        public init(uuid: BluetoothUUID, handles: ClosedRange<UInt16>, characteristics: [Characteristic] = [], included: [Included] = []) {
            self.uuid = uuid
            self.handles = handles
            self.characteristics = characteristics
            self.included = included
        }
    }

    /// What one discovery found: Core Bluetooth's discoverServices (or a whole-database discovery), and
    /// discoverIncludedServices, discoverCharacteristics and discoverDescriptors, each within one service or
    /// characteristic, named by its start handle or value handle. A service discovery names what it looked for
    /// (`sought`, nil for every primary service), since for those UUIDs it is the whole truth.
    public enum Discovery: Equatable, Sendable {
        case whole([Service], sought: Set<BluetoothUUID>?)
        case services([Service], sought: Set<BluetoothUUID>?)
        case included([Included], inServiceAt: UInt16)
        case characteristics([Characteristic], inServiceAt: UInt16)
        case descriptors([Descriptor], ofValueAt: UInt16)
    }

    public var services: [Service]

    public init(services: [Service] = []) { self.services = services }

    /// Adds what one discovery found (Core Bluetooth's rule: discovery adds to what was found before). Services are
    /// matched by their start handle and characteristics by their value handle, so a second discovery never
    /// duplicates what the first found. A service the discovery looked for and did not find is gone: primary service
    /// discovery runs over the whole database (Core Vol 3 Part G §4.4.1, §4.4.2), so a copy kept from before the
    /// service moved (a Service Changed lost, or held for an app that was away) would hand a restored app handles the
    /// peer no longer has.
    public mutating func add(_ found: Discovery) {
        switch found {
        case .whole(let found, let sought):
            forgetServices(notIn: found, sought: sought)
            for service in found {
                services.removeAll { $0.handles.lowerBound == service.handles.lowerBound }
                services.append(service)
            }
        case .services(let found, let sought):
            forgetServices(notIn: found, sought: sought)
            for service in found where !services.contains(where: { $0.handles.lowerBound == service.handles.lowerBound }) {
                services.append(service)
            }
        case .included(let included, let start):
            guard let index = services.firstIndex(where: { $0.handles.lowerBound == start }) else { return }
            services[index].included = included
        case .characteristics(let found, let start):
            guard let index = services.firstIndex(where: { $0.handles.lowerBound == start }) else { return }
            for characteristic in found where !services[index].characteristics.contains(where: { $0.valueHandle == characteristic.valueHandle }) {
                services[index].characteristics.append(characteristic)
            }
            services[index].characteristics.sort { $0.valueHandle < $1.valueHandle }
        case .descriptors(let descriptors, let valueHandle):
            for serviceIndex in services.indices {
                guard let index = services[serviceIndex].characteristics.firstIndex(where: { $0.valueHandle == valueHandle }) else { continue }
                services[serviceIndex].characteristics[index].descriptors = descriptors
                return
            }
        }
        services.sort { $0.handles.lowerBound < $1.handles.lowerBound }
    }

    /// Drops the services of a sought UUID (every one, for nil) that start where the discovery found none.
    private mutating func forgetServices(notIn found: [Service], sought: Set<BluetoothUUID>?) {
        let starts = Set(found.map(\.handles.lowerBound))
        services.removeAll { (sought?.contains($0.uuid) ?? true) && !starts.contains($0.handles.lowerBound) }
    }
}
