import BerylATT
import BerylCore
import BerylCrypto

public enum ATTServerOutput: Equatable, Sendable {
    case send([UInt8])
    /// A dynamic value is wanted: answer with `completeRead(id:with:)`.
    case readRequested(id: UInt64, handle: UInt16, offset: UInt16)
    /// Writes to dynamic values, all or nothing: answer with `completeWrite(id:error:)` (ignored for commands).
    case writeRequested(id: UInt64, writes: [PreparedWrite], withResponse: Bool)
    /// A peer changed its Client Characteristic Configuration for the characteristic at `valueHandle`.
    case subscriptionChanged(valueHandle: UInt16, notify: Bool, indicate: Bool)
    /// A peer set Client Supported Features bits: a bonded peer's are kept with its bond (Core Vol 3 Part G §2.5.2).
    case clientFeaturesChanged([UInt8])
    case indicationConfirmed(handle: UInt16)
    /// The peer did not confirm an indication within 30 s: the bearer may carry nothing more (Core Vol 3 Part F
    /// §3.3.3), and the shell ends the link.
    case indicationTimedOut(handle: UInt16)
    /// A signed write was carried out: its SignCounter is the peer's last, to keep with the bond.
    case signCounterAccepted(UInt32)
    case log(String)
}

public struct PreparedWrite: Equatable, Sendable {
    public var handle: UInt16
    public var offset: UInt16
    public var value: [UInt8]

    public init(handle: UInt16, offset: UInt16, value: [UInt8]) {
        self.handle = handle
        self.offset = offset
        self.value = value
    }
}

/// The server side of one ATT bearer (Core Vol 3 Part F, GATT server procedures of Part G §4), sans-IO.
public final class ATTServer {
    public static let maxValueLength = 512
    public static let prepareQueueLimit = 128
    public let database: AttributeDatabase
    public let serverMTU: UInt16
    public private(set) var mtu: UInt16 = 23
    public var security = LinkSecurity()
    /// Set by the shell when the peer is bonded and distributed a CSRK.
    public var peerSigning: PeerSigning?
    /// This peer's CCCD values, by CCCD handle; persisted for bonded peers by the shell.
    public private(set) var clientConfigurations: [UInt16: UInt16] = [:]
    /// This peer's Client Supported Features bits (robust caching, EATT, multiple notifications); persisted with its CCCDs.
    public private(set) var clientFeatures: [UInt8] = [0]
    private var prepareQueue: [PreparedWrite] = []
    private var pending: (id: UInt64, opcode: ATTOpcode, handle: UInt16)?
    private var nextID: UInt64 = 1
    private var indicationInFlight: UInt16?
    /// When the outstanding indication was first seen by a tick: the shell ticks about once a second, so the
    /// transaction times out between 30 and 31 s after it was sent.
    private var indicationSeenAt: Duration?
    private var indicationQueue: [(UInt16, [UInt8])] = []
    /// False once a transaction timed out: nothing more is sent on this bearer (Core Vol 3 Part F §3.3.3).
    public private(set) var isUsable = true

    public init(database: AttributeDatabase, serverMTU: UInt16 = 517, clientConfigurations: [UInt16: UInt16] = [:]) {
        self.database = database
        self.serverMTU = max(23, min(serverMTU, 517))
        self.clientConfigurations = clientConfigurations
    }

    /// A bonded peer's configuration from the last connection (Core Vol 3 Part G §3.3.3.3: CCCDs persist across
    /// connections for bonded devices); handles no longer in the database are dropped.
    /// Returns the value handles whose configuration this turned on or changed, as `adoptStored` does.
    @discardableResult
    public func restore(clientConfigurations restored: [UInt16: UInt16], clientFeatures features: [UInt8]) -> [(valueHandle: UInt16, value: UInt16)] {
        let before = clientConfigurations
        clientConfigurations = restored.filter { database.attribute(at: $0.key)?.value == .clientConfiguration }
        if !features.isEmpty { clientFeatures = features }
        return clientConfigurations.sorted { $0.key < $1.key }.compactMap { handle, value in
            guard value & 0b11 != 0, before[handle] != value, let valueHandle = valueHandle(ofConfiguration: handle) else { return nil }
            return (valueHandle, value)
        }
    }

    /// The value of the characteristic a Client Characteristic Configuration descriptor belongs to: the attribute
    /// after the last characteristic declaration before it (Core Vol 3 Part G §3.3).
    private func valueHandle(ofConfiguration handle: UInt16) -> UInt16? {
        guard handle > 1 else { return nil }
        return database.attributes(in: 1...handle).last { $0.handle < handle && $0.type == GATTType.characteristic }.map { $0.handle + 1 }
    }

    /// A bonded client's stored configurations for CCCDs in `range`, a service published after the link came up (an
    /// app adding its service again after the stack restarted): the client's subscription holds across it, as its
    /// configuration would across a reconnection (Core Vol 3 Part G §3.3.3.3). Returns the value handles now on.
    public func adoptStored(clientConfigurations stored: [UInt16: UInt16], in range: ClosedRange<UInt16>) -> [(valueHandle: UInt16, value: UInt16)] {
        var adopted: [(UInt16, UInt16)] = []
        for (handle, value) in stored.sorted(by: { $0.key < $1.key }) where range.contains(handle) && clientConfigurations[handle] == nil {
            guard database.attribute(at: handle)?.value == .clientConfiguration, value & 0b11 != 0, let valueHandle = valueHandle(ofConfiguration: handle)
            else { continue }
            clientConfigurations[handle] = value
            adopted.append((valueHandle, value))
        }
        return adopted
    }

    /// This peer's subscriptions to the values in `range`: value handle and CCCD value, in handle order.
    public func subscriptions(in range: ClosedRange<UInt16>) -> [(valueHandle: UInt16, value: UInt16)] {
        clientConfigurations.sorted { $0.key < $1.key }.compactMap { handle, value in
            guard range.contains(handle), value & 0b11 != 0, let valueHandle = valueHandle(ofConfiguration: handle) else { return nil }
            return (valueHandle, value)
        }
    }

    /// The bearer's ATT_MTU after an exchange our client made (Core Vol 3 Part F §3.4.2: one value for both roles).
    public func adopt(mtu newMTU: UInt16) { mtu = max(mtu, min(newMTU, serverMTU)) }

    // MARK: Inbound

    public func receive(_ bytes: [UInt8]) -> [ATTServerOutput] {
        guard isUsable else { return [.log("ATT PDU after a transaction timeout dropped")] }
        let pdu: ATTPDU
        switch ATTPDU.decode(bytes) {
        case .success(let decoded):
            pdu = decoded
        case .failure(.empty):
            return [.log("empty ATT PDU dropped")]
        case .failure(.unknownOpcode(let code)):
            // Unknown commands (bit 6 set) are ignored; unknown requests are refused (Core Vol 3 Part F §3.4.1.1).
            if code & 0x40 != 0 { return [.log("unknown ATT command 0x\(String(code, radix: 16)) ignored")] }
            return [error(code, 0, .requestNotSupported)]
        case .failure(.malformed(let opcode)):
            return opcode.isRequest ? [error(opcode.rawValue, 0, .invalidPDU)] : [.log("malformed \(opcode) dropped")]
        }
        // No PDU may exceed ATT_MTU (Core Vol 3 Part F §3.2.8); answering an oversized one could not stay within it either
        // (a Prepare Write Response echoes its request).
        guard bytes.count <= Int(mtu) else {
            return pdu.opcode.isRequest ? [error(pdu.opcode.rawValue, 0, .invalidPDU)] : [.log("\(pdu.opcode) of \(bytes.count) bytes over ATT_MTU \(mtu) dropped")]
        }
        if pdu.opcode.isRequest, pending != nil {
            return [.log("\(pdu.opcode) while a request is still being answered: the client broke ATT's one-at-a-time rule; dropped")]
        }
        return handle(pdu)
    }

    private func handle(_ pdu: ATTPDU) -> [ATTServerOutput] {
        switch pdu {
        case .exchangeMTURequest(let clientMTU):
            mtu = max(23, min(clientMTU, serverMTU))
            return [.send(ATTPDU.exchangeMTUResponse(mtu: serverMTU).encoded)]
        case .readByGroupTypeRequest(let start, let end, let type):
            return [readByGroupType(start, end, type)]
        case .findByTypeValueRequest(let start, let end, let type, let value):
            return [findByTypeValue(start, end, BluetoothUUID(type), value)]
        case .readByTypeRequest(let start, let end, let type):
            return readByType(start, end, type)
        case .findInformationRequest(let start, let end):
            return [findInformation(start, end)]
        case .readRequest(let handle):
            return read(handle, offset: 0, opcode: .readRequest)
        case .readBlobRequest(let handle, let offset):
            return read(handle, offset: offset, opcode: .readBlobRequest)
        case .readMultipleRequest(let handles):
            return readMultiple(handles)
        case .writeRequest(let handle, let value):
            return write(handle, value, opcode: .writeRequest)
        case .writeCommand(let handle, let value):
            // Commands get no response, so their errors go unreported (Core Vol 3 Part F §3.4.5.3).
            return write(handle, value, opcode: .writeCommand).filter { if case .send = $0 { return false } else { return true } }
        case .signedWriteCommand(let handle, let value, let signature):
            return signedWrite(handle, value, signature)
        case .prepareWriteRequest(let handle, let offset, let value):
            return [prepareWrite(handle, offset, value)]
        case .executeWriteRequest(let commit):
            return executeWrite(commit: commit)
        case .handleValueConfirmation:
            guard let handle = indicationInFlight else { return [.log("confirmation with no indication outstanding")] }
            indicationInFlight = nil
            indicationSeenAt = nil
            var outputs: [ATTServerOutput] = [.indicationConfirmed(handle: handle)]
            if !indicationQueue.isEmpty {
                let (next, value) = indicationQueue.removeFirst()
                outputs += sendIndication(next, value)
            }
            return outputs
        default:
            // Responses and server-to-client PDUs arriving at a server.
            return [.log("\(pdu.opcode) is not for a server; dropped")]
        }
    }

    // MARK: Discovery (Core Vol 3 Part G §4.4–4.7)

    private func validRange(_ start: UInt16, _ end: UInt16) -> Bool { start != 0 && start <= end }

    private func readByGroupType(_ start: UInt16, _ end: UInt16, _ type: BluetoothUUID) -> ATTServerOutput {
        let opcode = ATTOpcode.readByGroupTypeRequest.rawValue
        guard validRange(start, end) else { return error(opcode, start, .invalidHandle) }
        guard type == GATTType.primaryService || type == GATTType.secondaryService else { return error(opcode, start, .unsupportedGroupType) }
        var entries: [(UInt16, UInt16, [UInt8])] = []
        var size = 2
        for attribute in database.attributes(in: start...end) where attribute.type == type {
            // A service declaration's value is its UUID (Core Vol 3 Part G §3.1); nothing else is a group.
            guard case .fixed(let value) = attribute.value, value.count == 2 || value.count == 16, attribute.groupEnd >= attribute.handle else { continue }
            if let first = entries.first, first.2.count != value.count { break }
            guard size + 4 + value.count <= Int(mtu) else { break }
            entries.append((attribute.handle, attribute.groupEnd, value))
            size += 4 + value.count
        }
        guard !entries.isEmpty else { return error(opcode, start, .attributeNotFound) }
        return .send(ATTPDU.readByGroupTypeResponse(entries).encoded)
    }

    private func findByTypeValue(_ start: UInt16, _ end: UInt16, _ type: BluetoothUUID, _ value: [UInt8]) -> ATTServerOutput {
        let opcode = ATTOpcode.findByTypeValueRequest.rawValue
        guard validRange(start, end) else { return error(opcode, start, .invalidHandle) }
        var entries: [(UInt16, UInt16)] = []
        for attribute in database.attributes(in: start...end) where attribute.type == type {
            guard case .fixed(let stored) = attribute.value, stored == value else { continue }
            guard 1 + 4 * (entries.count + 1) <= Int(mtu) else { break }
            entries.append((attribute.handle, attribute.groupEnd > 0 ? attribute.groupEnd : attribute.handle))
        }
        guard !entries.isEmpty else { return error(opcode, start, .attributeNotFound) }
        return .send(ATTPDU.findByTypeValueResponse(entries).encoded)
    }

    private func readByType(_ start: UInt16, _ end: UInt16, _ type: BluetoothUUID) -> [ATTServerOutput] {
        let opcode = ATTOpcode.readByTypeRequest.rawValue
        guard validRange(start, end) else { return [error(opcode, start, .invalidHandle)] }
        var entries: [(UInt16, [UInt8])] = []
        let limit = min(Int(mtu) - 4, 253)
        for attribute in database.attributes(in: start...end) where attribute.type == type {
            if let failure = readPermissionError(attribute) {
                // An error on the first match is the answer; later ones just end the list (Core Vol 3 Part F §3.4.4.1).
                return entries.isEmpty ? [error(opcode, attribute.handle, failure)] : [.send(ATTPDU.readByTypeResponse(entries).encoded)]
            }
            let value: [UInt8]
            switch attribute.value {
            case .fixed(let fixed): value = fixed
            case .clientConfiguration: value = configurationBytes(attribute.handle)
            case .clientSupportedFeatures: value = clientFeatures
            case .dynamic:
                // A dynamic value comes from its owner, alone in the response.
                guard entries.isEmpty else { return [.send(ATTPDU.readByTypeResponse(entries).encoded)] }
                return [beginRead(.readByTypeRequest, attribute.handle, offset: 0)]
            }
            let clipped = Array(value.prefix(limit))
            if let first = entries.first, first.1.count != clipped.count { break }
            guard 2 + (entries.count + 1) * (2 + clipped.count) <= Int(mtu) else { break }
            entries.append((attribute.handle, clipped))
        }
        guard !entries.isEmpty else { return [error(opcode, start, .attributeNotFound)] }
        return [.send(ATTPDU.readByTypeResponse(entries).encoded)]
    }

    private func findInformation(_ start: UInt16, _ end: UInt16) -> ATTServerOutput {
        let opcode = ATTOpcode.findInformationRequest.rawValue
        guard validRange(start, end) else { return error(opcode, start, .invalidHandle) }
        var entries: [(UInt16, BluetoothUUID)] = []
        for attribute in database.attributes(in: start...end) {
            let short = attribute.type.uuid16 != nil
            if let first = entries.first, (first.1.uuid16 != nil) != short { break }
            guard 2 + (entries.count + 1) * (short ? 4 : 18) <= Int(mtu) else { break }
            entries.append((attribute.handle, attribute.type))
        }
        guard !entries.isEmpty else { return error(opcode, start, .attributeNotFound) }
        return .send(ATTPDU.findInformationResponse(entries).encoded)
    }

    // MARK: Reads

    private func readPermissionError(_ attribute: Attribute) -> ATTError? {
        guard attribute.permissions.contains(.readable) || attribute.permissions.contains(.readEncryptionRequired)
                || attribute.permissions.contains(.readAuthenticationRequired) else { return .readNotPermitted }
        return securityError(encryption: attribute.permissions.contains(.readEncryptionRequired),
                             authentication: attribute.permissions.contains(.readAuthenticationRequired))
    }

    private func securityError(encryption: Bool, authentication: Bool) -> ATTError? {
        if (encryption || authentication), !security.encrypted {
            return security.bonded ? .insufficientEncryption : .insufficientAuthentication
        }
        if authentication, !security.authenticated { return .insufficientAuthentication }
        return nil
    }

    private func read(_ handle: UInt16, offset: UInt16, opcode: ATTOpcode) -> [ATTServerOutput] {
        guard let attribute = database.attribute(at: handle) else { return [error(opcode.rawValue, handle, .invalidHandle)] }
        if let failure = readPermissionError(attribute) { return [error(opcode.rawValue, handle, failure)] }
        let value: [UInt8]
        switch attribute.value {
        case .fixed(let fixed): value = fixed
        case .clientConfiguration: value = configurationBytes(handle)
        case .clientSupportedFeatures: value = clientFeatures
        case .dynamic: return [beginRead(opcode, handle, offset: offset)]
        }
        return [readResponse(opcode, handle: handle, value: value, offset: offset)]
    }

    private func readResponse(_ opcode: ATTOpcode, handle: UInt16, value: [UInt8], offset: UInt16) -> ATTServerOutput {
        guard Int(offset) <= value.count else { return error(opcode.rawValue, handle, .invalidOffset) }
        let slice = Array(value[Int(offset)...].prefix(Int(mtu) - 1))
        switch opcode {
        case .readBlobRequest: return .send(ATTPDU.readBlobResponse(slice).encoded)
        case .readByTypeRequest: return .send(ATTPDU.readByTypeResponse([(handle, Array(value.prefix(min(Int(mtu) - 4, 253))))]).encoded)
        default: return .send(ATTPDU.readResponse(slice).encoded)
        }
    }

    /// Read Multiple (Core Vol 3 Part F §3.4.4.7): every handle is checked first, so a refusal costs the owners nothing;
    /// dynamic values are then fetched from their owners one at a time.
    private func readMultiple(_ handles: [UInt16]) -> [ATTServerOutput] {
        let opcode = ATTOpcode.readMultipleRequest.rawValue
        for handle in handles {
            guard let attribute = database.attribute(at: handle) else { return [error(opcode, handle, .invalidHandle)] }
            if let failure = readPermissionError(attribute) { return [error(opcode, handle, failure)] }
        }
        multipleRead = (handles, [])
        return continueReadMultiple()
    }

    private var multipleRead: (handles: [UInt16], collected: [UInt8])?

    private func continueReadMultiple() -> [ATTServerOutput] {
        guard var state = multipleRead else { return [] }
        while state.collected.count < Int(mtu) - 1, let handle = state.handles.first {
            state.handles.removeFirst()
            switch database.attribute(at: handle)?.value {
            case .fixed(let value)?: state.collected += value
            case .clientConfiguration?: state.collected += configurationBytes(handle)
            case .clientSupportedFeatures?: state.collected += clientFeatures
            case .dynamic?:
                multipleRead = state
                return [beginRead(.readMultipleRequest, handle, offset: 0)]
            case nil:
                // Removed while the owners were being asked.
                multipleRead = nil
                return [error(ATTOpcode.readMultipleRequest.rawValue, handle, .invalidHandle)]
            }
        }
        multipleRead = nil
        return [.send(ATTPDU.readMultipleResponse(Array(state.collected.prefix(Int(mtu) - 1))).encoded)]
    }

    private func beginRead(_ opcode: ATTOpcode, _ handle: UInt16, offset: UInt16) -> ATTServerOutput {
        let id = nextID
        nextID += 1
        pending = (id, opcode, handle)
        return .readRequested(id: id, handle: handle, offset: offset)
    }

    /// The owner's answer to `readRequested`: the whole value (the offset is applied here) or an ATT error.
    public func completeRead(id: UInt64, with result: Result<[UInt8], ATTError>, offset: UInt16 = 0) -> [ATTServerOutput] {
        guard let pending, pending.id == id else { return [.log("answer to read \(id) that is not pending; ignored")] }
        self.pending = nil
        guard isUsable else { return [.log("answer to read \(id) after a transaction timeout; not sent")] }
        if pending.opcode == .readMultipleRequest, var state = multipleRead {
            guard case .success(let value) = result else {
                multipleRead = nil
                if case .failure(let failure) = result { return [error(pending.opcode.rawValue, pending.handle, failure)] }
                return []
            }
            state.collected += value
            multipleRead = state
            return continueReadMultiple()
        }
        switch result {
        case .success(let value): return [readResponse(pending.opcode, handle: pending.handle, value: value, offset: offset)]
        case .failure(let failure): return [error(pending.opcode.rawValue, pending.handle, failure)]
        }
    }

    // MARK: Writes

    private func writePermissionError(_ attribute: Attribute) -> ATTError? {
        guard attribute.permissions.contains(.writeable) || attribute.permissions.contains(.writeEncryptionRequired)
                || attribute.permissions.contains(.writeAuthenticationRequired) else { return .writeNotPermitted }
        return securityError(encryption: attribute.permissions.contains(.writeEncryptionRequired),
                             authentication: attribute.permissions.contains(.writeAuthenticationRequired))
    }

    private func write(_ handle: UInt16, _ value: [UInt8], opcode: ATTOpcode) -> [ATTServerOutput] {
        guard let attribute = database.attribute(at: handle) else { return [error(opcode.rawValue, handle, .invalidHandle)] }
        if let failure = writePermissionError(attribute) { return [error(opcode.rawValue, handle, failure)] }
        guard value.count <= Self.maxValueLength else { return [error(opcode.rawValue, handle, .invalidAttributeValueLength)] }
        switch attribute.value {
        case .clientConfiguration:
            guard value.count == 2 else { return [error(opcode.rawValue, handle, .invalidAttributeValueLength)] }
            let bits = UInt16(value[0]) | UInt16(value[1]) << 8
            clientConfigurations[handle] = bits
            let valueHandle = characteristicValueHandle(forDescriptor: handle)
            return [.subscriptionChanged(valueHandle: valueHandle, notify: bits & 1 != 0, indicate: bits & 2 != 0),
                    .send(ATTPDU.writeResponse.encoded)]
        case .clientSupportedFeatures:
            // A client may set feature bits but never clear one it has set (Core Vol 3 Part G §7.2).
            guard !value.isEmpty else { return [error(opcode.rawValue, handle, .invalidAttributeValueLength)] }
            let previous = clientFeatures + [UInt8](repeating: 0, count: max(0, value.count - clientFeatures.count))
            let updated = value + [UInt8](repeating: 0, count: max(0, clientFeatures.count - value.count))
            guard zip(previous, updated).allSatisfy({ $0 & ~$1 == 0 }) else { return [error(opcode.rawValue, handle, .valueNotAllowed)] }
            let changed = updated != clientFeatures
            clientFeatures = updated
            return (changed ? [.clientFeaturesChanged(updated)] : []) + [.send(ATTPDU.writeResponse.encoded)]
        case .fixed:
            database.setValue(value, at: handle)
            return [.send(ATTPDU.writeResponse.encoded)]
        case .dynamic:
            let id = nextID
            nextID += 1
            if opcode == .writeRequest { pending = (id, opcode, handle) }
            return [.writeRequested(id: id, writes: [PreparedWrite(handle: handle, offset: 0, value: value)], withResponse: opcode == .writeRequest)]
        }
    }

    /// Signed Write Command (Core Vol 3 Part F §3.4.5.4): carried out as a Write Command when the bonded peer's CSRK
    /// verifies it and its SignCounter is above the last one accepted (Part C §10.4.2); otherwise ignored, as a command
    /// has no error response. The signature authenticates the peer as encryption would.
    private func signedWrite(_ handle: UInt16, _ value: [UInt8], _ signature: [UInt8]) -> [ATTServerOutput] {
        let at = "signed write to 0x\(String(handle, radix: 16))"
        guard var signing = peerSigning else { return [.log("\(at) ignored: this peer distributed no CSRK")] }
        let (valid, counter) = DataSigning.verify(csrk: signing.csrk, message: SignedWrite.signedBytes(handle: handle, value: value), signature: signature)
        guard valid else { return [.log("\(at) ignored: the signature does not verify")] }
        if let last = signing.lastCounter, counter <= last { return [.log("\(at) ignored: SignCounter \(counter) is not above \(last) (a replay)")] }
        guard handle > 1, let declaration = database.attribute(at: handle - 1), declaration.type == GATTType.characteristic,
              case .fixed(let bytes) = declaration.value, let properties = bytes.first,
              CharacteristicProperties(declared: properties).contains(.authenticatedSignedWrites) else {
            return [.log("\(at) ignored: not a characteristic that takes signed writes")]
        }
        signing.lastCounter = counter
        peerSigning = signing
        let linkSecurity = security
        security = LinkSecurity(encrypted: true, authenticated: signing.authenticated || linkSecurity.authenticated, bonded: true)
        defer { security = linkSecurity }
        let outputs = write(handle, value, opcode: .writeCommand).filter { if case .send = $0 { return false } else { return true } }
        return [.signCounterAccepted(counter)] + outputs
    }

    private func prepareWrite(_ handle: UInt16, _ offset: UInt16, _ value: [UInt8]) -> ATTServerOutput {
        let opcode = ATTOpcode.prepareWriteRequest.rawValue
        guard let attribute = database.attribute(at: handle) else { return error(opcode, handle, .invalidHandle) }
        if let failure = writePermissionError(attribute) { return error(opcode, handle, failure) }
        guard prepareQueue.count < Self.prepareQueueLimit else { return error(opcode, handle, .prepareQueueFull) }
        prepareQueue.append(PreparedWrite(handle: handle, offset: offset, value: value))
        return .send(ATTPDU.prepareWriteResponse(handle: handle, offset: offset, value: value).encoded)
    }

    /// Reliable and long writes: every queued part is checked before any is applied, so the batch lands whole or not at all.
    private func executeWrite(commit: Bool) -> [ATTServerOutput] {
        let opcode = ATTOpcode.executeWriteRequest.rawValue
        let queue = prepareQueue
        prepareQueue.removeAll()
        guard commit, !queue.isEmpty else { return [.send(ATTPDU.executeWriteResponse.encoded)] }
        var assembled: [UInt16: [UInt8]] = [:]
        var dynamic: [PreparedWrite] = []
        for part in queue {
            guard let attribute = database.attribute(at: part.handle) else { return [error(opcode, part.handle, .invalidHandle)] }
            switch attribute.value {
            case .dynamic:
                dynamic.append(part)
            case .clientConfiguration, .clientSupportedFeatures:
                return [error(opcode, part.handle, .writeNotPermitted)]
            case .fixed(let current):
                var value = assembled[part.handle] ?? current
                guard Int(part.offset) <= value.count else { return [error(opcode, part.handle, .invalidOffset)] }
                value.replaceSubrange(Int(part.offset)..<min(value.count, Int(part.offset) + part.value.count), with: part.value)
                guard value.count <= Self.maxValueLength else { return [error(opcode, part.handle, .invalidAttributeValueLength)] }
                assembled[part.handle] = value
            }
        }
        // Fixed values are applied only if the owner accepts the dynamic part too.
        guard dynamic.isEmpty else {
            let id = nextID
            nextID += 1
            pending = (id, .executeWriteRequest, dynamic[0].handle)
            stagedFixedWrites = assembled
            return [.writeRequested(id: id, writes: dynamic, withResponse: true)]
        }
        for (handle, value) in assembled { database.setValue(value, at: handle) }
        return [.send(ATTPDU.executeWriteResponse.encoded)]
    }

    private var stagedFixedWrites: [UInt16: [UInt8]] = [:]

    /// The owner's answer to `writeRequested`: nil accepts, an error refuses (and the whole batch with it).
    public func completeWrite(id: UInt64, error failure: ATTError?) -> [ATTServerOutput] {
        guard let pending, pending.id == id else { return [.log("answer to write \(id) that is not pending; ignored")] }
        self.pending = nil
        guard isUsable else { return [.log("answer to write \(id) after a transaction timeout; not sent")] }
        let staged = stagedFixedWrites
        stagedFixedWrites.removeAll()
        if let failure { return [error(pending.opcode.rawValue, pending.handle, failure)] }
        for (handle, value) in staged { database.setValue(value, at: handle) }
        return [.send(pending.opcode == .executeWriteRequest ? ATTPDU.executeWriteResponse.encoded : ATTPDU.writeResponse.encoded)]
    }

    // MARK: Notifications and indications (Core Vol 3 Part G §4.10, §4.11)

    /// The notification PDU for a subscribed peer, value clipped to ATT_MTU-3; nil when it has not subscribed.
    public func notification(valueHandle: UInt16, value: [UInt8]) -> [UInt8]? {
        guard isUsable, (clientConfigurations[valueHandle + 1] ?? 0) & 1 != 0 else { return nil }
        return ATTPDU.handleValueNotification(handle: valueHandle, value: Array(value.prefix(Int(mtu) - 3))).encoded
    }

    /// Sends the indication now or after the outstanding one is confirmed; returns false when the peer has not subscribed.
    public func indicate(valueHandle: UInt16, value: [UInt8]) -> (subscribed: Bool, outputs: [ATTServerOutput]) {
        guard isUsable, indicates(valueHandle: valueHandle) else { return (false, []) }
        guard indicationInFlight == nil else {
            indicationQueue.append((valueHandle, value))
            return (true, [])
        }
        return (true, sendIndication(valueHandle, value))
    }

    public var isIndicationOutstanding: Bool { indicationInFlight != nil }

    /// An indication unconfirmed for 30 s ends the bearer's use (Core Vol 3 Part F §3.3.3): said once; afterwards
    /// the server sends nothing, and the shell disconnects.
    public func tick(at time: Duration) -> [ATTServerOutput] {
        guard isUsable, let handle = indicationInFlight else { return [] }
        guard let seen = indicationSeenAt else {
            indicationSeenAt = time
            return []
        }
        guard time - seen >= ATTClient.transactionTimeout else { return [] }
        isUsable = false
        indicationQueue.removeAll()
        return [.indicationTimedOut(handle: handle)]
    }

    /// Indications that may wait behind the outstanding one before updateValue says false (Core Bluetooth's transmit
    /// queue): a publisher faster than the peer confirms (one at a time, Core Vol 3 Part F §3.4.7.2) cannot grow the
    /// queue without bound. Service Changed indications count towards it but are never refused.
    public static let indicationBacklog = 32
    public var hasIndicationRoom: Bool { indicationQueue.count < Self.indicationBacklog }

    /// Whether the peer subscribed to indications of the value.
    public func indicates(valueHandle: UInt16) -> Bool { (clientConfigurations[valueHandle + 1] ?? 0) & 2 != 0 }

    /// Indicates Service Changed for `range` if this peer subscribed to it (Core Vol 3 Part G §7.1).
    public func indicateServiceChanged(_ range: ClosedRange<UInt16>) -> (subscribed: Bool, outputs: [ATTServerOutput]) {
        guard let handle = database.serviceChangedHandle else { return (false, []) }
        return indicate(valueHandle: handle, value: ServiceChangedValue.encode(range))
    }

    private func sendIndication(_ handle: UInt16, _ value: [UInt8]) -> [ATTServerOutput] {
        indicationInFlight = handle
        return [.send(ATTPDU.handleValueIndication(handle: handle, value: Array(value.prefix(Int(mtu) - 3))).encoded)]
    }

    // MARK: Helpers

    private func configurationBytes(_ handle: UInt16) -> [UInt8] {
        let value = clientConfigurations[handle] ?? 0
        return [UInt8(value & 0xFF), UInt8(value >> 8)]
    }

    /// The characteristic value a CCCD belongs to: the nearest value attribute before it.
    private func characteristicValueHandle(forDescriptor handle: UInt16) -> UInt16 {
        var candidate = handle
        for attribute in database.attributes(in: 1...handle).reversed() where attribute.type == GATTType.characteristic {
            if case .fixed(let declaration) = attribute.value, declaration.count >= 3 {
                candidate = UInt16(declaration[1]) | UInt16(declaration[2]) << 8
            }
            break
        }
        return candidate
    }

    private func error(_ request: UInt8, _ handle: UInt16, _ code: ATTError) -> ATTServerOutput {
        .send(ATTPDU.errorResponse(request: request, handle: handle, error: code).encoded)
    }
}
