import BerylCore

/// ATT error codes (Core Vol 3 Part F §3.4.1.1).
/// An ATT error code (Core Vol 3 Part F §3.4.1.1): the spec's, or any other a server sends — application errors
/// (0x80–0x9F) and common profile errors (0xE0–0xFF, Core Specification Supplement Part B) are passed on as they are.
public struct ATTError: RawRepresentable, Hashable, Error, Sendable, CustomStringConvertible {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let invalidHandle = ATTError(rawValue: 0x01)
    public static let readNotPermitted = ATTError(rawValue: 0x02)
    public static let writeNotPermitted = ATTError(rawValue: 0x03)
    public static let invalidPDU = ATTError(rawValue: 0x04)
    public static let insufficientAuthentication = ATTError(rawValue: 0x05)
    public static let requestNotSupported = ATTError(rawValue: 0x06)
    public static let invalidOffset = ATTError(rawValue: 0x07)
    public static let insufficientAuthorization = ATTError(rawValue: 0x08)
    public static let prepareQueueFull = ATTError(rawValue: 0x09)
    public static let attributeNotFound = ATTError(rawValue: 0x0A)
    public static let attributeNotLong = ATTError(rawValue: 0x0B)
    public static let insufficientEncryptionKeySize = ATTError(rawValue: 0x0C)
    public static let invalidAttributeValueLength = ATTError(rawValue: 0x0D)
    public static let unlikelyError = ATTError(rawValue: 0x0E)
    public static let insufficientEncryption = ATTError(rawValue: 0x0F)
    public static let unsupportedGroupType = ATTError(rawValue: 0x10)
    public static let insufficientResources = ATTError(rawValue: 0x11)
    public static let databaseOutOfSync = ATTError(rawValue: 0x12)
    public static let valueNotAllowed = ATTError(rawValue: 0x13)

    private static let names: [UInt8: String] = [
        0x01: "invalidHandle",
        0x02: "readNotPermitted",
        0x03: "writeNotPermitted",
        0x04: "invalidPDU",
        0x05: "insufficientAuthentication",
        0x06: "requestNotSupported",
        0x07: "invalidOffset",
        0x08: "insufficientAuthorization",
        0x09: "prepareQueueFull",
        0x0A: "attributeNotFound",
        0x0B: "attributeNotLong",
        0x0C: "insufficientEncryptionKeySize",
        0x0D: "invalidAttributeValueLength",
        0x0E: "unlikelyError",
        0x0F: "insufficientEncryption",
        0x10: "unsupportedGroupType",
        0x11: "insufficientResources",
        0x12: "databaseOutOfSync",
        0x13: "valueNotAllowed",
    ]

    public var description: String {
        if let name = Self.names[rawValue] { return name }
        switch rawValue {
        case 0x80...0x9F: return "application error"
        case 0xE0...0xFF: return "common profile error"
        default: return "reserved error"
        }
    }
}

/// ATT opcodes (Core Vol 3 Part F §3.4.8).
public enum ATTOpcode: UInt8, Sendable {
    case errorResponse = 0x01
    case exchangeMTURequest = 0x02
    case exchangeMTUResponse = 0x03
    case findInformationRequest = 0x04
    case findInformationResponse = 0x05
    case findByTypeValueRequest = 0x06
    case findByTypeValueResponse = 0x07
    case readByTypeRequest = 0x08
    case readByTypeResponse = 0x09
    case readRequest = 0x0A
    case readResponse = 0x0B
    case readBlobRequest = 0x0C
    case readBlobResponse = 0x0D
    case readMultipleRequest = 0x0E
    case readMultipleResponse = 0x0F
    case readByGroupTypeRequest = 0x10
    case readByGroupTypeResponse = 0x11
    case writeRequest = 0x12
    case writeResponse = 0x13
    case prepareWriteRequest = 0x16
    case prepareWriteResponse = 0x17
    case executeWriteRequest = 0x18
    case executeWriteResponse = 0x19
    case handleValueNotification = 0x1B
    case handleValueIndication = 0x1D
    case handleValueConfirmation = 0x1E
    case writeCommand = 0x52
    case signedWriteCommand = 0xD2

    /// What only a server sends: responses (and Error Response), notifications and indications.
    public var isSentByServer: Bool {
        switch self {
        case .errorResponse, .exchangeMTUResponse, .findInformationResponse, .findByTypeValueResponse, .readByTypeResponse, .readResponse,
             .readBlobResponse, .readMultipleResponse, .readByGroupTypeResponse, .writeResponse, .prepareWriteResponse, .executeWriteResponse,
             .handleValueNotification, .handleValueIndication:
            true
        default:
            false
        }
    }

    /// Requests expect exactly one response; commands, notifications and confirmations do not (§3.3).
    public var isRequest: Bool {
        switch self {
        case .exchangeMTURequest, .findInformationRequest, .findByTypeValueRequest, .readByTypeRequest, .readRequest,
             .readBlobRequest, .readMultipleRequest, .readByGroupTypeRequest, .writeRequest, .prepareWriteRequest, .executeWriteRequest:
            true
        default:
            false
        }
    }
}

/// Every ATT PDU, decoded (Core Vol 3 Part F §3.4).
public enum ATTPDU: Equatable, Sendable {
    case errorResponse(request: UInt8, handle: UInt16, error: ATTError)
    case exchangeMTURequest(mtu: UInt16)
    case exchangeMTUResponse(mtu: UInt16)
    case findInformationRequest(start: UInt16, end: UInt16)
    /// 16-bit UUIDs (format 1) or 128-bit (format 2); a response carries one size only.
    case findInformationResponse([(handle: UInt16, type: BluetoothUUID)])
    case findByTypeValueRequest(start: UInt16, end: UInt16, type: UInt16, value: [UInt8])
    case findByTypeValueResponse([(found: UInt16, groupEnd: UInt16)])
    case readByTypeRequest(start: UInt16, end: UInt16, type: BluetoothUUID)
    case readByTypeResponse([(handle: UInt16, value: [UInt8])])
    case readRequest(handle: UInt16)
    case readResponse([UInt8])
    case readBlobRequest(handle: UInt16, offset: UInt16)
    case readBlobResponse([UInt8])
    case readMultipleRequest([UInt16])
    case readMultipleResponse([UInt8])
    case readByGroupTypeRequest(start: UInt16, end: UInt16, type: BluetoothUUID)
    case readByGroupTypeResponse([(handle: UInt16, groupEnd: UInt16, value: [UInt8])])
    case writeRequest(handle: UInt16, value: [UInt8])
    case writeResponse
    case prepareWriteRequest(handle: UInt16, offset: UInt16, value: [UInt8])
    case prepareWriteResponse(handle: UInt16, offset: UInt16, value: [UInt8])
    /// Flags 0x00 cancels the queue, 0x01 writes it.
    case executeWriteRequest(commit: Bool)
    case executeWriteResponse
    case handleValueNotification(handle: UInt16, value: [UInt8])
    case handleValueIndication(handle: UInt16, value: [UInt8])
    case handleValueConfirmation
    case writeCommand(handle: UInt16, value: [UInt8])
    case signedWriteCommand(handle: UInt16, value: [UInt8], signature: [UInt8])

    public static func == (lhs: ATTPDU, rhs: ATTPDU) -> Bool { lhs.encoded == rhs.encoded }

    public var opcode: ATTOpcode {
        switch self {
        case .errorResponse: .errorResponse
        case .exchangeMTURequest: .exchangeMTURequest
        case .exchangeMTUResponse: .exchangeMTUResponse
        case .findInformationRequest: .findInformationRequest
        case .findInformationResponse: .findInformationResponse
        case .findByTypeValueRequest: .findByTypeValueRequest
        case .findByTypeValueResponse: .findByTypeValueResponse
        case .readByTypeRequest: .readByTypeRequest
        case .readByTypeResponse: .readByTypeResponse
        case .readRequest: .readRequest
        case .readResponse: .readResponse
        case .readBlobRequest: .readBlobRequest
        case .readBlobResponse: .readBlobResponse
        case .readMultipleRequest: .readMultipleRequest
        case .readMultipleResponse: .readMultipleResponse
        case .readByGroupTypeRequest: .readByGroupTypeRequest
        case .readByGroupTypeResponse: .readByGroupTypeResponse
        case .writeRequest: .writeRequest
        case .writeResponse: .writeResponse
        case .prepareWriteRequest: .prepareWriteRequest
        case .prepareWriteResponse: .prepareWriteResponse
        case .executeWriteRequest: .executeWriteRequest
        case .executeWriteResponse: .executeWriteResponse
        case .handleValueNotification: .handleValueNotification
        case .handleValueIndication: .handleValueIndication
        case .handleValueConfirmation: .handleValueConfirmation
        case .writeCommand: .writeCommand
        case .signedWriteCommand: .signedWriteCommand
        }
    }

    public var encoded: [UInt8] {
        var w = ByteWriter()
        w.u8(opcode.rawValue)
        switch self {
        case .errorResponse(let request, let handle, let error):
            w.u8(request); w.u16(handle); w.u8(error.rawValue)
        case .exchangeMTURequest(let mtu), .exchangeMTUResponse(let mtu):
            w.u16(mtu)
        case .findInformationRequest(let start, let end):
            w.u16(start); w.u16(end)
        case .findInformationResponse(let entries):
            let short = entries.first?.type.uuid16 != nil
            w.u8(short ? 1 : 2)
            for entry in entries { w.u16(entry.handle); w.append(short ? entry.type.attWire : entry.type.wire128) }
        case .findByTypeValueRequest(let start, let end, let type, let value):
            w.u16(start); w.u16(end); w.u16(type); w.append(value)
        case .findByTypeValueResponse(let entries):
            for entry in entries { w.u16(entry.found); w.u16(entry.groupEnd) }
        case .readByTypeRequest(let start, let end, let type), .readByGroupTypeRequest(let start, let end, let type):
            w.u16(start); w.u16(end); w.append(type.attWire)
        case .readByTypeResponse(let entries):
            w.u8(UInt8(2 + (entries.first?.value.count ?? 0)))
            for entry in entries { w.u16(entry.handle); w.append(entry.value) }
        case .readRequest(let handle):
            w.u16(handle)
        case .readResponse(let value), .readBlobResponse(let value), .readMultipleResponse(let value):
            w.append(value)
        case .readBlobRequest(let handle, let offset):
            w.u16(handle); w.u16(offset)
        case .readMultipleRequest(let handles):
            for handle in handles { w.u16(handle) }
        case .readByGroupTypeResponse(let entries):
            w.u8(UInt8(4 + (entries.first?.value.count ?? 0)))
            for entry in entries { w.u16(entry.handle); w.u16(entry.groupEnd); w.append(entry.value) }
        case .writeRequest(let handle, let value), .writeCommand(let handle, let value),
             .handleValueNotification(let handle, let value), .handleValueIndication(let handle, let value):
            w.u16(handle); w.append(value)
        case .writeResponse, .executeWriteResponse, .handleValueConfirmation:
            break
        case .prepareWriteRequest(let handle, let offset, let value), .prepareWriteResponse(let handle, let offset, let value):
            w.u16(handle); w.u16(offset); w.append(value)
        case .executeWriteRequest(let commit):
            w.u8(commit ? 1 : 0)
        case .signedWriteCommand(let handle, let value, let signature):
            w.u16(handle); w.append(value); w.append(signature)
        }
        return w.bytes
    }

    /// Decodes a PDU; a malformed one gives the error a server must answer with (Invalid PDU, or Request Not Supported).
    public static func decode(_ bytes: [UInt8]) -> Result<ATTPDU, ATTDecodeError> {
        var r = ByteReader(bytes)
        guard let code = try? r.u8() else { return .failure(.empty) }
        guard let opcode = ATTOpcode(rawValue: code) else { return .failure(.unknownOpcode(code)) }
        do {
            let pdu: ATTPDU
            switch opcode {
            case .errorResponse:
                let request = try r.u8()
                let handle = try r.u16()
                pdu = .errorResponse(request: request, handle: handle, error: ATTError(rawValue: try r.u8()))
            case .exchangeMTURequest: pdu = .exchangeMTURequest(mtu: try r.u16())
            case .exchangeMTUResponse: pdu = .exchangeMTUResponse(mtu: try r.u16())
            case .findInformationRequest: pdu = .findInformationRequest(start: try r.u16(), end: try r.u16())
            case .findInformationResponse:
                let format = try r.u8()
                guard format == 1 || format == 2 else { throw DecodeError.invalidValue(field: "format", value: UInt64(format)) }
                var entries: [(UInt16, BluetoothUUID)] = []
                while !r.isAtEnd {
                    let handle = try r.u16()
                    guard let uuid = BluetoothUUID(wire: try r.take(format == 1 ? 2 : 16)) else { throw DecodeError.invalidLength(field: "uuid", length: 0) }
                    entries.append((handle, uuid))
                }
                pdu = .findInformationResponse(entries)
            case .findByTypeValueRequest:
                pdu = .findByTypeValueRequest(start: try r.u16(), end: try r.u16(), type: try r.u16(), value: r.rest())
            case .findByTypeValueResponse:
                var entries: [(UInt16, UInt16)] = []
                while !r.isAtEnd { entries.append((try r.u16(), try r.u16())) }
                pdu = .findByTypeValueResponse(entries)
            case .readByTypeRequest, .readByGroupTypeRequest:
                let start = try r.u16()
                let end = try r.u16()
                let typeBytes = r.rest()
                guard typeBytes.count == 2 || typeBytes.count == 16, let type = BluetoothUUID(wire: typeBytes) else {
                    throw DecodeError.invalidLength(field: "type", length: typeBytes.count)
                }
                pdu = opcode == .readByTypeRequest ? .readByTypeRequest(start: start, end: end, type: type)
                    : .readByGroupTypeRequest(start: start, end: end, type: type)
            case .readByTypeResponse:
                let length = Int(try r.u8())
                guard length >= 2 else { throw DecodeError.invalidLength(field: "length", length: length) }
                var entries: [(UInt16, [UInt8])] = []
                while !r.isAtEnd { entries.append((try r.u16(), try r.take(length - 2))) }
                pdu = .readByTypeResponse(entries)
            case .readRequest: pdu = .readRequest(handle: try r.u16())
            case .readResponse: pdu = .readResponse(r.rest())
            case .readBlobRequest: pdu = .readBlobRequest(handle: try r.u16(), offset: try r.u16())
            case .readBlobResponse: pdu = .readBlobResponse(r.rest())
            case .readMultipleRequest:
                var handles: [UInt16] = []
                while !r.isAtEnd { handles.append(try r.u16()) }
                guard handles.count >= 2 else { throw DecodeError.invalidLength(field: "handles", length: handles.count) }
                pdu = .readMultipleRequest(handles)
            case .readMultipleResponse: pdu = .readMultipleResponse(r.rest())
            case .readByGroupTypeResponse:
                let length = Int(try r.u8())
                guard length >= 4 else { throw DecodeError.invalidLength(field: "length", length: length) }
                var entries: [(UInt16, UInt16, [UInt8])] = []
                while !r.isAtEnd { entries.append((try r.u16(), try r.u16(), try r.take(length - 4))) }
                pdu = .readByGroupTypeResponse(entries)
            case .writeRequest: pdu = .writeRequest(handle: try r.u16(), value: r.rest())
            case .writeResponse: pdu = .writeResponse
            case .prepareWriteRequest: pdu = .prepareWriteRequest(handle: try r.u16(), offset: try r.u16(), value: r.rest())
            case .prepareWriteResponse: pdu = .prepareWriteResponse(handle: try r.u16(), offset: try r.u16(), value: r.rest())
            case .executeWriteRequest:
                let flags = try r.u8()
                guard flags <= 1 else { throw DecodeError.invalidValue(field: "flags", value: UInt64(flags)) }
                pdu = .executeWriteRequest(commit: flags == 1)
            case .executeWriteResponse: pdu = .executeWriteResponse
            case .handleValueNotification: pdu = .handleValueNotification(handle: try r.u16(), value: r.rest())
            case .handleValueIndication: pdu = .handleValueIndication(handle: try r.u16(), value: r.rest())
            case .handleValueConfirmation: pdu = .handleValueConfirmation
            case .writeCommand: pdu = .writeCommand(handle: try r.u16(), value: r.rest())
            case .signedWriteCommand:
                let handle = try r.u16()
                let rest = r.rest()
                guard rest.count >= 12 else { throw DecodeError.invalidLength(field: "signature", length: rest.count) }
                pdu = .signedWriteCommand(handle: handle, value: Array(rest.dropLast(12)), signature: Array(rest.suffix(12)))
            }
            if !r.isAtEnd, [.exchangeMTURequest, .findInformationRequest, .readRequest, .readBlobRequest, .executeWriteRequest,
                            .handleValueConfirmation, .writeResponse].contains(opcode) {
                throw DecodeError.invalidLength(field: "pdu", length: bytes.count)
            }
            return .success(pdu)
        } catch {
            return .failure(.malformed(opcode))
        }
    }
}

public enum ATTDecodeError: Error, Equatable, Sendable {
    case empty
    case unknownOpcode(UInt8)
    case malformed(ATTOpcode)
}
