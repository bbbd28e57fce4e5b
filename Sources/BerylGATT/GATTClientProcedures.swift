import BerylATT
import BerylCore

public struct DiscoveredService: Equatable, Sendable {
    public var start: UInt16
    public var end: UInt16
    public var uuid: BluetoothUUID
    public init(start: UInt16, end: UInt16, uuid: BluetoothUUID) {
        self.start = start
        self.end = end
        self.uuid = uuid
    }
}

public struct DiscoveredCharacteristic: Equatable, Sendable {
    public var declaration: UInt16
    public var properties: CharacteristicProperties
    public var valueHandle: UInt16
    public var uuid: BluetoothUUID
    public init(declaration: UInt16, properties: CharacteristicProperties, valueHandle: UInt16, uuid: BluetoothUUID) {
        self.declaration = declaration
        self.properties = properties
        self.valueHandle = valueHandle
        self.uuid = uuid
    }
}

public struct DiscoveredDescriptor: Equatable, Sendable {
    public var handle: UInt16
    public var uuid: BluetoothUUID
    public init(handle: UInt16, uuid: BluetoothUUID) {
        self.handle = handle
        self.uuid = uuid
    }
}

/// One GATT client procedure as a state machine (Core Vol 3 Part G §4): it names the next request,
/// takes each response, and ends with a result or the ATT error that stopped it.
public enum GATTStep<Result: Equatable & Sendable>: Equatable, Sendable {
    case request(ATTPDU)
    case done(Result)
    case failed(ATTError)
}

/// What the discovery procedures share: paging past the last handle seen (never backwards, so a server
/// that does not advance cannot loop a procedure forever), and how a non-matching response ends them.
enum DiscoveryPaging {
    static func next(after last: UInt16, from current: UInt16, end: UInt16) -> UInt16? {
        guard last >= current, last < end else { return nil }
        return last + 1
    }

    /// A server answers only with attributes inside the requested range, in ascending handle order (Core Vol 3
    /// Part F §3.4.3, §3.4.4): a response that breaks this is malformed, and trusting it would build impossible
    /// ranges (a group ending before it starts, a characteristic's descriptors ending before its value).
    static func inOrder(_ handles: [UInt16], from start: UInt16, through end: UInt16) -> Bool {
        var previous: UInt16?
        for handle in handles {
            guard handle >= max(start, 1), handle <= end, previous.map({ handle > $0 }) ?? true else { return false }
            previous = handle
        }
        return true
    }

    /// Attribute Not Found ends a discovery with what was found; any other error or PDU fails it.
    static func end<R>(_ response: ATTPDU, found: R) -> GATTStep<R> {
        switch response {
        case .errorResponse(_, _, .attributeNotFound): .done(found)
        case .errorResponse(_, _, let error): .failed(error)
        default: .failed(.invalidPDU)
        }
    }
}

/// Discover All Primary Services (§4.4.1) or by UUID (§4.4.2).
public struct DiscoverPrimaryServices {
    public let uuid: BluetoothUUID?
    private var next: UInt16 = 1
    private var found: [DiscoveredService] = []

    public init(uuid: BluetoothUUID? = nil) { self.uuid = uuid }

    public mutating func start() -> GATTStep<[DiscoveredService]> { request() }

    private func request() -> GATTStep<[DiscoveredService]> {
        if let uuid { return .request(.findByTypeValueRequest(start: next, end: 0xFFFF, type: 0x2800, value: uuid.attWire)) }
        return .request(.readByGroupTypeRequest(start: next, end: 0xFFFF, type: GATTType.primaryService))
    }

    public mutating func handle(_ response: ATTPDU) -> GATTStep<[DiscoveredService]> {
        var last: UInt16 = 0
        switch response {
        case .readByGroupTypeResponse(let entries):
            // A service group spans its declaration to its end group handle (Core Vol 3 Part G §4.4.1).
            guard DiscoveryPaging.inOrder(entries.map(\.handle), from: next, through: 0xFFFF),
                  entries.allSatisfy({ $0.groupEnd >= $0.handle }) else { return .failed(.invalidPDU) }
            for entry in entries {
                guard let uuid = BluetoothUUID(wire: entry.value) else { return .failed(.invalidPDU) }
                found.append(DiscoveredService(start: entry.handle, end: entry.groupEnd, uuid: uuid))
                last = entry.groupEnd
            }
        case .findByTypeValueResponse(let entries):
            guard DiscoveryPaging.inOrder(entries.map(\.found), from: next, through: 0xFFFF),
                  entries.allSatisfy({ $0.groupEnd >= $0.found }) else { return .failed(.invalidPDU) }
            for entry in entries {
                found.append(DiscoveredService(start: entry.found, end: entry.groupEnd, uuid: uuid!))
                last = entry.groupEnd
            }
        default:
            return DiscoveryPaging.end(response, found: found)
        }
        guard let following = DiscoveryPaging.next(after: last, from: next, end: 0xFFFF) else { return .done(found) }
        next = following
        return request()
    }
}

/// Discover All Characteristics of a Service (§4.6.1), or by UUID (§4.6.2: the same requests, filtered).
public struct DiscoverCharacteristics {
    public let range: ClosedRange<UInt16>
    public let uuid: BluetoothUUID?
    private var next: UInt16
    private var found: [DiscoveredCharacteristic] = []

    public init(in range: ClosedRange<UInt16>, uuid: BluetoothUUID? = nil) {
        self.range = range
        self.uuid = uuid
        next = range.lowerBound
    }

    public mutating func start() -> GATTStep<[DiscoveredCharacteristic]> {
        .request(.readByTypeRequest(start: next, end: range.upperBound, type: GATTType.characteristic))
    }

    public mutating func handle(_ response: ATTPDU) -> GATTStep<[DiscoveredCharacteristic]> {
        switch response {
        case .readByTypeResponse(let entries):
            guard DiscoveryPaging.inOrder(entries.map(\.handle), from: next, through: range.upperBound) else { return .failed(.invalidPDU) }
            var last: UInt16 = 0
            for entry in entries {
                guard entry.value.count == 5 || entry.value.count == 19, let uuid = BluetoothUUID(wire: Array(entry.value[3...])) else {
                    return .failed(.invalidPDU)
                }
                let valueHandle = UInt16(entry.value[1]) | UInt16(entry.value[2]) << 8
                // The value follows its declaration, inside the service (Core Vol 3 Part G §3.3.1.2).
                guard valueHandle > entry.handle, valueHandle <= range.upperBound else { return .failed(.invalidPDU) }
                found.append(DiscoveredCharacteristic(declaration: entry.handle, properties: CharacteristicProperties(declared: entry.value[0]),
                                                      valueHandle: valueHandle, uuid: uuid))
                last = entry.handle
            }
            guard let following = DiscoveryPaging.next(after: last, from: next, end: range.upperBound) else { return .done(matching) }
            next = following
            return start()
        default:
            return DiscoveryPaging.end(response, found: matching)
        }
    }

    /// Every characteristic is kept while paging (the next one's declaration bounds a match's descriptors); the filter applies at the end.
    private var matching: [DiscoveredCharacteristic] { uuid.map { wanted in found.filter { $0.uuid == wanted } } ?? found }
}

/// Discover All Characteristic Descriptors (§4.7.1) between a value handle and the characteristic's end.
public struct DiscoverDescriptors {
    /// A characteristic's descriptors end where the next declaration begins (Core Vol 3 Part G §3.3.3): of a range
    /// that runs past the characteristic (an app's, up to its service's end), only what comes before it.
    public static func ofOneCharacteristic(_ found: [DiscoveredDescriptor]) -> [DiscoveredDescriptor] {
        Array(found.prefix { !GATTType.declarations.contains($0.uuid) })
    }

    public let range: ClosedRange<UInt16>
    private var next: UInt16
    private var found: [DiscoveredDescriptor] = []

    public init(in range: ClosedRange<UInt16>) {
        self.range = range
        next = range.lowerBound
    }

    public mutating func start() -> GATTStep<[DiscoveredDescriptor]> {
        guard next <= range.upperBound else { return .done(found) }
        return .request(.findInformationRequest(start: next, end: range.upperBound))
    }

    public mutating func handle(_ response: ATTPDU) -> GATTStep<[DiscoveredDescriptor]> {
        switch response {
        case .findInformationResponse(let entries):
            guard DiscoveryPaging.inOrder(entries.map(\.handle), from: next, through: range.upperBound) else { return .failed(.invalidPDU) }
            var last: UInt16 = 0
            for entry in entries {
                found.append(DiscoveredDescriptor(handle: entry.handle, uuid: entry.type))
                last = entry.handle
            }
            guard let following = DiscoveryPaging.next(after: last, from: next, end: range.upperBound) else { return .done(found) }
            next = following
            return start()
        default:
            return DiscoveryPaging.end(response, found: found)
        }
    }
}

/// Read Long Characteristic Value (§4.8.3): Read, then Read Blob while the parts come back full.
public struct ReadLongValue {
    public let handle: UInt16
    public let mtu: UInt16
    private var value: [UInt8] = []

    public init(handle: UInt16, mtu: UInt16) {
        self.handle = handle
        self.mtu = mtu
    }

    public mutating func start() -> GATTStep<[UInt8]> { .request(.readRequest(handle: handle)) }

    public mutating func handle(_ response: ATTPDU) -> GATTStep<[UInt8]> {
        switch response {
        case .readResponse(let part), .readBlobResponse(let part):
            value += part
            guard part.count == Int(mtu) - 1, value.count < 512 else { return .done(value) }
            return .request(.readBlobRequest(handle: handle, offset: UInt16(value.count)))
        case .errorResponse(_, _, let error) where (error == .attributeNotLong || error == .invalidOffset) && !value.isEmpty:
            return .done(value)
        case .errorResponse(_, _, let error):
            return .failed(error)
        default:
            return .failed(.invalidPDU)
        }
    }
}

/// Write Long Characteristic Value / Reliable Writes (§4.9.4, §4.9.5): prepared parts, each echo checked, then execute.
public struct WriteLongValue {
    public let writes: [(handle: UInt16, value: [UInt8])]
    public let mtu: UInt16
    private var parts: [PreparedWrite] = []
    private var index = 0

    public init(handle: UInt16, value: [UInt8], mtu: UInt16) {
        self.init(writes: [(handle, value)], mtu: mtu)
    }

    public init(writes: [(handle: UInt16, value: [UInt8])], mtu: UInt16) {
        self.writes = writes
        self.mtu = mtu
        let size = Int(mtu) - 5
        for write in writes {
            var offset = 0
            repeat {
                let end = min(offset + size, write.value.count)
                parts.append(PreparedWrite(handle: write.handle, offset: UInt16(offset), value: Array(write.value[offset..<end])))
                offset = end
            } while offset < write.value.count
        }
    }

    public mutating func start() -> GATTStep<Bool> { prepare() }

    private func prepare() -> GATTStep<Bool> {
        let part = parts[index]
        return .request(.prepareWriteRequest(handle: part.handle, offset: part.offset, value: part.value))
    }

    public mutating func handle(_ response: ATTPDU) -> GATTStep<Bool> {
        switch response {
        case .prepareWriteResponse(let handle, let offset, let value):
            let part = parts[index]
            // A corrupted echo means the server queued something else: cancel everything (reliable write, §4.9.5).
            guard handle == part.handle, offset == part.offset, value == part.value else { return .request(.executeWriteRequest(commit: false)) }
            index += 1
            return index < parts.count ? prepare() : .request(.executeWriteRequest(commit: true))
        case .executeWriteResponse:
            return .done(index == parts.count)
        case .errorResponse(_, _, let error):
            return .failed(error)
        default:
            return .failed(.invalidPDU)
        }
    }
}

public struct DiscoveredInclude: Equatable, Sendable {
    public var declaration: UInt16
    public var start: UInt16
    public var end: UInt16
    public var uuid: BluetoothUUID
    public init(declaration: UInt16, start: UInt16, end: UInt16, uuid: BluetoothUUID) {
        self.declaration = declaration
        self.start = start
        self.end = end
        self.uuid = uuid
    }
}

/// Find Included Services (§4.5.1): Read By Type for include declarations; a 128-bit included UUID is not in the
/// declaration, so it is read from the included service's own declaration.
public struct FindIncludedServices {
    public let range: ClosedRange<UInt16>
    private var next: UInt16
    private var found: [DiscoveredInclude] = []
    private var unresolved: [Int] = []

    public init(in range: ClosedRange<UInt16>) {
        self.range = range
        next = range.lowerBound
    }

    public mutating func start() -> GATTStep<[DiscoveredInclude]> {
        .request(.readByTypeRequest(start: next, end: range.upperBound, type: GATTType.include))
    }

    public mutating func handle(_ response: ATTPDU) -> GATTStep<[DiscoveredInclude]> {
        if let waiting = unresolved.first {
            guard case .readResponse(let value) = response, let uuid = BluetoothUUID(wire: value), value.count == 16 else {
                if case .errorResponse(_, _, let error) = response { return .failed(error) }
                return .failed(.invalidPDU)
            }
            found[waiting].uuid = uuid
            unresolved.removeFirst()
            return resolveOrContinue()
        }
        switch response {
        case .readByTypeResponse(let entries):
            guard DiscoveryPaging.inOrder(entries.map(\.handle), from: next, through: range.upperBound) else { return .failed(.invalidPDU) }
            for entry in entries {
                guard entry.value.count == 4 || entry.value.count == 6 else { return .failed(.invalidPDU) }
                let start = UInt16(entry.value[0]) | UInt16(entry.value[1]) << 8
                let end = UInt16(entry.value[2]) | UInt16(entry.value[3]) << 8
                guard start >= 1, end >= start else { return .failed(.invalidPDU) }
                let uuid = entry.value.count == 6 ? BluetoothUUID(UInt16(entry.value[4]) | UInt16(entry.value[5]) << 8) : BluetoothUUID(0)
                if entry.value.count == 4 { unresolved.append(found.count) }
                found.append(DiscoveredInclude(declaration: entry.handle, start: start, end: end, uuid: uuid))
            }
            let last = entries.last?.handle ?? 0
            guard let following = DiscoveryPaging.next(after: last, from: next, end: range.upperBound) else {
                next = range.upperBound
                return resolveOrContinue(finished: true)
            }
            next = following
            return resolveOrContinue()
        default:
            next = range.upperBound
            if case .errorResponse(_, _, .attributeNotFound) = response { return resolveOrContinue(finished: true) }
            return DiscoveryPaging.end(response, found: found)
        }
    }

    private var finished = false

    private mutating func resolveOrContinue(finished done: Bool = false) -> GATTStep<[DiscoveredInclude]> {
        if done { finished = true }
        if let waiting = unresolved.first { return .request(.readRequest(handle: found[waiting].start)) }
        return finished ? .done(found) : start()
    }
}

/// Read Using Characteristic UUID (§4.8.2): every value of that type in the range, paged past the last handle.
public struct ReadByCharacteristicUUID {
    public let range: ClosedRange<UInt16>
    public let uuid: BluetoothUUID
    private var next: UInt16
    private var found: [(handle: UInt16, value: [UInt8])] = []

    public init(uuid: BluetoothUUID, in range: ClosedRange<UInt16> = 1...0xFFFF) {
        self.uuid = uuid
        self.range = range
        next = range.lowerBound
    }

    public mutating func start() -> GATTStep<[HandleValue]> {
        .request(.readByTypeRequest(start: next, end: range.upperBound, type: uuid))
    }

    public mutating func handle(_ response: ATTPDU) -> GATTStep<[HandleValue]> {
        switch response {
        case .readByTypeResponse(let entries):
            guard DiscoveryPaging.inOrder(entries.map(\.handle), from: next, through: range.upperBound) else { return .failed(.invalidPDU) }
            found += entries
            guard let following = DiscoveryPaging.next(after: entries.last?.handle ?? 0, from: next, end: range.upperBound) else {
                return .done(found.map { HandleValue(handle: $0.handle, value: $0.value) })
            }
            next = following
            return start()
        default:
            return DiscoveryPaging.end(response, found: found.map { HandleValue(handle: $0.handle, value: $0.value) })
        }
    }
}

public struct HandleValue: Equatable, Sendable {
    public var handle: UInt16
    public var value: [UInt8]

    public init(handle: UInt16, value: [UInt8]) {
        self.handle = handle
        self.value = value
    }
}

/// Read Multiple Characteristic Values (§4.8.4): one request; the values come back concatenated.
public struct ReadMultipleValues {
    public let handles: [UInt16]

    public init(handles: [UInt16]) { self.handles = handles }

    public func start() -> GATTStep<[UInt8]> {
        handles.count >= 2 ? .request(.readMultipleRequest(handles)) : .failed(.invalidPDU)
    }

    public func handle(_ response: ATTPDU) -> GATTStep<[UInt8]> {
        switch response {
        case .readMultipleResponse(let values): .done(values)
        case .errorResponse(_, _, let error): .failed(error)
        default: .failed(.invalidPDU)
        }
    }
}
