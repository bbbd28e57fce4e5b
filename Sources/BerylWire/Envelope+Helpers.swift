import SwiftProtobuf
#if canImport(Glibc)
import Glibc
#endif

public typealias Envelope = Beryl_Ipc_V1_Envelope
public typealias Request = Beryl_Ipc_V1_Request
public typealias Response = Beryl_Ipc_V1_Response
public typealias Event = Beryl_Ipc_V1_Event
public typealias IPCErrorCode = Beryl_Ipc_V1_ErrorCode
public typealias IPCErrorMessage = Beryl_Ipc_V1_Error

extension Response {
    public static func error(_ code: IPCErrorCode, _ message: String, field: String = "", detail: RemoteDetail = RemoteDetail()) -> Response {
        var error = IPCErrorMessage()
        error.code = code
        error.message = message
        error.field = field
        detail.fill(&error)
        var response = Response()
        response.error = error
        return response
    }
}

extension Envelope {
    public static func response(_ response: Response, to requestID: UInt64) -> Envelope {
        var envelope = Envelope()
        envelope.requestID = requestID
        envelope.response = response
        return envelope
    }

    public static func request(_ request: Request, id: UInt64) -> Envelope {
        var envelope = Envelope()
        envelope.requestID = id
        envelope.request = request
        return envelope
    }

    public static func event(_ event: Event) -> Envelope {
        var envelope = Envelope()
        envelope.event = event
        return envelope
    }

    public func encoded() -> [UInt8] {
        // Serialising a message built in memory cannot fail for proto3 (no required fields).
        (try? serializedBytes()) ?? []
    }

    /// Whether any part of the envelope carries fields this build's schema does not know.
    public var hasUnknownFields: Bool {
        !unknownFields.data.isEmpty || !request.unknownFields.data.isEmpty || !response.unknownFields.data.isEmpty
            || !event.unknownFields.data.isEmpty
    }
}

extension SeqPacketSocket {
    /// A client's reader thread: hands each Envelope received on a blocking socket to `deliver` until the peer closes
    /// (datagrams that are not Envelopes, or over the cap, are skipped), then returns.
    public static func readEnvelopes(_ fd: Int32, _ deliver: (Envelope) -> Void) {
        readDatagrams(fd) { for envelope in $0 { deliver(envelope) } }
    }

    /// As `readEnvelopes`, a datagram's envelopes at a time (a batch's, in order), for a reader that hands them on in
    /// one hop.
    public static func readDatagrams(_ fd: Int32, _ deliver: ([Envelope]) -> Void) {
        readDatagrams(fd) { envelopes, descriptor in
            if let descriptor { close(descriptor) }
            deliver(envelopes)
        }
    }

    /// As `readDatagrams`, with the descriptor a datagram carried (SCM_RIGHTS), which `deliver` then owns.
    public static func readDatagrams(_ fd: Int32, _ deliver: ([Envelope], _ descriptor: Int32?) -> Void) {
        var buffer: [UInt8] = []
        var passed: Int32?
        while true {
            switch receive(fd, cap: IPCLimits.standard.maxMessageBytes, buffer: &buffer, passed: &passed) {
            case .message(let bytes):
                guard let envelope = try? Envelope(serializedBytes: bytes) else {
                    if let passed { close(passed) }
                    continue
                }
                deliver(envelope.unbatched, passed)
            case .wouldBlock:
                var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                _ = poll(&descriptor, 1, -1)
            case .tooLarge:
                if let passed { close(passed) }
                continue
            case .closed:
                if let passed { close(passed) }
                return
            }
        }
    }
}
