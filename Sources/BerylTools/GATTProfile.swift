import BerylCore
import Foundation

/// The `beryl serve` profile file: services to publish and what to advertise. A user-facing format,
/// so every rule broken is reported with the file, the field's path and the reason.
public struct GATTProfile: Sendable, Equatable {
    public struct Characteristic: Sendable, Equatable {
        public var uuid: BluetoothUUID
        /// Core Bluetooth property bits.
        public var properties: UInt8
        /// readable 0x01, writeable 0x02, readEncryptionRequired 0x04, writeEncryptionRequired 0x08.
        public var permissions: UInt8
        public var value: [UInt8]?
        public var notify: Periodic?
        public var indicate: Periodic?
        public var descriptors: [(uuid: BluetoothUUID, value: [UInt8])]

        public static func == (a: Characteristic, b: Characteristic) -> Bool {
            a.uuid == b.uuid && a.properties == b.properties && a.permissions == b.permissions && a.value == b.value
                && a.notify == b.notify && a.indicate == b.indicate && a.descriptors.map(\.uuid) == b.descriptors.map(\.uuid)
        }
    }

    public enum PeriodicValue: Sendable, Equatable {
        case counter8
        case fixed([UInt8])
    }

    public struct Periodic: Sendable, Equatable {
        public var every: Duration
        public var value: PeriodicValue
    }

    public struct Service: Sendable, Equatable {
        public var uuid: BluetoothUUID
        public var primary: Bool
        public var characteristics: [Characteristic]
    }

    public var localName: String?
    public var advertise: [BluetoothUUID]
    public var services: [Service]

    static let propertyBits: [String: UInt8] = [
        "broadcast": 0x01, "read": 0x02, "writeWithoutResponse": 0x04, "write": 0x08, "notify": 0x10, "indicate": 0x20,
        "authenticatedSignedWrites": 0x40, "extendedProperties": 0x80, "notifyEncryptionRequired": 0x10, "indicateEncryptionRequired": 0x20,
    ]
    static let permissionBits: [String: UInt8] = [
        "readable": 0x01, "writeable": 0x02, "readEncryptionRequired": 0x04, "writeEncryptionRequired": 0x08,
        "readAuthenticationRequired": 0x10, "writeAuthenticationRequired": 0x20,
    ]

    public static func load(path: String) throws(ProfileFileError) -> GATTProfile {
        guard let data = FileManager.default.contents(atPath: path) else { throw ProfileFileError(file: path, field: "$", reason: "cannot read the file") }
        let object: Any
        do { object = try JSONSerialization.jsonObject(with: data) } catch {
            throw ProfileFileError(file: path, field: "$", reason: "not JSON: \(error.localizedDescription)")
        }
        return try parse(object, file: path)
    }

    static func parse(_ object: Any, file: String) throws(ProfileFileError) -> GATTProfile {
        func fail(_ field: String, _ reason: String) -> ProfileFileError { ProfileFileError(file: file, field: field, reason: reason) }
        func uuid(_ value: Any?, _ field: String) throws(ProfileFileError) -> BluetoothUUID {
            guard let text = value as? String, let parsed = BluetoothUUID(text) else { throw fail(field, "not a UUID (\"180D\" or \"6E400001-B5A3-F393-E0A9-E50E24DCCA9E\")") }
            return parsed
        }
        func hex(_ value: Any?, _ field: String) throws(ProfileFileError) -> [UInt8] {
            guard let text = value as? String, let bytes = Hex.decode(text) else { throw fail(field, "not hex bytes") }
            guard bytes.count <= 512 else { throw fail(field, "\(bytes.count) bytes; a value is at most 512") }
            return bytes
        }
        guard let root = object as? [String: Any] else { throw fail("$", "a profile is a JSON object") }
        for key in root.keys where !["localName", "advertise", "services"].contains(key) { throw fail("$.\(key)", "unknown field") }
        let localName = root["localName"] as? String
        if root["localName"] != nil, localName == nil || localName!.isEmpty || localName!.utf8.count > 248 { throw fail("$.localName", "a name of 1 to 248 bytes") }
        var advertise: [BluetoothUUID] = []
        for (index, value) in ((root["advertise"] as? [Any]) ?? []).enumerated() { advertise.append(try uuid(value, "$.advertise[\(index)]")) }
        guard let services = root["services"] as? [[String: Any]], !services.isEmpty else { throw fail("$.services", "a non-empty list of services") }
        var parsed: [Service] = []
        for (s, service) in services.enumerated() {
            let path = "$.services[\(s)]"
            for key in service.keys where !["uuid", "primary", "characteristics"].contains(key) { throw fail("\(path).\(key)", "unknown field") }
            var characteristics: [Characteristic] = []
            for (c, characteristic) in ((service["characteristics"] as? [[String: Any]]) ?? []).enumerated() {
                let cpath = "\(path).characteristics[\(c)]"
                for key in characteristic.keys where !["uuid", "properties", "permissions", "value", "notify", "indicate", "descriptors"].contains(key) {
                    throw fail("\(cpath).\(key)", "unknown field")
                }
                var properties: UInt8 = 0
                for (p, name) in ((characteristic["properties"] as? [String]) ?? []).enumerated() {
                    guard let bit = propertyBits[name] else { throw fail("\(cpath).properties[\(p)]", "unknown property '\(name)'") }
                    properties |= bit
                }
                guard properties != 0 else { throw fail("\(cpath).properties", "at least one property") }
                var permissions: UInt8 = 0
                if let names = characteristic["permissions"] as? [String] {
                    for (p, name) in names.enumerated() {
                        guard let bit = permissionBits[name] else { throw fail("\(cpath).permissions[\(p)]", "unknown permission '\(name)'") }
                        permissions |= bit
                    }
                } else {
                    // Default to what the properties need.
                    if properties & 0x02 != 0 { permissions |= 0x01 }
                    if properties & 0x0C != 0 { permissions |= 0x02 }
                }
                if properties & 0x02 != 0, permissions & 0x05 == 0 { throw fail("\(cpath).permissions", "the read property needs a read permission") }
                if properties & 0x0C != 0, permissions & 0x0A == 0 { throw fail("\(cpath).permissions", "a write property needs a write permission") }
                let value = characteristic["value"].map { _ in () } != nil ? try hex(characteristic["value"], "\(cpath).value") : nil
                if value != nil, properties & 0x0C != 0 { throw fail("\(cpath).value", "a characteristic with a cached value is read-only (Core Bluetooth); drop the write properties or the value") }
                func periodic(_ key: String, bit: UInt8) throws(ProfileFileError) -> Periodic? {
                    guard let entry = characteristic[key] else { return nil }
                    guard properties & bit != 0 else { throw fail("\(cpath).\(key)", "needs the \(key) property") }
                    guard let object = entry as? [String: Any], let every = object["everyMs"] as? Int, (10...600_000).contains(every) else {
                        throw fail("\(cpath).\(key).everyMs", "a period from 10 to 600000 ms")
                    }
                    let text = object["value"] as? String ?? "counter8"
                    return Periodic(every: .milliseconds(every), value: text == "counter8" ? .counter8 : .fixed(try hex(text, "\(cpath).\(key).value")))
                }
                var descriptors: [(BluetoothUUID, [UInt8])] = []
                for (d, descriptor) in ((characteristic["descriptors"] as? [[String: Any]]) ?? []).enumerated() {
                    descriptors.append((try uuid(descriptor["uuid"], "\(cpath).descriptors[\(d)].uuid"), try hex(descriptor["value"] ?? "", "\(cpath).descriptors[\(d)].value")))
                }
                characteristics.append(Characteristic(uuid: try uuid(characteristic["uuid"], "\(cpath).uuid"), properties: properties,
                                                      permissions: permissions, value: value, notify: try periodic("notify", bit: 0x10),
                                                      indicate: try periodic("indicate", bit: 0x20), descriptors: descriptors))
            }
            parsed.append(Service(uuid: try uuid(service["uuid"], "\(path).uuid"), primary: service["primary"] as? Bool ?? true, characteristics: characteristics))
        }
        return GATTProfile(localName: localName, advertise: advertise, services: parsed)
    }

    /// Advertising data and scan response (Core Vol 3 Part C §11, Supplement Part A): flags and service
    /// UUIDs in the 31-byte advertising packet, the local name in the scan response.
    public var advertisingPayloads: (advertising: [UInt8], scanResponse: [UInt8]) {
        var advertising: [UInt8] = [2, 0x01, 0x06]
        let short = advertise.compactMap(\.uuid16)
        if !short.isEmpty, advertising.count + 2 + 2 * short.count <= 31 {
            advertising += [UInt8(1 + 2 * short.count), 0x03] + short.flatMap { [UInt8($0 & 0xFF), UInt8($0 >> 8)] }
        }
        for long in advertise where long.uuid16 == nil && advertising.count + 18 <= 31 {
            advertising += [17, 0x07] + long.wire128
        }
        var scanResponse: [UInt8] = []
        if let localName {
            let name = Array(localName.utf8.prefix(29))
            scanResponse = [UInt8(1 + name.count), name.count == localName.utf8.count ? 0x09 : 0x08] + name
        }
        return (advertising, scanResponse)
    }
}

public struct ProfileFileError: Error, Equatable, Sendable, CustomStringConvertible {
    public var file: String
    public var field: String
    public var reason: String
    public var description: String { "\(file): \(field): \(reason)" }
}

/// The dynamic values `beryl serve` answers for: what centrals last wrote, up to 512 bytes each
/// (Core Vol 3 Part F §3.2.9).
public struct ProfileValues<Key: Hashable & Sendable>: Sendable {
    private var values: [Key: [UInt8]] = [:]

    public init() {}

    public subscript(key: Key) -> [UInt8] { values[key] ?? [] }

    /// A batch of writes, all or nothing, as Core Bluetooth answers a batch once: a write at offset 0 replaces the
    /// value; a later part of a long write extends what came before it. Returns the ATT error that refuses the whole
    /// batch (Invalid Offset 0x07, Invalid Attribute Value Length 0x0D; Core Vol 3 Part F §3.4.1.1), or nil.
    public mutating func apply(_ writes: [(key: Key, offset: Int, value: [UInt8])]) -> UInt8? {
        var staged = values
        for write in writes {
            var value = write.offset == 0 ? [] : staged[write.key] ?? []
            guard write.offset <= value.count else { return 0x07 }
            value.replaceSubrange(write.offset..<min(value.count, write.offset + write.value.count), with: write.value)
            guard value.count <= 512 else { return 0x0D }
            staged[write.key] = value
        }
        values = staged
        return nil
    }
}
