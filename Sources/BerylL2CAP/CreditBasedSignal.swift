import BerylCore

/// The result of an LE credit-based or an enhanced credit-based connection request (Core Vol 3 Part A §4.23, §4.26).
/// In an enhanced response 0x0004, 0x0009 and 0x000A refuse only some of the channels asked for.
public enum CreditBasedResult: UInt16, Sendable, CaseIterable {
    case success = 0x0000
    case spsmNotSupported = 0x0002
    case noResources = 0x0004
    case insufficientAuthentication = 0x0005
    case insufficientAuthorization = 0x0006
    case encryptionKeySizeTooShort = 0x0007
    case insufficientEncryption = 0x0008
    case invalidSourceCID = 0x0009
    case sourceCIDAlreadyAllocated = 0x000A
    case unacceptableParameters = 0x000B
    /// Enhanced only (Core Vol 3 Part A §4.26).
    case invalidParameters = 0x000C
}

/// The result of a Credit Based Reconfigure Request (Core Vol 3 Part A §4.28).
public enum ReconfigureResult: UInt16, Sendable {
    case success = 0x0000
    case mtuReductionNotAllowed = 0x0001
    case mpsReductionNotAllowed = 0x0002
    case invalidDestinationCID = 0x0003
    case unacceptableParameters = 0x0004
}

/// The signalling packets of connection-oriented channels on the LE signalling channel, as typed values: what a
/// remote device sends is decoded here once, with every length checked, and nothing else reads their bytes.
public enum CreditBasedSignal: Equatable, Sendable {
    /// Core Vol 3 Part A §4.6.
    case disconnectionRequest(destinationCID: UInt16, sourceCID: UInt16)
    /// Core Vol 3 Part A §4.7.
    case disconnectionResponse(destinationCID: UInt16, sourceCID: UInt16)
    /// Core Vol 3 Part A §4.22.
    case leConnectionRequest(spsm: UInt16, sourceCID: UInt16, mtu: UInt16, mps: UInt16, credits: UInt16)
    /// Core Vol 3 Part A §4.23; the result stays raw, as a peer may send one this stack does not know.
    case leConnectionResponse(destinationCID: UInt16, mtu: UInt16, mps: UInt16, credits: UInt16, result: UInt16)
    /// Core Vol 3 Part A §4.24: the CID is the sender's own end of the channel.
    case flowControlCredit(cid: UInt16, credits: UInt16)
    /// Core Vol 3 Part A §4.25: one to five channels in one request.
    case connectionRequest(spsm: UInt16, mtu: UInt16, mps: UInt16, credits: UInt16, sourceCIDs: [UInt16])
    /// Core Vol 3 Part A §4.26: a refused channel's destination CID is 0.
    case connectionResponse(mtu: UInt16, mps: UInt16, credits: UInt16, result: UInt16, destinationCIDs: [UInt16])
    /// Core Vol 3 Part A §4.27.
    case reconfigureRequest(mtu: UInt16, mps: UInt16, destinationCIDs: [UInt16])
    /// Core Vol 3 Part A §4.28.
    case reconfigureResponse(result: UInt16)

    public enum DecodeFailure: Error, Equatable, Sendable {
        /// Not a code of this family: the caller handles it.
        case otherCode
        /// The code's fixed fields do not fit the length given (answered with Command Not Understood).
        case malformed
    }

    /// Most channels one enhanced request may open or reconfigure (Core Vol 3 Part A §4.25, §4.27).
    public static let maxChannelsPerRequest = 5

    public init(code: UInt8, body: [UInt8]) throws(DecodeFailure) {
        var reader = ByteReader(body)
        func field() throws(DecodeFailure) -> UInt16 {
            do { return try reader.u16() } catch { throw .malformed }
        }
        func cids() throws(DecodeFailure) -> [UInt16] {
            guard reader.remaining % 2 == 0, (2...Self.maxChannelsPerRequest * 2).contains(reader.remaining) else { throw .malformed }
            var list: [UInt16] = []
            while !reader.isAtEnd { list.append(try field()) }
            return list
        }
        switch LESignaling.Code(rawValue: code) {
        case .disconnectionRequest?:
            guard body.count == 4 else { throw .malformed }
            self = .disconnectionRequest(destinationCID: try field(), sourceCID: try field())
        case .disconnectionResponse?:
            guard body.count == 4 else { throw .malformed }
            self = .disconnectionResponse(destinationCID: try field(), sourceCID: try field())
        case .leCreditBasedConnectionRequest?:
            guard body.count == 10 else { throw .malformed }
            self = .leConnectionRequest(spsm: try field(), sourceCID: try field(), mtu: try field(), mps: try field(), credits: try field())
        case .leCreditBasedConnectionResponse?:
            guard body.count == 10 else { throw .malformed }
            self = .leConnectionResponse(destinationCID: try field(), mtu: try field(), mps: try field(), credits: try field(), result: try field())
        case .flowControlCredit?:
            guard body.count == 4 else { throw .malformed }
            self = .flowControlCredit(cid: try field(), credits: try field())
        case .creditBasedConnectionRequest?:
            let (spsm, mtu, mps, credits) = (try field(), try field(), try field(), try field())
            self = .connectionRequest(spsm: spsm, mtu: mtu, mps: mps, credits: credits, sourceCIDs: try cids())
        case .creditBasedConnectionResponse?:
            let (mtu, mps, credits, result) = (try field(), try field(), try field(), try field())
            self = .connectionResponse(mtu: mtu, mps: mps, credits: credits, result: result, destinationCIDs: try cids())
        case .creditBasedReconfigureRequest?:
            let (mtu, mps) = (try field(), try field())
            self = .reconfigureRequest(mtu: mtu, mps: mps, destinationCIDs: try cids())
        case .creditBasedReconfigureResponse?:
            guard body.count == 2 else { throw .malformed }
            self = .reconfigureResponse(result: try field())
        default:
            throw .otherCode
        }
    }

    public var code: LESignaling.Code {
        switch self {
        case .disconnectionRequest: .disconnectionRequest
        case .disconnectionResponse: .disconnectionResponse
        case .leConnectionRequest: .leCreditBasedConnectionRequest
        case .leConnectionResponse: .leCreditBasedConnectionResponse
        case .flowControlCredit: .flowControlCredit
        case .connectionRequest: .creditBasedConnectionRequest
        case .connectionResponse: .creditBasedConnectionResponse
        case .reconfigureRequest: .creditBasedReconfigureRequest
        case .reconfigureResponse: .creditBasedReconfigureResponse
        }
    }

    public var body: [UInt8] {
        var writer = ByteWriter(capacity: 18)
        let fields: [UInt16]
        switch self {
        case .disconnectionRequest(let destination, let source), .disconnectionResponse(let destination, let source):
            fields = [destination, source]
        case .leConnectionRequest(let spsm, let source, let mtu, let mps, let credits):
            fields = [spsm, source, mtu, mps, credits]
        case .leConnectionResponse(let destination, let mtu, let mps, let credits, let result):
            fields = [destination, mtu, mps, credits, result]
        case .flowControlCredit(let cid, let credits):
            fields = [cid, credits]
        case .connectionRequest(let spsm, let mtu, let mps, let credits, let sources):
            fields = [spsm, mtu, mps, credits] + sources
        case .connectionResponse(let mtu, let mps, let credits, let result, let destinations):
            fields = [mtu, mps, credits, result] + destinations
        case .reconfigureRequest(let mtu, let mps, let destinations):
            fields = [mtu, mps] + destinations
        case .reconfigureResponse(let result):
            fields = [result]
        }
        for field in fields { writer.u16(field) }
        return writer.bytes
    }

    /// The whole signalling packet, with its code, identifier and length (Core Vol 3 Part A §4).
    public func packet(identifier: UInt8) -> [UInt8] { LESignaling.packet(code, identifier, body) }
}
