import Foundation
import Synchronization

// Core Bluetooth's attribute objects. A discovered attribute belongs to its peripheral (held weakly upwards, as
// Core Bluetooth's are, so that nothing outlives what it points to by an unowned reference); the mutable ones are an
// app's own, published through a peripheral manager. Each object guards its state with a lock of its own, so any
// thread may read it; the library changes it before it hands the object to a callback.

/// Core Bluetooth's CBService; `MutableService` is the one an app publishes.
public class Service: CustomStringConvertible, @unchecked Sendable {
    struct Storage {
        var uuid: BluetoothUUID
        var isPrimary: Bool
        var characteristics: [Characteristic]?
        var included: [Service]?
        weak var peripheral: Peripheral?
        /// The service's handles in the peer's database (a discovered one), or where it was published (a mutable one).
        var range: ClosedRange<UInt32> = 0...0
    }
    let storage: Guarded<Storage>

    init(uuid: BluetoothUUID, isPrimary: Bool, range: ClosedRange<UInt32>, peripheral: Peripheral?) {
        storage = Guarded(Storage(uuid: uuid, isPrimary: isPrimary, peripheral: peripheral, range: range))
    }

    func with<T>(_ body: (inout Storage) -> T) -> T { storage.with(body) }

    public var uuid: BluetoothUUID { with { $0.uuid } }
    public var isPrimary: Bool { with { $0.isPrimary } }
    /// The peripheral this service was discovered on; nil for a published one (or once the peripheral is gone).
    public var peripheral: Peripheral? { with { $0.peripheral } }
    /// Nil until discovered.
    public var characteristics: [Characteristic]? { with { $0.characteristics } }
    public var includedServices: [Service]? { with { $0.included } }
    var range: ClosedRange<UInt32> { with { $0.range } }

    public var description: String {
        "<Service \(uuid)\(isPrimary ? "" : " secondary") handles \(range.lowerBound)–\(range.upperBound), \(characteristics?.count ?? 0) characteristics>"
    }
}

/// Core Bluetooth's CBMutableService.
public final class MutableService: Service, @unchecked Sendable {
    public init(type UUID: BluetoothUUID, primary isPrimary: Bool) {
        super.init(uuid: UUID, isPrimary: isPrimary, range: 0...0, peripheral: nil)
    }

    /// Each must be a `MutableCharacteristic` when the service is added.
    public override var characteristics: [Characteristic]? {
        get { with { $0.characteristics } }
        set { with { $0.characteristics = newValue } }
    }

    /// Services this one includes; each must have been added already (Core Bluetooth's rule).
    public override var includedServices: [Service]? {
        get { with { $0.included } }
        set { with { $0.included = newValue } }
    }

    var startHandle: UInt32 { range.lowerBound }
    func setStart(_ start: UInt32) { with { $0.range = start...start } }
}

/// Core Bluetooth's CBCharacteristic; `MutableCharacteristic` is the one an app publishes.
public class Characteristic: CustomStringConvertible, @unchecked Sendable {
    struct Storage {
        var uuid: BluetoothUUID
        var properties: CharacteristicProperties
        var value: Data?
        var isNotifying = false
        var descriptors: [Descriptor]?
        weak var service: Service?
        var valueHandle: UInt32 = 0
        var permissions: AttributePermissions = []
        var subscribed: [Central] = []
    }
    let storage: Guarded<Storage>

    init(uuid: BluetoothUUID, properties: CharacteristicProperties, value: Data?, valueHandle: UInt32, service: Service?) {
        storage = Guarded(Storage(uuid: uuid, properties: properties, value: value, service: service, valueHandle: valueHandle))
    }

    func with<T>(_ body: (inout Storage) -> T) -> T { storage.with(body) }

    public var uuid: BluetoothUUID { with { $0.uuid } }
    public var service: Service? { with { $0.service } }
    public var properties: CharacteristicProperties { with { $0.properties } }
    /// The last value read or notified (for a discovered one); the cached value (for a mutable one).
    public var value: Data? { with { $0.value } }
    public var descriptors: [Descriptor]? { with { $0.descriptors } }
    public var isNotifying: Bool { with { $0.isNotifying } }

    var valueHandle: UInt32 { with { $0.valueHandle } }
    func setValue(_ value: Data) { with { $0.value = value } }
    func setNotifying(_ on: Bool) { with { $0.isNotifying = on } }
    func setDescriptors(_ descriptors: [Descriptor]) { with { $0.descriptors = descriptors } }
    func setHandle(_ handle: UInt32) { with { $0.valueHandle = handle } }

    public var description: String {
        "<Characteristic \(uuid) properties 0x\(String(properties.rawValue, radix: 16)) value \(value.map { "\($0.count) bytes" } ?? "nil")\(isNotifying ? ", notifying" : "")>"
    }
}

/// Core Bluetooth's CBMutableCharacteristic.
public final class MutableCharacteristic: Characteristic, @unchecked Sendable {
    /// A value given when the service is added is cached: the stack serves it, and the characteristic is read-only.
    /// Nil makes it dynamic: reads and writes come to the app's delegate.
    public init(type UUID: BluetoothUUID, properties: CharacteristicProperties, value: Data?, permissions: AttributePermissions) {
        super.init(uuid: UUID, properties: properties, value: value, valueHandle: 0, service: nil)
        with { $0.permissions = permissions }
    }

    /// The app's copy (the guide's write handler sets it); once published, a cached value changes only by adding
    /// the service again, and a dynamic one is whatever the app answers reads with.
    public override var value: Data? {
        get { with { $0.value } }
        set { with { $0.value = newValue } }
    }

    public override var properties: CharacteristicProperties {
        get { with { $0.properties } }
        set { with { $0.properties = newValue } }
    }

    public var permissions: AttributePermissions {
        get { with { $0.permissions } }
        set { with { $0.permissions = newValue } }
    }

    /// Each must be a `MutableDescriptor`; the stack adds the Client Characteristic Configuration itself.
    public override var descriptors: [Descriptor]? {
        get { with { $0.descriptors } }
        set { with { $0.descriptors = newValue } }
    }

    /// The centrals subscribed to this characteristic now.
    public var subscribedCentrals: [Central]? { with { $0.subscribed } }

    func subscription(_ central: Central, on: Bool) {
        with { state in
            state.subscribed.removeAll { $0.identifier == central.identifier }
            if on { state.subscribed.append(central) }
        }
    }
}

/// Core Bluetooth's CBDescriptor. Its value is typed as Core Bluetooth types it: NSNumber for Extended Properties
/// and the two Configurations, String for a User Description, Data otherwise.
public class Descriptor: CustomStringConvertible, @unchecked Sendable {
    struct Storage {
        var uuid: BluetoothUUID
        var value: Handover<Any?>
        weak var characteristic: Characteristic?
        var handle: UInt32 = 0
    }
    let storage: Guarded<Storage>

    init(uuid: BluetoothUUID, value: Any?, handle: UInt32, characteristic: Characteristic?) {
        storage = Guarded(Storage(uuid: uuid, value: Handover(value), characteristic: characteristic, handle: handle))
    }

    func with<T>(_ body: (inout Storage) -> T) -> T { storage.with(body) }

    public var uuid: BluetoothUUID { with { $0.uuid } }
    public var characteristic: Characteristic? { with { $0.characteristic } }
    public var value: Any? { with { $0.value.value } }
    var handle: UInt32 { with { $0.handle } }

    func setValue(bytes: Data) { with { $0.value = Handover(Self.typed(bytes, for: $0.uuid)) } }

    /// The bytes a descriptor value is sent as (Core Vol 3 Part G §3.3.3).
    static func bytes(_ value: Any?) -> Data? {
        switch value {
        case let data as Data: data
        case let text as String: Data(text.utf8)
        case let number as NSNumber: Data([UInt8(truncatingIfNeeded: number.intValue), UInt8(truncatingIfNeeded: number.intValue >> 8)])
        case nil: Data()
        default: nil
        }
    }

    static func typed(_ bytes: Data, for uuid: BluetoothUUID) -> Any {
        switch uuid.uuid16 {
        case 0x2900, 0x2902, 0x2903:
            let raw = Array(bytes)
            return NSNumber(value: UInt16(raw.first ?? 0) | UInt16(raw.count > 1 ? raw[1] : 0) << 8)
        case 0x2901: return String(decoding: bytes, as: UTF8.self)
        default: return bytes
        }
    }

    public var description: String { "<Descriptor \(uuid) value \(value.map { "\($0)" } ?? "nil")>" }
}

/// Core Bluetooth's CBMutableDescriptor: a fixed descriptor value, such as a Characteristic User Description
/// (a String) or a Presentation Format (Data). The stack adds the Client Characteristic Configuration itself.
public final class MutableDescriptor: Descriptor, @unchecked Sendable {
    public init(type UUID: BluetoothUUID, value: Any?) {
        super.init(uuid: UUID, value: value, handle: 0, characteristic: nil)
    }
}

/// Core Bluetooth's CBCentral: a remote central, by the identifier the stack keeps for it.
public struct Central: Sendable, Hashable, CustomStringConvertible {
    public let identifier: UUID
    /// The most one notification to it carries (ATT_MTU - 3).
    public let maximumUpdateValueLength: Int

    public var description: String { "<Central \(identifier) maximumUpdateValueLength \(maximumUpdateValueLength)>" }
}
