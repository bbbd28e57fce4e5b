import Foundation
import Synchronization

// Core Bluetooth's attribute objects. A discovered attribute belongs to its peripheral (held weakly upwards, as
// Core Bluetooth's are, so that nothing outlives what it points to by an unowned reference); an app's own is
// published through a peripheral manager. Each object guards its state with a lock of its own, so any thread may
// read it; the library changes it before it hands the object to a callback.
//
// Core Bluetooth makes CBMutableService a subclass of CBService (and so on). Swift checks the thread-safety
// (Sendable) of a final class and cannot check a class hierarchy's, so each pair is one final class here, with the
// mutable name as an alias: the guide's code compiles as it is, and what only Core Bluetooth's types refused (adding
// a discovered service, updating a discovered characteristic) is refused as API misuse instead.

/// Who made an attribute object: the app (to publish) or the library (found on a peer).
enum AttributeOrigin: Sendable {
    case app
    case discovered
}

extension Peripheral {
    /// A setter Core Bluetooth's CBService, CBCharacteristic or CBDescriptor does not have, used on a discovered one:
    /// the library's copy of the peer's database is not changed, and the app hears why.
    func refuseChange(_ what: String, of attribute: String) {
        reportMisuse("\(what) of a discovered \(attribute) is the peer's; only a Mutable\(attribute) the app made can be changed")
    }
}

/// Core Bluetooth's CBService and CBMutableService.
public final class Service: CustomStringConvertible, Sendable {
    struct Storage {
        var uuid: BluetoothUUID
        var isPrimary: Bool
        var characteristics: [Characteristic]?
        var included: [Service]?
        weak var peripheral: Peripheral?
        /// The service's handles in the peer's database (a discovered one), or where it was published (an app's).
        var range: ClosedRange<UInt32> = 0...0
    }
    let storage: Guarded<Storage>
    let origin: AttributeOrigin

    init(uuid: BluetoothUUID, isPrimary: Bool, range: ClosedRange<UInt32>, peripheral: Peripheral?) {
        storage = Guarded(Storage(uuid: uuid, isPrimary: isPrimary, peripheral: peripheral, range: range))
        origin = .discovered
    }

    /// CBMutableService(type:primary:): a service the app publishes.
    public init(type UUID: BluetoothUUID, primary isPrimary: Bool) {
        storage = Guarded(Storage(uuid: UUID, isPrimary: isPrimary, peripheral: nil))
        origin = .app
    }

    func with<T>(_ body: (inout Storage) -> T) -> T { storage.with(body) }

    public var uuid: BluetoothUUID { with { $0.uuid } }
    public var isPrimary: Bool { with { $0.isPrimary } }
    /// The peripheral this service was discovered on; nil for a published one (or once the peripheral is gone).
    public var peripheral: Peripheral? { with { $0.peripheral } }
    /// Nil until discovered. For an app's service, set before it is added, each made with
    /// `MutableCharacteristic(type:properties:value:permissions:)`.
    public var characteristics: [Characteristic]? {
        get { with { $0.characteristics } }
        set { if origin == .app { with { $0.characteristics = newValue } } else { peripheral?.refuseChange("characteristics", of: "Service") } }
    }
    /// For an app's service: services this one includes, each added already (Core Bluetooth's rule).
    public var includedServices: [Service]? {
        get { with { $0.included } }
        set { if origin == .app { with { $0.included = newValue } } else { peripheral?.refuseChange("includedServices", of: "Service") } }
    }
    var range: ClosedRange<UInt32> { with { $0.range } }
    var startHandle: UInt32 { range.lowerBound }
    func setStart(_ start: UInt32) { with { $0.range = start...start } }

    public var description: String {
        "<Service \(uuid)\(isPrimary ? "" : " secondary") handles \(range.lowerBound)–\(range.upperBound), \(characteristics?.count ?? 0) characteristics>"
    }
}

/// Core Bluetooth's CBMutableService: a `Service` the app made.
public typealias MutableService = Service

/// Core Bluetooth's CBCharacteristic and CBMutableCharacteristic.
public final class Characteristic: CustomStringConvertible, Sendable {
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
    let origin: AttributeOrigin

    init(uuid: BluetoothUUID, properties: CharacteristicProperties, value: Data?, valueHandle: UInt32, service: Service?) {
        storage = Guarded(Storage(uuid: uuid, properties: properties, value: value, service: service, valueHandle: valueHandle))
        origin = .discovered
    }

    /// CBMutableCharacteristic(type:properties:value:permissions:). A value given when the service is added is
    /// cached: the stack serves it, and the characteristic is read-only. Nil makes it dynamic: reads and writes come
    /// to the app's delegate.
    public init(type UUID: BluetoothUUID, properties: CharacteristicProperties, value: Data?, permissions: AttributePermissions) {
        storage = Guarded(Storage(uuid: UUID, properties: properties, value: value, permissions: permissions))
        origin = .app
    }

    func with<T>(_ body: (inout Storage) -> T) -> T { storage.with(body) }

    public var uuid: BluetoothUUID { with { $0.uuid } }
    public var service: Service? { with { $0.service } }
    /// An app's may change them until its service is added.
    public var properties: CharacteristicProperties {
        get { with { $0.properties } }
        set { if origin == .app { with { $0.properties = newValue } } else { refuseChange("properties") } }
    }
    /// The last value read or notified (a discovered one). An app's copy (the guide's write handler sets it): once
    /// published, a cached value changes only by adding the service again, and a dynamic one is whatever the app
    /// answers reads with.
    public var value: Data? {
        get { with { $0.value } }
        set { if origin == .app { with { $0.value = newValue } } else { refuseChange("value") } }
    }
    /// For an app's: each made with `MutableDescriptor(type:value:)`; the stack adds the Client Characteristic
    /// Configuration itself.
    public var descriptors: [Descriptor]? {
        get { with { $0.descriptors } }
        set { if origin == .app { with { $0.descriptors = newValue } } else { refuseChange("descriptors") } }
    }
    public var isNotifying: Bool { with { $0.isNotifying } }
    /// CBMutableCharacteristic's: who may read and write an app's characteristic.
    public var permissions: AttributePermissions {
        get { with { $0.permissions } }
        set { if origin == .app { with { $0.permissions = newValue } } else { refuseChange("permissions") } }
    }

    private func refuseChange(_ what: String) { service?.peripheral?.refuseChange(what, of: "Characteristic") }
    /// The centrals subscribed to an app's published characteristic now (nil for a discovered one, as Core
    /// Bluetooth's CBCharacteristic has none).
    public var subscribedCentrals: [Central]? { origin == .app ? with { $0.subscribed } : nil }

    var valueHandle: UInt32 { with { $0.valueHandle } }
    func setValue(_ value: Data) { with { $0.value = value } }
    func setNotifying(_ on: Bool) { with { $0.isNotifying = on } }
    func setDescriptors(_ descriptors: [Descriptor]) { with { $0.descriptors = descriptors } }
    func setHandle(_ handle: UInt32) { with { $0.valueHandle = handle } }

    /// Returns whether it changed: a central is subscribed once (a restarted managerd reports the subscriptions it
    /// adopted, which the app heard of already).
    @discardableResult
    func subscription(_ central: Central, on: Bool) -> Bool {
        with { state in
            let was = state.subscribed.contains { $0.identifier == central.identifier }
            state.subscribed.removeAll { $0.identifier == central.identifier }
            if on { state.subscribed.append(central) }
            return was != on
        }
    }

    public var description: String {
        "<Characteristic \(uuid) properties 0x\(String(properties.rawValue, radix: 16)) value \(value.map { "\($0.count) bytes" } ?? "nil")\(isNotifying ? ", notifying" : "")>"
    }
}

/// Core Bluetooth's CBMutableCharacteristic: a `Characteristic` the app made.
public typealias MutableCharacteristic = Characteristic

/// A descriptor's value as Core Bluetooth types it: NSNumber for Extended Properties and the two Configurations,
/// String for a User Description, Data otherwise. Kept as a value (an `Any` is not safe to share between threads).
enum DescriptorValue: Sendable, Equatable {
    case none
    case data(Data)
    case string(String)
    case number(NSNumber)
    /// What an app gave that no descriptor can hold (its type's name), refused when the service is added; its
    /// `value` reads nil.
    case unsupported(String)

    init(_ value: Any?) {
        switch value {
        case nil: self = .none
        case let data as Data: self = .data(data)
        case let text as String: self = .string(text)
        case let number as NSNumber: self = .number(number)
        case let other?: self = .unsupported("\(type(of: other))")
        }
    }

    /// As Core Bluetooth types it for the descriptor's UUID (Core Vol 3 Part G §3.3.3).
    init(bytes: Data, for uuid: BluetoothUUID) {
        switch uuid.uuid16 {
        case 0x2900, 0x2902, 0x2903:
            let raw = Array(bytes)
            self = .number(NSNumber(value: UInt16(raw.first ?? 0) | UInt16(raw.count > 1 ? raw[1] : 0) << 8))
        case 0x2901: self = .string(String(decoding: bytes, as: UTF8.self))
        default: self = .data(bytes)
        }
    }

    var any: Any? {
        switch self {
        case .none, .unsupported: nil
        case .data(let data): data
        case .string(let text): text
        case .number(let number): number
        }
    }

    /// The bytes the value is sent as (Core Vol 3 Part G §3.3.3); nil for one no descriptor can hold.
    var bytes: Data? {
        switch self {
        case .none: Data()
        case .data(let data): data
        case .string(let text): Data(text.utf8)
        case .number(let number): Data([UInt8(truncatingIfNeeded: number.intValue), UInt8(truncatingIfNeeded: number.intValue >> 8)])
        case .unsupported: nil
        }
    }
}

/// Core Bluetooth's CBDescriptor and CBMutableDescriptor.
public final class Descriptor: CustomStringConvertible, Sendable {
    struct Storage {
        var uuid: BluetoothUUID
        var value: DescriptorValue
        weak var characteristic: Characteristic?
        var handle: UInt32 = 0
    }
    let storage: Guarded<Storage>
    let origin: AttributeOrigin

    init(uuid: BluetoothUUID, value: DescriptorValue, handle: UInt32, characteristic: Characteristic?) {
        storage = Guarded(Storage(uuid: uuid, value: value, characteristic: characteristic, handle: handle))
        origin = .discovered
    }

    /// CBMutableDescriptor(type:value:): a fixed descriptor value, such as a Characteristic User Description (a
    /// String) or a Presentation Format (Data). The stack adds the Client Characteristic Configuration itself.
    public init(type UUID: BluetoothUUID, value: Any?) {
        storage = Guarded(Storage(uuid: UUID, value: DescriptorValue(value)))
        origin = .app
    }

    init(type UUID: BluetoothUUID, typedValue: DescriptorValue) {
        storage = Guarded(Storage(uuid: UUID, value: typedValue))
        origin = .app
    }

    func with<T>(_ body: (inout Storage) -> T) -> T { storage.with(body) }

    public var uuid: BluetoothUUID { with { $0.uuid } }
    public var characteristic: Characteristic? { with { $0.characteristic } }
    public var value: Any? { with { $0.value.any } }
    var typedValue: DescriptorValue { with { $0.value } }
    var handle: UInt32 { with { $0.handle } }

    func setValue(bytes: Data) { with { $0.value = DescriptorValue(bytes: bytes, for: $0.uuid) } }

    public var description: String { "<Descriptor \(uuid) value \(value.map { "\($0)" } ?? "nil")>" }
}

/// Core Bluetooth's CBMutableDescriptor: a `Descriptor` the app made.
public typealias MutableDescriptor = Descriptor

/// Core Bluetooth's CBCentral: a remote central, by the identifier the stack keeps for it.
public struct Central: Sendable, Hashable, CustomStringConvertible {
    public let identifier: UUID
    /// The most one notification to it carries (ATT_MTU - 3).
    public let maximumUpdateValueLength: Int

    public var description: String { "<Central \(identifier) maximumUpdateValueLength \(maximumUpdateValueLength)>" }
}
