import BerylCore
import BerylManager
import BerylWire
import FoundationEssentials
import Glibc

// managerd's proto ⇄ core translation for restoration: the wire's PreservedState is what an app hears in its
// Welcome (willRestoreState), and what the restoration store held before version 2 (read here by migration).

extension PreservedState {
    /// A stored record of any version (see `PreservedState.decode`); version 1 is the wire message's bytes.
    public static func decodeStored(_ bytes: [UInt8]) throws(PreservedStateError) -> PreservedState {
        try decode(bytes) { legacy throws(PreservedStateError) in
            let message: Beryl_Ipc_V1_PreservedState
            do {
                message = try Beryl_Ipc_V1_PreservedState(serializedBytes: legacy)
            } catch {
                throw .unreadable("neither version 2 nor a version 1 record: \(error)")
            }
            return try PreservedState(wire: message)
        }
    }

    public init(wire: Beryl_Ipc_V1_PreservedState) throws(PreservedStateError) {
        self.init()
        if wire.hasCentral {
            let central = wire.central
            do {
                var links: [Link] = []
                for link in central.links {
                    links.append(Link(identifier: link.identifier, pending: link.pending, name: link.name,
                                      options: ConnectOptions(notifyOnConnection: link.notifyOnConnection, notifyOnDisconnection: link.notifyOnDisconnection,
                                                              notifyOnNotification: link.notifyOnNotification),
                                      database: link.hasDatabase ? try RemoteDatabase(wire: link.database) : nil,
                                      notifyingValueHandles: try link.notifyingValueHandles.map { value throws(PreservedStateError) in try handle(value) }))
                }
                let scan = central.scanning
                    ? ScanRequest(services: try uuids(central.scanServiceUuids), allowDuplicates: central.allowDuplicates, solicited: try uuids(central.solicitedServiceUuids))
                    : nil
                self.central = Central(scan: scan, links: links)
            }
        }
        if wire.hasPeripheral {
            let peripheral = wire.peripheral
            var services: [PublishedService] = []
            for service in peripheral.services { services.append(try PublishedService(wire: service)) }
            var subscriptions: [Subscription] = []
            for subscription in peripheral.subscriptions { subscriptions.append(try Subscription(wire: subscription)) }
            let advertising = peripheral.advertising
                ? Advertising(localName: peripheral.localName, serviceUUIDs: try uuids(peripheral.advertisedServiceUuids)) : nil
            self.peripheral = Peripheral(services: services, advertising: advertising, subscriptions: subscriptions)
        }
    }

    public var wire: Beryl_Ipc_V1_PreservedState {
        .with { state in
            if let central {
                state.central = .with { wire in
                    if let scan = central.scan {
                        wire.scanning = true
                        wire.scanServiceUuids = scan.services.map(\.description)
                        wire.allowDuplicates = scan.allowDuplicates
                        wire.solicitedServiceUuids = scan.solicited.map(\.description)
                    }
                    wire.links = central.links.map { link in
                        .with {
                            $0.identifier = link.identifier
                            $0.pending = link.pending
                            $0.name = link.name
                            $0.notifyOnConnection = link.options.notifyOnConnection
                            $0.notifyOnDisconnection = link.options.notifyOnDisconnection
                            $0.notifyOnNotification = link.options.notifyOnNotification
                            if let database = link.database { $0.database = database.wire }
                            $0.notifyingValueHandles = link.notifyingValueHandles.map(UInt32.init)
                        }
                    }
                }
            }
            if let peripheral {
                state.peripheral = .with { wire in
                    wire.services = peripheral.services.map(\.wire)
                    if let advertising = peripheral.advertising {
                        wire.advertising = true
                        wire.localName = advertising.localName
                        wire.advertisedServiceUuids = advertising.serviceUUIDs.map(\.description)
                    }
                    wire.subscriptions = peripheral.subscriptions.map(\.wire)
                }
            }
        }
    }
}

extension PreservedState.PublishedService {
    public init(wire: Beryl_Ipc_V1_PreservedService) throws(PreservedStateError) {
        let published = wire.hasPublished ? wire.published : nil
        self.init(definition: try ServiceDefinition(wire: wire.spec),
                  handles: try published.map { published throws(PreservedStateError) in try handle(published.startHandle)...handle(max(published.startHandle, published.endHandle)) },
                  valueHandles: try (published?.valueHandles ?? []).map { value throws(PreservedStateError) in try handle(value) })
    }

    public var wire: Beryl_Ipc_V1_PreservedService {
        .with {
            $0.spec = definition.wire
            if let handles {
                $0.published = .with {
                    $0.startHandle = UInt32(handles.lowerBound)
                    $0.endHandle = UInt32(handles.upperBound)
                    $0.valueHandles = valueHandles.map(UInt32.init)
                }
            }
        }
    }
}

extension PreservedState.Subscription {
    public init(wire: Beryl_Ipc_V1_CentralSubscription) throws(PreservedStateError) {
        self.init(central: wire.central, valueHandle: try handle(wire.valueHandle), notify: wire.notify, indicate: wire.indicate,
                  maximumUpdateLength: UInt16(clamping: wire.maximumUpdateLength))
    }

    /// The app's manager is its session's only one.
    public var wire: Beryl_Ipc_V1_CentralSubscription {
        .with {
            $0.manager = 1
            $0.central = central
            $0.valueHandle = UInt32(valueHandle)
            $0.notify = notify
            $0.indicate = indicate
            $0.maximumUpdateLength = UInt32(maximumUpdateLength)
        }
    }
}

extension ServiceDefinition {
    public init(wire: Beryl_Ipc_V1_ServiceSpec) throws(PreservedStateError) {
        var characteristics: [Characteristic] = []
        for item in wire.characteristics {
            var descriptors: [Descriptor] = []
            for descriptor in item.descriptors { descriptors.append(Descriptor(uuid: try parseUUID(descriptor.uuid), value: Array(descriptor.value))) }
            guard let properties = UInt16(exactly: item.properties), let permissions = UInt8(exactly: item.permissions) else {
                throw .unreadable("characteristic \(item.uuid): properties 0x\(String(item.properties, radix: 16)) or permissions 0x\(String(item.permissions, radix: 16)) out of range")
            }
            characteristics.append(Characteristic(uuid: try parseUUID(item.uuid), properties: properties, permissions: permissions,
                                                  cachedValue: item.cached ? Array(item.value) : nil, descriptors: descriptors))
        }
        self.init(uuid: try parseUUID(wire.uuid), primary: wire.primary, characteristics: characteristics,
                  includedStartHandles: try wire.includedStartHandles.map { value throws(PreservedStateError) in try handle(value) })
    }

    public var wire: Beryl_Ipc_V1_ServiceSpec {
        .with {
            $0.uuid = uuid.description
            $0.primary = primary
            $0.includedStartHandles = includedStartHandles.map(UInt32.init)
            $0.characteristics = characteristics.map { characteristic in
                .with {
                    $0.uuid = characteristic.uuid.description
                    $0.properties = UInt32(characteristic.properties)
                    $0.permissions = UInt32(characteristic.permissions)
                    $0.cached = characteristic.cachedValue != nil
                    $0.value = Data(characteristic.cachedValue ?? [])
                    $0.descriptors = characteristic.descriptors.map { descriptor in .with { $0.uuid = descriptor.uuid.description; $0.value = Data(descriptor.value) } }
                }
            }
        }
    }
}

extension RemoteDatabase {
    public init(wire: Beryl_Ipc_V1_GattDatabase) throws(PreservedStateError) {
        var services: [Service] = []
        for service in wire.services {
            var characteristics: [Characteristic] = []
            for item in service.characteristics { characteristics.append(try Characteristic(wire: item)) }
            var included: [Included] = []
            for item in service.included { included.append(Included(uuid: try parseUUID(item.uuid), handles: try handleRange(item.startHandle, item.endHandle))) }
            services.append(Service(uuid: try parseUUID(service.uuid), handles: try handleRange(service.startHandle, service.endHandle),
                                    characteristics: characteristics, included: included))
        }
        self.init(services: services)
    }

    public var wire: Beryl_Ipc_V1_GattDatabase {
        .with {
            $0.services = services.map { service in
                .with {
                    $0.uuid = service.uuid.description
                    $0.startHandle = UInt32(service.handles.lowerBound)
                    $0.endHandle = UInt32(service.handles.upperBound)
                    $0.characteristics = service.characteristics.map { characteristic in
                        .with {
                            $0.uuid = characteristic.uuid.description
                            $0.properties = UInt32(characteristic.properties)
                            $0.valueHandle = UInt32(characteristic.valueHandle)
                            $0.descriptors = characteristic.descriptors.map { descriptor in
                                .with { $0.uuid = descriptor.uuid.description; $0.handle = UInt32(descriptor.handle) }
                            }
                        }
                    }
                    $0.included = service.included.map { included in
                        .with {
                            $0.uuid = included.uuid.description
                            $0.startHandle = UInt32(included.handles.lowerBound)
                            $0.endHandle = UInt32(included.handles.upperBound)
                        }
                    }
                }
            }
        }
    }
}

extension RemoteDatabase.Discovery {
    /// What attd answered a GattDiscover with. Below the services level its answer is a container (one service
    /// without a UUID holding what was found) for the service or characteristic that `range` starts at. `sought`: the
    /// service UUIDs the discovery looked for (none: every service).
    public init(wire found: Beryl_Ipc_V1_GattDatabase, depth: Beryl_Ipc_V1_GattDiscoveryDepth, range: ClosedRange<UInt16>,
                sought: [String]) throws(PreservedStateError) {
        let container = found.services.first ?? .init()
        var soughtUUIDs: Set<BluetoothUUID> = []
        for text in sought { soughtUUIDs.insert(try parseUUID(text)) }
        let soughtOrEvery = soughtUUIDs.isEmpty ? nil : soughtUUIDs
        switch depth {
        case .whole, .UNRECOGNIZED:
            self = .whole(try RemoteDatabase(wire: found).services, sought: soughtOrEvery)
        case .services:
            self = .services(try RemoteDatabase(wire: found).services, sought: soughtOrEvery)
        case .included:
            var included: [RemoteDatabase.Included] = []
            for item in container.included { included.append(.init(uuid: try parseUUID(item.uuid), handles: try handleRange(item.startHandle, item.endHandle))) }
            self = .included(included, inServiceAt: range.lowerBound)
        case .characteristics:
            var characteristics: [RemoteDatabase.Characteristic] = []
            for item in container.characteristics { characteristics.append(try RemoteDatabase.Characteristic(wire: item)) }
            self = .characteristics(characteristics, inServiceAt: range.lowerBound)
        case .descriptors:
            // A characteristic's descriptors follow its value (Core Vol 3 Part G §3.3).
            guard range.lowerBound > 0 else { throw .unreadable("descriptors cannot start at handle 0") }
            var descriptors: [RemoteDatabase.Descriptor] = []
            for item in container.characteristics.first?.descriptors ?? [] {
                descriptors.append(.init(uuid: try parseUUID(item.uuid), handle: try handle(item.handle)))
            }
            self = .descriptors(descriptors, ofValueAt: range.lowerBound - 1)
        }
    }
}

extension RemoteDatabase.Characteristic {
    init(wire item: Beryl_Ipc_V1_GattCharacteristicInfo) throws(PreservedStateError) {
        var descriptors: [RemoteDatabase.Descriptor] = []
        for descriptor in item.descriptors { descriptors.append(.init(uuid: try parseUUID(descriptor.uuid), handle: try handle(descriptor.handle))) }
        self.init(uuid: try parseUUID(item.uuid), properties: UInt8(truncatingIfNeeded: item.properties), valueHandle: try handle(item.valueHandle),
                  descriptors: descriptors)
    }
}

private func parseUUID(_ text: String) throws(PreservedStateError) -> BluetoothUUID {
    guard let uuid = BluetoothUUID(text) else { throw .unreadable("not a Bluetooth UUID: \(text)") }
    return uuid
}

private func uuids(_ texts: [String]) throws(PreservedStateError) -> [BluetoothUUID] {
    var result: [BluetoothUUID] = []
    for text in texts { result.append(try parseUUID(text)) }
    return result
}

/// Attribute handles are 16 bits (Core Vol 3 Part F §3.2.2); a wider number is a damaged record, not a truncation.
private func handle(_ value: UInt32) throws(PreservedStateError) -> UInt16 {
    guard let handle = UInt16(exactly: value) else { throw .unreadable("attribute handle \(value) is out of range") }
    return handle
}

private func handleRange(_ start: UInt32, _ end: UInt32) throws(PreservedStateError) -> ClosedRange<UInt16> {
    let lower = try handle(start), upper = try handle(end)
    guard lower <= upper else { throw .unreadable("handle range \(start)...\(end) is reversed") }
    return lower...upper
}
