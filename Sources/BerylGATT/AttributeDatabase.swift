import BerylATT
import BerylCore
import BerylCrypto

/// GATT attribute types (Core Vol 3 Part G §3, Assigned Numbers).
public enum GATTType {
    public static let primaryService = BluetoothUUID(0x2800)
    public static let secondaryService = BluetoothUUID(0x2801)
    public static let include = BluetoothUUID(0x2802)
    public static let characteristic = BluetoothUUID(0x2803)
    /// Service, include and characteristic declarations give a database its structure (Core Vol 3 Part G §3): no
    /// characteristic or descriptor may take one of these types, or clients would read it as structure.
    public static let declarations: Set<BluetoothUUID> = [primaryService, secondaryService, include, characteristic]
    public static let extendedProperties = BluetoothUUID(0x2900)
    public static let userDescription = BluetoothUUID(0x2901)
    public static let clientConfiguration = BluetoothUUID(0x2902)
    public static let serverConfiguration = BluetoothUUID(0x2903)
    public static let presentationFormat = BluetoothUUID(0x2904)
    public static let aggregateFormat = BluetoothUUID(0x2905)
    public static let gapService = BluetoothUUID(0x1800)
    public static let gattService = BluetoothUUID(0x1801)
    public static let deviceName = BluetoothUUID(0x2A00)
    public static let appearance = BluetoothUUID(0x2A01)
    public static let serviceChanged = BluetoothUUID(0x2A05)
    public static let clientSupportedFeatures = BluetoothUUID(0x2B29)
    public static let databaseHash = BluetoothUUID(0x2B2A)
}

/// The Service Changed value: the affected handle range, start then end, little-endian (Core Vol 3 Part G §7.1).
public enum ServiceChangedValue {
    public static func encode(_ range: ClosedRange<UInt16>) -> [UInt8] {
        [UInt8(range.lowerBound & 0xFF), UInt8(range.lowerBound >> 8), UInt8(range.upperBound & 0xFF), UInt8(range.upperBound >> 8)]
    }

    /// Nil unless the value is four bytes; a reversed range is put in order.
    public static func decode(_ value: [UInt8]) -> ClosedRange<UInt16>? {
        guard value.count == 4 else { return nil }
        let start = UInt16(value[0]) | UInt16(value[1]) << 8
        let end = UInt16(value[2]) | UInt16(value[3]) << 8
        return min(start, end)...max(start, end)
    }
}

public struct DescriptorDefinition: Sendable {
    public var uuid: BluetoothUUID
    public var permissions: AttributePermissions
    public var value: [UInt8]

    public init(uuid: BluetoothUUID, permissions: AttributePermissions = .readable, value: [UInt8]) {
        self.uuid = uuid
        self.permissions = permissions
        self.value = value
    }
}

public struct CharacteristicDefinition: Sendable {
    public var uuid: BluetoothUUID
    public var properties: CharacteristicProperties
    public var permissions: AttributePermissions
    /// A value given at creation is cached and served by attd; nil makes the value dynamic (the owning app answers).
    public var value: [UInt8]?
    public var descriptors: [DescriptorDefinition]

    public init(uuid: BluetoothUUID, properties: CharacteristicProperties, permissions: AttributePermissions, value: [UInt8]? = nil,
                descriptors: [DescriptorDefinition] = []) {
        self.uuid = uuid
        self.properties = properties
        self.permissions = permissions
        self.value = value
        self.descriptors = descriptors
    }
}

public struct ServiceDefinition: Sendable {
    public var uuid: BluetoothUUID
    public var isPrimary: Bool
    /// Start handles of services (already in the database) this one includes.
    public var includes: [UInt16]
    public var characteristics: [CharacteristicDefinition]

    public init(uuid: BluetoothUUID, isPrimary: Bool = true, includes: [UInt16] = [], characteristics: [CharacteristicDefinition]) {
        self.uuid = uuid
        self.isPrimary = isPrimary
        self.includes = includes
        self.characteristics = characteristics
    }
}

public enum AttributeValue: Equatable, Sendable {
    case fixed([UInt8])
    /// Read and written through the owner (an app via managerd).
    case dynamic
    /// A Client Characteristic Configuration: its value lives per peer in the bearer.
    case clientConfiguration
    /// Client Supported Features (Core Vol 3 Part G §7.2): also per peer.
    case clientSupportedFeatures
}

public struct Attribute: Equatable, Sendable {
    public var handle: UInt16
    public var type: BluetoothUUID
    public var permissions: AttributePermissions
    public var value: AttributeValue
    /// For service declarations: the last handle of the service.
    public var groupEnd: UInt16

    public init(handle: UInt16, type: BluetoothUUID, permissions: AttributePermissions = .readable, value: AttributeValue, groupEnd: UInt16 = 0) {
        self.handle = handle
        self.type = type
        self.permissions = permissions
        self.value = value
        self.groupEnd = groupEnd
    }
}

public enum DatabaseError: Error, Equatable, Sendable {
    case handlesExhausted
    case unknownIncludedService(UInt16)
    case valueTooLong(BluetoothUUID)
}

/// The server's attribute table: handles assigned in order, stable while a service is published (Core Vol 3 Part G §3).
public final class AttributeDatabase {
    public private(set) var attributes: [Attribute] = []
    private var nextHandle: UInt16 = 1
    /// Handle ranges of removed services, by the removed service's shape: the same service added again (an app
    /// publishing it again after the stack reset) gets its old handles back, so clients' cached handles and bonded
    /// clients' stored subscriptions stay right. Any other service gets fresh handles.
    private var vacated: [String: UInt16] = [:]
    /// The shape of each published service, by its declaration's handle.
    private var shapes: [UInt16: String] = [:]
    /// Where the GATT service's characteristics sit, once `addCoreServices` has run.
    public private(set) var serviceChangedHandle: UInt16?
    public private(set) var databaseHashHandle: UInt16?

    public init() {}

    /// A table given whole, in handle order (a peer's database as discovered, or a fixture).
    public init(attributes: [Attribute]) {
        self.attributes = attributes.sorted { $0.handle < $1.handle }
        nextHandle = (self.attributes.last?.handle ?? 0) + 1
        serviceChangedHandle = self.attributes.first { $0.type == GATTType.serviceChanged }?.handle
        databaseHashHandle = self.attributes.first { $0.type == GATTType.databaseHash }?.handle
    }

    /// The mandatory GAP and GATT services (Core Vol 3 Part C §12, Part G §7), first in the table so their handles never move.
    public func addCoreServices(deviceName: String, appearance: UInt16 = 0) throws(DatabaseError) {
        try add(ServiceDefinition(uuid: GATTType.gapService, characteristics: [
            CharacteristicDefinition(uuid: GATTType.deviceName, properties: .read, permissions: .readable, value: Array(deviceName.utf8.prefix(248))),
            CharacteristicDefinition(uuid: GATTType.appearance, properties: .read, permissions: .readable, value: [UInt8(appearance & 0xFF), UInt8(appearance >> 8)]),
        ]))
        let gatt = try add(ServiceDefinition(uuid: GATTType.gattService, characteristics: [
            // Not readable: its value only travels in indications (Core Vol 3 Part G §7.1).
            CharacteristicDefinition(uuid: GATTType.serviceChanged, properties: .indicate, permissions: [], value: [0x01, 0x00, 0xFF, 0xFF]),
            CharacteristicDefinition(uuid: GATTType.clientSupportedFeatures, properties: [.read, .write], permissions: [.readable, .writeable], value: nil),
            CharacteristicDefinition(uuid: GATTType.databaseHash, properties: .read, permissions: .readable, value: [UInt8](repeating: 0, count: 16)),
        ]))
        for attribute in attributes(in: gatt...(attribute(at: gatt)?.groupEnd ?? gatt)) {
            switch attribute.type {
            case GATTType.serviceChanged: serviceChangedHandle = attribute.handle
            case GATTType.databaseHash: databaseHashHandle = attribute.handle
            case GATTType.clientSupportedFeatures:
                if let index = attributes.firstIndex(where: { $0.handle == attribute.handle }) { attributes[index].value = .clientSupportedFeatures }
            default: break
            }
        }
        refreshHash()
    }

    /// The Database Hash (Core Vol 3 Part G §7.3.1): AES-CMAC with a zero key over the attributes that shape the
    /// database (handle, type and value of declarations; handle and type of the descriptors GATT defines).
    public func computeHash() -> [UInt8] {
        var message = ByteWriter()
        for attribute in attributes {
            switch attribute.type {
            case GATTType.primaryService, GATTType.secondaryService, GATTType.include, GATTType.characteristic, GATTType.extendedProperties:
                message.u16(attribute.handle)
                message.append(attribute.type.attWire)
                if case .fixed(let value) = attribute.value { message.append(value) }
            case GATTType.userDescription, GATTType.clientConfiguration, GATTType.serverConfiguration, GATTType.presentationFormat,
                 GATTType.aggregateFormat:
                message.u16(attribute.handle)
                message.append(attribute.type.attWire)
            default:
                break
            }
        }
        // The characteristic holds the hash least significant octet first, as ATT carries every multi-octet value.
        guard let mac = try? AES.cmac(key: [UInt8](repeating: 0, count: 16), message: message.bytes) else { return [] }
        return mac.reversed()
    }

    private func refreshHash() {
        guard let databaseHashHandle, let index = attributes.firstIndex(where: { $0.handle == databaseHashHandle }) else { return }
        let hash = computeHash()
        if hash.count == 16 { attributes[index].value = .fixed(hash) }
    }

    /// Adds a service; returns its declaration handle. Characteristics that notify or indicate get a CCCD.
    @discardableResult
    public func add(_ service: ServiceDefinition) throws(DatabaseError) -> UInt16 {
        var added: [Attribute] = []
        let shape = Self.shape(of: service)
        var handle = vacated.removeValue(forKey: shape) ?? nextHandle
        func append(_ type: BluetoothUUID, _ permissions: AttributePermissions, _ value: AttributeValue) throws(DatabaseError) {
            guard handle < 0xFFFF else { throw .handlesExhausted }
            added.append(Attribute(handle: handle, type: type, permissions: permissions, value: value, groupEnd: 0))
            handle += 1
        }
        try append(service.isPrimary ? GATTType.primaryService : GATTType.secondaryService, .readable, .fixed(service.uuid.attWire))
        for include in service.includes {
            guard let declaration = attribute(at: include), declaration.type == GATTType.primaryService || declaration.type == GATTType.secondaryService,
                  case .fixed(let uuid) = declaration.value else { throw .unknownIncludedService(include) }
            var value = ByteWriter()
            value.u16(include)
            value.u16(declaration.groupEnd)
            if uuid.count == 2 { value.append(uuid) }  // 128-bit included UUIDs are left out (Core Vol 3 Part G §3.2)
            try append(GATTType.include, .readable, .fixed(value.bytes))
        }
        for characteristic in service.characteristics {
            if let value = characteristic.value, value.count > 512 { throw .valueTooLong(characteristic.uuid) }
            var declaration = ByteWriter()
            let declared = CharacteristicProperties(declared: characteristic.properties.declared)
            declaration.u8(declared.declared)
            declaration.u16(handle + 1)
            declaration.append(characteristic.uuid.attWire)
            try append(GATTType.characteristic, .readable, .fixed(declaration.bytes))
            try append(characteristic.uuid, characteristic.permissions, characteristic.value.map(AttributeValue.fixed) ?? .dynamic)
            if !declared.isDisjoint(with: [.notify, .indicate]) {
                // Core Bluetooth's notify/indicateEncryptionRequired: only a central on an encrypted link may subscribe.
                let encrypted = !characteristic.properties.isDisjoint(with: [.notifyEncryptionRequired, .indicateEncryptionRequired])
                try append(GATTType.clientConfiguration, encrypted ? [.readable, .writeEncryptionRequired] : [.readable, .writeable], .clientConfiguration)
            }
            // The extended properties bit promises the descriptor (Core Vol 3 Part G §3.3.3.1): Reliable Write is offered
            // for a writable value, as this server carries it out.
            if declared.contains(.extendedProperties), !characteristic.descriptors.contains(where: { $0.uuid == GATTType.extendedProperties }) {
                try append(GATTType.extendedProperties, .readable, .fixed([declared.contains(.write) ? 0x01 : 0x00, 0x00]))
            }
            for descriptor in characteristic.descriptors {
                try append(descriptor.uuid, descriptor.permissions, .fixed(descriptor.value))
            }
        }
        added[0].groupEnd = handle - 1
        attributes += added
        attributes.sort { $0.handle < $1.handle }
        shapes[added[0].handle] = shape
        nextHandle = max(nextHandle, handle)
        refreshHash()
        return added[0].handle
    }

    /// What identifies "the same service": its type, includes, and each characteristic's type, properties and descriptors.
    private static func shape(of service: ServiceDefinition) -> String {
        "\(service.uuid)|\(service.isPrimary)|\(service.includes)|" + service.characteristics.map { characteristic in
            "\(characteristic.uuid):\(characteristic.properties.rawValue):\(characteristic.descriptors.map(\.uuid.description))"
        }.joined(separator: ",")
    }

    /// Removes the service declared at `handle`; its handles go to the same service if it is added again, to no other.
    public func removeService(at handle: UInt16) -> Bool {
        guard let declaration = attribute(at: handle), declaration.groupEnd > 0 else { return false }
        if let shape = shapes.removeValue(forKey: handle) { vacated[shape] = handle }
        attributes.removeAll { $0.handle >= handle && $0.handle <= declaration.groupEnd }
        refreshHash()
        return true
    }

    public func attribute(at handle: UInt16) -> Attribute? {
        var low = 0
        var high = attributes.count - 1
        while low <= high {
            let middle = (low + high) / 2
            if attributes[middle].handle == handle { return attributes[middle] }
            if attributes[middle].handle < handle { low = middle + 1 } else { high = middle - 1 }
        }
        return nil
    }

    public func attributes(in range: ClosedRange<UInt16>) -> ArraySlice<Attribute> {
        let start = attributes.firstIndex { $0.handle >= range.lowerBound } ?? attributes.endIndex
        let end = attributes.firstIndex { $0.handle > range.upperBound } ?? attributes.endIndex
        return attributes[start..<max(start, end)]
    }

    public func setValue(_ value: [UInt8], at handle: UInt16) {
        guard let index = attributes.firstIndex(where: { $0.handle == handle }) else { return }
        attributes[index].value = .fixed(value)
    }
}
