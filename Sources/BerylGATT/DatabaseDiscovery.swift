import BerylATT
import BerylCore

/// What a discovery covers: a handle range, and optionally only some services and characteristics (by UUID).
public struct DiscoveryScope: Equatable, Sendable {
    public var range: ClosedRange<UInt16>
    public var services: [BluetoothUUID]?
    public var characteristics: [BluetoothUUID]?

    public init(range: ClosedRange<UInt16> = 1...0xFFFF, services: [BluetoothUUID]? = nil, characteristics: [BluetoothUUID]? = nil) {
        self.range = range
        self.services = services
        self.characteristics = characteristics
    }
}

public struct DiscoveredCharacteristicTree: Equatable, Sendable {
    public var characteristic: DiscoveredCharacteristic
    public var descriptors: [DiscoveredDescriptor]
    public init(characteristic: DiscoveredCharacteristic, descriptors: [DiscoveredDescriptor]) {
        self.characteristic = characteristic
        self.descriptors = descriptors
    }
}

public struct DiscoveredServiceTree: Equatable, Sendable {
    public var service: DiscoveredService
    public var included: [DiscoveredInclude]
    public var characteristics: [DiscoveredCharacteristicTree]
    public init(service: DiscoveredService, included: [DiscoveredInclude], characteristics: [DiscoveredCharacteristicTree]) {
        self.service = service
        self.included = included
        self.characteristics = characteristics
    }
}

/// A peer's database, or the part a scope names: primary services (all, or each UUID asked for), then for each its
/// included services, all its characteristics (so each one's descriptors end where the next declaration begins,
/// Core Vol 3 Part G §3.3.3) and the descriptors of those the scope wants. One request at a time, in a loop rather
/// than by recursion, so a peer with thousands of characteristics cannot exhaust the stack.
public struct DatabaseDiscovery {
    private enum Phase {
        case services(DiscoverPrimaryServices)
        case included(FindIncludedServices)
        case characteristics(DiscoverCharacteristics)
        case descriptors(DiscoverDescriptors)
    }

    public let scope: DiscoveryScope
    /// Whether this discovery should find the peer's Service Changed (with its CCCD) even when the scope filters it out.
    public let looksForServiceChanged: Bool
    /// Primary services alone (Core Vol 3 Part G §4.4), as Core Bluetooth's `discoverServices` asks.
    public let servicesOnly: Bool
    private var phase: Phase
    private var serviceUUIDs: [BluetoothUUID?]
    private var services: [DiscoveredService] = []
    private var trees: [DiscoveredServiceTree] = []
    private var serviceIndex = 0
    private var found: [DiscoveredCharacteristic] = []
    private var characteristicIndex = 0

    public init(scope: DiscoveryScope, looksForServiceChanged: Bool, servicesOnly: Bool = false) {
        self.scope = scope
        self.looksForServiceChanged = looksForServiceChanged
        self.servicesOnly = servicesOnly
        serviceUUIDs = scope.services.map { $0.map(Optional.some) } ?? [nil]
        phase = .services(DiscoverPrimaryServices(uuid: serviceUUIDs.first ?? nil))
    }

    /// The peer's Service Changed value handle and its CCCD, as soon as its descriptors are known: the shell subscribes
    /// then, mid-discovery, so that an indication during the rest of a long discovery is already recognised.
    public private(set) var serviceChanged: (valueHandle: UInt16, cccd: UInt16?)?

    public mutating func start() -> GATTStep<[DiscoveredServiceTree]> {
        // No service asked for: nothing to discover.
        guard !serviceUUIDs.isEmpty else { return .done([]) }
        guard case .services(var procedure) = phase else { return .failed(.unlikelyError) }
        let step = procedure.start()
        phase = .services(procedure)
        return servicesStep(step)
    }

    public mutating func handle(_ response: ATTPDU) -> GATTStep<[DiscoveredServiceTree]> {
        switch phase {
        case .services(var procedure):
            let step = procedure.handle(response)
            phase = .services(procedure)
            return servicesStep(step)
        case .included(var procedure):
            let step = procedure.handle(response)
            phase = .included(procedure)
            return includedStep(step)
        case .characteristics(var procedure):
            let step = procedure.handle(response)
            phase = .characteristics(procedure)
            return characteristicsStep(step)
        case .descriptors(var procedure):
            let step = procedure.handle(response)
            phase = .descriptors(procedure)
            return descriptorsStep(step)
        }
    }

    private mutating func servicesStep(_ step: GATTStep<[DiscoveredService]>) -> GATTStep<[DiscoveredServiceTree]> {
        switch step {
        case .request(let pdu): return .request(pdu)
        case .failed(let error): return .failed(error)
        case .done(let more):
            services += more
            serviceUUIDs.removeFirst()
            if let next = serviceUUIDs.first {
                var procedure = DiscoverPrimaryServices(uuid: next)
                let first = procedure.start()
                phase = .services(procedure)
                return servicesStep(first)
            }
            services = services.sorted { $0.start < $1.start }.filter { $0.start <= scope.range.upperBound && $0.end >= scope.range.lowerBound }
            if servicesOnly { return .done(services.map { DiscoveredServiceTree(service: $0, included: [], characteristics: []) }) }
            return nextService()
        }
    }

    private mutating func nextService() -> GATTStep<[DiscoveredServiceTree]> {
        guard serviceIndex < services.count else { return .done(trees) }
        let service = services[serviceIndex]
        var procedure = FindIncludedServices(in: service.start...service.end)
        let step = procedure.start()
        phase = .included(procedure)
        return includedStep(step)
    }

    private mutating func includedStep(_ step: GATTStep<[DiscoveredInclude]>) -> GATTStep<[DiscoveredServiceTree]> {
        switch step {
        case .request(let pdu): return .request(pdu)
        case .failed(let error): return .failed(error)
        case .done(let included):
            let service = services[serviceIndex]
            trees.append(DiscoveredServiceTree(service: service, included: included, characteristics: []))
            var procedure = DiscoverCharacteristics(in: service.start...service.end)
            let next = procedure.start()
            phase = .characteristics(procedure)
            return characteristicsStep(next)
        }
    }

    private mutating func characteristicsStep(_ step: GATTStep<[DiscoveredCharacteristic]>) -> GATTStep<[DiscoveredServiceTree]> {
        switch step {
        case .request(let pdu): return .request(pdu)
        case .failed(let error): return .failed(error)
        case .done(let characteristics):
            found = characteristics
            characteristicIndex = 0
            return nextCharacteristic()
        }
    }

    /// Characteristics that need no request are taken in this loop; the next request ends it.
    private mutating func nextCharacteristic() -> GATTStep<[DiscoveredServiceTree]> {
        let service = services[serviceIndex]
        let wanted = wantedCharacteristics(in: service)
        while characteristicIndex < found.count {
            let characteristic = found[characteristicIndex]
            if let wanted, !wanted.contains(characteristic.uuid) {
                characteristicIndex += 1
                continue
            }
            let end = characteristicIndex + 1 < found.count ? found[characteristicIndex + 1].declaration - 1 : service.end
            trees[trees.count - 1].characteristics.append(DiscoveredCharacteristicTree(characteristic: characteristic, descriptors: []))
            guard characteristic.valueHandle < end else {
                described(characteristic, [])
                characteristicIndex += 1
                continue
            }
            var procedure = DiscoverDescriptors(in: (characteristic.valueHandle + 1)...end)
            let step = procedure.start()
            phase = .descriptors(procedure)
            return descriptorsStep(step)
        }
        serviceIndex += 1
        return nextService()
    }

    private func wantedCharacteristics(in service: DiscoveredService) -> [BluetoothUUID]? {
        guard let wanted = scope.characteristics else { return nil }
        return looksForServiceChanged && service.uuid == GATTType.gattService ? wanted + [GATTType.serviceChanged] : wanted
    }

    private mutating func descriptorsStep(_ step: GATTStep<[DiscoveredDescriptor]>) -> GATTStep<[DiscoveredServiceTree]> {
        switch step {
        case .request(let pdu): return .request(pdu)
        // A characteristic whose descriptors cannot be read is kept without them; the discovery goes on.
        case .failed:
            described(found[characteristicIndex], [])
        case .done(let descriptors):
            let last = trees.count - 1
            trees[last].characteristics[trees[last].characteristics.count - 1].descriptors = descriptors
            described(found[characteristicIndex], descriptors)
        }
        characteristicIndex += 1
        return nextCharacteristic()
    }

    private mutating func described(_ characteristic: DiscoveredCharacteristic, _ descriptors: [DiscoveredDescriptor]) {
        guard serviceChanged == nil, services[serviceIndex].uuid == GATTType.gattService, characteristic.uuid == GATTType.serviceChanged else { return }
        serviceChanged = (characteristic.valueHandle, descriptors.first { $0.uuid == GATTType.clientConfiguration }?.handle)
    }
}

/// A GATT client's part in keeping its view of the peer's database right (Core Vol 3 Part G §7.1), per link:
/// where the peer's Service Changed is, whether it was looked for, and re-discovery one at a time however often the
/// peer indicates — what it indicates meanwhile waits, merged, so a peer cannot queue requests without bound.
public struct GATTClientRole: Sendable {
    public private(set) var serviceChangedValueHandle: UInt16?
    public private(set) var lookedForServiceChanged = false
    public private(set) var rediscovering = false
    private var changedMeanwhile: ClosedRange<UInt16>?

    public init() {}

    /// What a discovery ought to add for this role: Service Changed, until it is known.
    public var discoveryLooksForServiceChanged: Bool { serviceChangedValueHandle == nil }

    /// Learns the peer's Service Changed from a discovery; returns the CCCD to write 0x0002 to when it is new.
    public mutating func learn(from discovery: DatabaseDiscovery) -> UInt16? {
        guard serviceChangedValueHandle == nil, let changed = discovery.serviceChanged else { return nil }
        serviceChangedValueHandle = changed.valueHandle
        return changed.cccd
    }

    /// A bonded peer's Service Changed, where a discovery on an earlier link found it: a bonded client keeps the peer's
    /// handles across links (Core Vol 3 Part G §2.5.2), so its indications are recognised from the link's start — the
    /// peer sends a change made while away as soon as the link is up (§7.1), before anything is discovered on it.
    public mutating func remember(serviceChangedValueHandle handle: UInt16) {
        guard serviceChangedValueHandle == nil else { return }
        serviceChangedValueHandle = handle
        lookedForServiceChanged = true
    }

    /// After a discovery of services alone: whether to look for Service Changed out of the app's sight, as iOS does.
    public mutating func shouldLookForServiceChanged() -> Bool {
        guard serviceChangedValueHandle == nil, !lookedForServiceChanged else { return false }
        lookedForServiceChanged = true
        return true
    }

    /// The scope that finds Service Changed and its CCCD.
    public static let serviceChangedScope = DiscoveryScope(services: [GATTType.gattService], characteristics: [GATTType.serviceChanged])

    public enum IndicationAction: Equatable, Sendable {
        /// Not Service Changed: the app's.
        case deliver
        case rediscover(ClosedRange<UInt16>)
        /// A re-discovery is running; the range waits, merged, for it to end.
        case merged
    }

    public mutating func indicated(handle: UInt16, value: [UInt8]) -> IndicationAction {
        guard handle == serviceChangedValueHandle, let range = ServiceChangedValue.decode(value) else { return .deliver }
        guard !rediscovering else {
            changedMeanwhile = changedMeanwhile.map { min($0.lowerBound, range.lowerBound)...max($0.upperBound, range.upperBound) } ?? range
            return .merged
        }
        rediscovering = true
        return .rediscover(range)
    }

    /// A re-discovery ended: the merged range indicated meanwhile, if any, is the next one.
    public mutating func rediscoveryFinished() -> ClosedRange<UInt16>? {
        guard let next = changedMeanwhile else {
            rediscovering = false
            return nil
        }
        changedMeanwhile = nil
        return next
    }
}
