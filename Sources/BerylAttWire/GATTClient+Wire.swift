import BerylCore
import BerylGATT
import BerylWire
import FoundationEssentials
import Glibc

/// A request field the GATT client cannot take as it came: which field, and why.
public struct FieldRefusal: Error, Equatable, Sendable {
    public var field: String
    public var message: String
    public init(field: String, _ message: String) {
        self.field = field
        self.message = message
    }
}

extension GATTClient.Operation {
    /// The operation an app's client request asks for on its link, or nil for a request that is no such operation
    /// (a write without response, which the link's transmit queue paces instead, or none of the GATT requests).
    public init?(wire request: Beryl_Ipc_V1_AttRequest.OneOf_Kind) throws(FieldRefusal) {
        switch request {
        case .gattDiscover(let discover):
            var scope = DiscoveryScope(range: try Self.range(discover.startHandle, discover.endHandle))
            scope.services = try Self.uuids(discover.serviceUuids, field: "service_uuids")
            scope.characteristics = try Self.uuids(discover.characteristicUuids, field: "characteristic_uuids")
            let depth: GATTClient.Depth = switch discover.depth {
            case .whole, .UNRECOGNIZED: .whole
            case .services: .services
            case .included: .included
            case .characteristics: .characteristics
            case .descriptors: .descriptors
            }
            self = .discover(scope, depth)
        case .gattRead(let read):
            self = .read(handle: UInt16(truncatingIfNeeded: read.handle))
        case .gattWrite(let write) where !write.withoutResponse:
            self = .write(handle: UInt16(truncatingIfNeeded: write.handle), value: Array(write.value))
        case .gattSubscribe(let subscribe):
            // The CCCD named, else the attribute after a value of 1...0xFFFE (where a CCCD that was not discovered sits).
            let (cccd, field) = subscribe.cccdHandle != 0
                ? (UInt16(exactly: subscribe.cccdHandle), "cccd_handle")
                : ((1..<0xFFFF).contains(subscribe.valueHandle) ? UInt16(subscribe.valueHandle + 1) : nil, "value_handle")
            guard let cccd else { throw FieldRefusal(field: field, "\(field) names no attribute whose CCCD could be written") }
            self = .configure(cccd: cccd, notify: subscribe.enable && !subscribe.indicate, indicate: subscribe.enable && subscribe.indicate)
        case .gattReadMultiple(let read):
            guard read.handles.count >= 2 else { throw FieldRefusal(field: "handles", "Read Multiple takes two or more handles") }
            self = .readMultiple(read.handles.map { UInt16(truncatingIfNeeded: $0) })
        case .gattReadByType(let read):
            guard let uuid = BluetoothUUID(read.uuid) else { throw FieldRefusal(field: "uuid", "'\(read.uuid)' is not a UUID") }
            self = .readByType(uuid, in: try Self.range(read.startHandle, read.endHandle))
        case .gattReliableWrite(let write):
            guard !write.writes.isEmpty, write.writes.allSatisfy({ $0.offset == 0 && $0.value.count <= ATTServer.maxValueLength && $0.handle > 0 && $0.handle <= 0xFFFF }) else {
                throw FieldRefusal(field: "writes", "a reliable write takes one or more values (offset 0, at most 512 bytes) for valid handles")
            }
            self = .reliableWrite(write.writes.map { HandleValue(handle: UInt16($0.handle), value: Array($0.value)) })
        default:
            return nil
        }
    }

    /// 0 and 0 mean the whole database; a start of 0 is handle 1.
    private static func range(_ start: UInt32, _ end: UInt32) throws(FieldRefusal) -> ClosedRange<UInt16> {
        let first = UInt16(clamping: max(1, start)), last = UInt16(clamping: end == 0 ? 0xFFFF : end)
        guard first <= last else { throw FieldRefusal(field: "start_handle", "start_handle is past end_handle") }
        return first...last
    }

    /// No UUIDs is no filter.
    private static func uuids(_ strings: [String], field: String) throws(FieldRefusal) -> [BluetoothUUID]? {
        guard let parsed = BluetoothUUID.list(strings) else { throw FieldRefusal(field: field, "not a UUID in \(strings)") }
        return parsed.isEmpty ? nil : parsed
    }
}

extension Beryl_Ipc_V1_AttRequest.OneOf_Kind {
    /// The link a GATT client request is for; nil for requests that are not the client's.
    public var clientConnectionHandle: UInt32? {
        switch self {
        case .gattDiscover(let request): request.connectionHandle
        case .gattRead(let request): request.connectionHandle
        case .gattWrite(let request): request.connectionHandle
        case .gattSubscribe(let request): request.connectionHandle
        case .gattReadMultiple(let request): request.connectionHandle
        case .gattReadByType(let request): request.connectionHandle
        case .gattReliableWrite(let request): request.connectionHandle
        default: nil
        }
    }
}

extension Beryl_Ipc_V1_Response {
    /// What the app hears of an operation that ended well.
    public init(_ outcome: GATTClient.Outcome) {
        self = .with {
            switch outcome {
            case .services(let trees): $0.att.gattDatabase = Beryl_Ipc_V1_GattDatabase(trees)
            case .included(let found, let range): $0.att.gattDatabase = Beryl_Ipc_V1_GattDatabase(included: found, in: range)
            case .characteristics(let found, let range): $0.att.gattDatabase = Beryl_Ipc_V1_GattDatabase(characteristics: found, in: range)
            case .descriptors(let found): $0.att.gattDatabase = Beryl_Ipc_V1_GattDatabase(descriptors: found)
            case .value(let value): $0.att.gattValue.value = Data(value)
            case .values(let values): $0.att.gattValues.values = values.map { found in .with { $0.handle = UInt32(found.handle); $0.value = Data(found.value) } }
            case .written: $0.ack = .init()
            }
        }
    }
}

/// The typed error an app hears of an operation that failed.
extension WireFailure {
    public init(_ failure: GATTClient.Failure) {
        switch failure {
        case .att(let error):
            self.init(.invalidArgument, "ATT error 0x\(String(error.rawValue, radix: 16)) (\(error))", field: "att_error", detail: RemoteDetail(attError: error.rawValue))
        case .bearerTimedOut:
            self.init(.timeout, "the ATT transaction timed out (Core Vol 3 Part F §3.3.3)", detail: RemoteDetail(bluetoothError: .connectionTimeout))
        case .linkClosed:
            self.init(.notFound, "the link went down", field: "connection_handle", detail: RemoteDetail(bluetoothError: .peripheralDisconnected))
        case .reliableWriteCancelled:
            self.init(.invalidArgument, "the server echoed a part differently; the reliable write was cancelled", field: "att_error",
                      detail: RemoteDetail(bluetoothError: .unknown))
        }
    }
}

extension ServiceDefinition {
    /// A publisher's service as the database takes it; each refusal names the field, as the publisher wrote it.
    public init(wire spec: Beryl_Ipc_V1_ServiceSpec) throws(FieldRefusal) {
        guard let uuid = BluetoothUUID(spec.uuid) else { throw FieldRefusal(field: "service.uuid", "'\(spec.uuid)' is not a UUID") }
        var characteristics: [CharacteristicDefinition] = []
        for (index, characteristic) in spec.characteristics.enumerated() {
            let field = "service.characteristics[\(index)]"
            guard let characteristicUUID = BluetoothUUID(characteristic.uuid) else { throw FieldRefusal(field: field + ".uuid", "'\(characteristic.uuid)' is not a UUID") }
            guard !GATTType.declarations.contains(characteristicUUID) else {
                throw FieldRefusal(field: field + ".uuid", "\(characteristicUUID) is a GATT declaration type, not a characteristic's")
            }
            // Core Bluetooth's ten property bits and six permission bits; nothing else means anything.
            guard characteristic.properties <= 0x3FF, characteristic.permissions <= 0x3F else { throw FieldRefusal(field: field, "unknown property or permission bits") }
            guard characteristic.value.count <= ATTServer.maxValueLength else { throw FieldRefusal(field: field + ".value", "values are at most 512 bytes") }
            var descriptors: [DescriptorDefinition] = []
            for (position, descriptor) in characteristic.descriptors.enumerated() {
                let descriptorField = field + ".descriptors[\(position)]"
                guard let descriptorUUID = BluetoothUUID(descriptor.uuid), descriptorUUID != GATTType.clientConfiguration,
                      !GATTType.declarations.contains(descriptorUUID) else {
                    throw FieldRefusal(field: descriptorField + ".uuid", "'\(descriptor.uuid)' is not a UUID, or is the CCCD attd adds itself, or a declaration type")
                }
                guard descriptor.value.count <= ATTServer.maxValueLength else { throw FieldRefusal(field: descriptorField + ".value", "values are at most 512 bytes") }
                descriptors.append(DescriptorDefinition(uuid: descriptorUUID, value: Array(descriptor.value)))
            }
            characteristics.append(CharacteristicDefinition(
                uuid: characteristicUUID, properties: CharacteristicProperties(rawValue: UInt16(truncatingIfNeeded: characteristic.properties)),
                permissions: AttributePermissions(rawValue: UInt8(characteristic.permissions)),
                value: characteristic.cached ? Array(characteristic.value) : nil, descriptors: descriptors))
        }
        guard spec.includedStartHandles.allSatisfy({ $0 > 0 && $0 < 0xFFFF }) else {
            throw FieldRefusal(field: "service.included_start_handles", "an included service's start handle is out of range")
        }
        self.init(uuid: uuid, isPrimary: spec.primary, includes: spec.includedStartHandles.map { UInt16($0) }, characteristics: characteristics)
    }
}

// attd's events, as its clients read them.
extension Beryl_Ipc_V1_Event {
    /// A remote central reads a dynamic value; the publisher answers with `answerID`.
    public init(readRequested answerID: UInt64, link: UInt16, handle: UInt16, offset: UInt16) {
        self.init()
        att.readRequested = .with {
            $0.id = answerID
            $0.connectionHandle = UInt32(link)
            $0.handle = UInt32(handle)
            $0.offset = UInt32(offset)
        }
    }

    /// A remote central writes dynamic values, all or nothing; a command (no response) owes no answer (id 0).
    public init(writeRequested answerID: UInt64, link: UInt16, writes: [PreparedWrite], withResponse: Bool) {
        self.init()
        att.writeRequested = .with {
            $0.id = answerID
            $0.connectionHandle = UInt32(link)
            $0.withResponse = withResponse
            $0.writes = writes.map { write in .with { $0.handle = UInt32(write.handle); $0.offset = UInt32(write.offset); $0.value = Data(write.value) } }
        }
    }

    public init(subscriptionChanged valueHandle: UInt16, link: UInt16, notify: Bool, indicate: Bool) {
        self.init()
        att.subscriptionChanged = .with {
            $0.connectionHandle = UInt32(link)
            $0.valueHandle = UInt32(valueHandle)
            $0.notify = notify
            $0.indicate = indicate
        }
    }

    public init(notification handle: UInt16, value: [UInt8], indication: Bool, link: UInt16) {
        self.init()
        att.gattNotification = .with {
            $0.connectionHandle = UInt32(link)
            $0.handle = UInt32(handle)
            $0.value = Data(value)
            $0.indication = indication
        }
    }

    /// The peer's database changed in `range`; what it holds now, unless re-discovering it failed.
    public init(serviceChanged range: ClosedRange<UInt16>, link: UInt16, _ result: Result<[DiscoveredServiceTree], GATTClient.Failure>) {
        self.init()
        att.gattServiceChanged = .with {
            $0.connectionHandle = UInt32(link)
            $0.startHandle = UInt32(range.lowerBound)
            $0.endHandle = UInt32(range.upperBound)
            if case .success(let trees) = result { $0.database = Beryl_Ipc_V1_GattDatabase(trees) }
        }
    }
}

extension Beryl_Ipc_V1_Event {
    /// The link's encryption changed (or failed to, `status` an HCI error code): what it is now.
    public init(securityChanged level: LinkSecurity, link: UInt16, status: UInt8) {
        self.init()
        att.securityChanged = .with {
            $0.connectionHandle = UInt32(link)
            $0.encrypted = level.encrypted
            $0.authenticated = level.authenticated
            $0.bonded = level.bonded
            $0.status = UInt32(status)
        }
    }

    public init(mtuChanged mtu: UInt16, link: UInt16, central: Bool) {
        self.init()
        att.mtuChanged = .with {
            $0.connectionHandle = UInt32(link)
            $0.attMtu = UInt32(mtu)
            $0.central = central
        }
    }

    /// A link's ATT bearer opened with it: what attd's clients learn of a new link.
    public init(bearerOpened link: UInt16, mtu: UInt16, central: Bool, peer: DeviceAddress) {
        self.init()
        att.bearerOpened = Beryl_Ipc_V1_Bearer(link: link, mtu: mtu, central: central, peer: peer)
    }

    /// A link's ATT bearer closed with it: why, and whether the stack lost it itself (`stackFailed`).
    public init(bearerClosed link: UInt16, central: Bool, reason: UInt8, stackFailed: Bool) {
        self.init()
        var bearer = Beryl_Ipc_V1_Bearer(link: link, mtu: 23, central: central)
        bearer.reason = UInt32(reason)
        bearer.stackFailed = stackFailed
        att.bearerClosed = bearer
    }

    /// attd took over hcid's links: every one there is.
    public init(linksTakenOver bearers: [Beryl_Ipc_V1_Bearer]) {
        self.init()
        att.linksTakenOver = .with {
            $0.bearers = bearers
            $0.complete = true
        }
    }
}

extension Beryl_Ipc_V1_Bearer {
    /// `peer`: the link's peer, when the bearer is listed (GetBearers) rather than announced.
    public init(link: UInt16, mtu: UInt16, central: Bool, peer: DeviceAddress? = nil) {
        self.init()
        connectionHandle = UInt32(link)
        attMtu = UInt32(mtu)
        self.central = central
        peerAddress = peer?.description ?? ""
    }
}

extension Beryl_Ipc_V1_ServicePublished {
    /// Where the database put a publisher's service: its handles and each characteristic's value handle.
    public init(_ range: ClosedRange<UInt16>, in database: AttributeDatabase) {
        self.init()
        startHandle = UInt32(range.lowerBound)
        endHandle = UInt32(range.upperBound)
        valueHandles = database.attributes(in: range).filter { $0.type == GATTType.characteristic }.map { UInt32($0.handle + 1) }
    }
}

extension ServiceRouter {
    /// A peer's read or write of published values, as the event its one live publisher hears (with the id its answer is
    /// owed under); nil when no one live publisher holds them all, and the peer is answered Unlikely Error.
    public mutating func route(_ request: ATTServerOutput, on link: UInt16, isLive: (UpdateSender) -> Bool,
                               at now: Duration) -> (owner: UpdateSender, event: Beryl_Ipc_V1_Event)? {
        switch request {
        case .readRequested(let id, let handle, let offset):
            return route(handles: [handle], link: link, serverID: id, isRead: true, offset: offset, expectsAnswer: true, isLive: isLive, at: now)
                .map { ($0.owner, Beryl_Ipc_V1_Event(readRequested: $0.answerID, link: link, handle: handle, offset: offset)) }
        case .writeRequested(let id, let writes, let withResponse):
            return route(handles: writes.map(\.handle), link: link, serverID: id, isRead: false, offset: 0, expectsAnswer: withResponse,
                         isLive: isLive, at: now)
                .map { ($0.owner, Beryl_Ipc_V1_Event(writeRequested: $0.answerID, link: link, writes: writes, withResponse: withResponse)) }
        default:
            return nil
        }
    }
}
