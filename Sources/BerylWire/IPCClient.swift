import SwiftProtobuf
#if canImport(Glibc)
import Glibc
#endif

/// The typed codes an error carries beside its IPC code: the ATT error a peer answered with, what the failure is in
/// Core Bluetooth's terms, the HCI status or SMP reason behind a security failure, and the daemons' own reasons.
/// Forwarded as they are, never recovered from the message.
public struct RemoteDetail: Equatable, Sendable {
    public var attError: UInt8
    public var bluetoothError: Beryl_Ipc_V1_BluetoothErrorCode
    public var hciStatus: UInt8
    /// 0 when pairing did not fail with a Pairing Failed.
    public var smpReason: UInt8
    public var smpReasonFromPeer: Bool
    public var managerReason: Beryl_Ipc_V1_ManagerReason
    public var controllerReason: Beryl_Ipc_V1_ControllerReason
    public var grantReason: Beryl_Ipc_V1_GrantReason

    public init(attError: UInt8 = 0, bluetoothError: Beryl_Ipc_V1_BluetoothErrorCode = .unspecified, hciStatus: UInt8 = 0, smpReason: UInt8 = 0,
                smpReasonFromPeer: Bool = false, managerReason: Beryl_Ipc_V1_ManagerReason = .unspecified,
                controllerReason: Beryl_Ipc_V1_ControllerReason = .unspecified, grantReason: Beryl_Ipc_V1_GrantReason = .unspecified) {
        self.attError = attError
        self.bluetoothError = bluetoothError
        self.hciStatus = hciStatus
        self.smpReason = smpReason
        self.smpReasonFromPeer = smpReasonFromPeer
        self.managerReason = managerReason
        self.controllerReason = controllerReason
        self.grantReason = grantReason
    }

    public init(_ error: IPCErrorMessage) {
        self.init(attError: UInt8(truncatingIfNeeded: error.attError), bluetoothError: error.bluetoothError, hciStatus: UInt8(truncatingIfNeeded: error.hciStatus),
                  smpReason: UInt8(truncatingIfNeeded: error.smpReason), smpReasonFromPeer: error.smpReasonFromPeer, managerReason: error.managerReason,
                  controllerReason: error.controllerReason, grantReason: error.grantReason)
    }

    /// The typed codes that are set, for people: "SMP reason 0x4 from the peer", "HCI status 0x6".
    public var summary: String {
        var parts: [String] = []
        if attError != 0 { parts.append("ATT error 0x\(String(attError, radix: 16))") }
        if bluetoothError != .unspecified { parts.append("Core Bluetooth \(bluetoothError)") }
        if hciStatus != 0 { parts.append("HCI status 0x\(String(hciStatus, radix: 16))") }
        if smpReason != 0 { parts.append("SMP reason 0x\(String(smpReason, radix: 16)) from \(smpReasonFromPeer ? "the peer" : "this stack")") }
        if managerReason != .unspecified { parts.append("managerd \(managerReason)") }
        if controllerReason != .unspecified { parts.append("controller \(controllerReason)") }
        if grantReason != .unspecified { parts.append("data channel \(grantReason)") }
        return parts.joined(separator: ", ")
    }

    func fill(_ error: inout IPCErrorMessage) {
        error.attError = UInt32(attError)
        error.bluetoothError = bluetoothError
        error.hciStatus = UInt32(hciStatus)
        error.smpReason = UInt32(smpReason)
        error.smpReasonFromPeer = smpReasonFromPeer
        error.managerReason = managerReason
        error.controllerReason = controllerReason
        error.grantReason = grantReason
    }
}

public enum IPCClientError: Error, Equatable, Sendable, CustomStringConvertible {
    case connect(IPCSocketError)
    case timedOut(requestID: UInt64)
    case closed
    case malformedResponse
    case remote(code: IPCErrorCode, message: String, field: String, detail: RemoteDetail = RemoteDetail())

    public var description: String {
        switch self {
        case .connect(let error): error.description
        case .timedOut(let id): "no response to request \(id) in time"
        case .closed: "the daemon closed the connection"
        case .malformedResponse: "the daemon sent a datagram that is not an Envelope"
        case .remote(let code, let message, let field, let detail):
            "\(code): \(message)\(field.isEmpty ? "" : " (field \(field))")\(detail.summary.isEmpty ? "" : " [\(detail.summary)]")"
        }
    }
}

/// A blocking client for tools and tests: one request at a time, or pipelined with `send`/`receive`.
/// Daemons never use it on their loop thread.
public final class IPCClient {
    public let path: String
    public let fd: Int32
    public var maxMessageBytes = IPCLimits.standard.maxMessageBytes
    /// Events that arrived while `call` waited for its response, oldest first. What `receive` returns is the caller's
    /// and is not kept again here, so a loop of receives (a monitor, a scan) holds nothing it did not ask for.
    public private(set) var events: [Event] = []
    private var nextRequestID: UInt64 = 1
    private var buffer: [UInt8] = []

    /// The descriptor the last datagram received carried (SCM_RIGHTS: a Welcome's data channel), until taken.
    private var passed: Int32?

    public init(path: String) throws(IPCClientError) {
        self.path = path
        do {
            fd = try SeqPacketSocket.connect(path: path)
        } catch {
            throw .connect(error)
        }
    }

    /// A client on a connected socket it takes over (a data channel a Welcome passed).
    public init(descriptor: Int32, name: String) {
        path = name
        fd = descriptor
        let flags = fcntl(descriptor, F_GETFL)
        _ = fcntl(descriptor, F_SETFL, flags & ~O_NONBLOCK)
    }

    deinit {
        close(fd)
        if let passed { close(passed) }
    }

    /// The descriptor the last datagram received carried, now the caller's.
    public func takePassedDescriptor() -> Int32? {
        defer { passed = nil }
        return passed
    }

    /// Sends a request and waits for its response; an Error response is thrown as `.remote`.
    public func call(_ request: Request, timeout: Duration = .seconds(10)) throws(IPCClientError) -> Response {
        let id = try send(request)
        while true {
            let envelope = try receive(timeout: timeout, requestID: id)
            if case .event(let event)? = envelope.body { events.append(event) }
            if envelope.requestID == id, case .response(let response)? = envelope.body {
                if case .error(let error)? = response.kind {
                    throw .remote(code: error.code, message: error.message, field: error.field, detail: RemoteDetail(error))
                }
                return response
            }
        }
    }

    @discardableResult
    public func send(_ request: Request) throws(IPCClientError) -> UInt64 {
        let id = nextRequestID
        nextRequestID += 1
        try sendRaw(Envelope.request(request, id: id).encoded())
        return id
    }

    public func sendRaw(_ bytes: [UInt8]) throws(IPCClientError) {
        let sent = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        guard sent == bytes.count else { throw .closed }
    }

    /// Receives the next envelope.
    public func receive(timeout: Duration = .seconds(10), requestID: UInt64 = 0) throws(IPCClientError) -> Envelope {
        var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let (seconds, attoseconds) = timeout.components
        let milliseconds = Int32(clamping: seconds * 1000 + attoseconds / 1_000_000_000_000_000)
        guard poll(&poller, 1, milliseconds) > 0 else { throw .timedOut(requestID: requestID) }
        var descriptor: Int32?
        let received = SeqPacketSocket.receive(fd, cap: maxMessageBytes, buffer: &buffer, passed: &descriptor)
        if let descriptor {
            if let earlier = passed { close(earlier) }
            passed = descriptor
        }
        switch received {
        case .message(let bytes):
            guard let envelope = try? Envelope(serializedBytes: bytes) else { throw .malformedResponse }
            return envelope
        case .tooLarge, .closed:
            throw .closed
        case .wouldBlock:
            return try receive(timeout: timeout, requestID: requestID)
        }
    }

    public func takeEvents() -> [Event] {
        defer { events.removeAll() }
        return events
    }
}
