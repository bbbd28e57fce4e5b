import BerylIPC
import Foundation
import GRPCCore
import PandoraInterfaces

/// The lab session's requests, typed, over one LabChannel; managerd's typed errors become gRPC statuses here.
public final class LabClient: Sendable {
    public let channel: LabChannel
    public let welcome: Beryl_Ipc_V1_LabWelcome

    private init(channel: LabChannel, welcome: Beryl_Ipc_V1_LabWelcome) {
        self.channel = channel
        self.welcome = welcome
    }

    /// Opens the lab session on managerd's socket; managerd refuses it (PERMISSION_DENIED) to anyone but root and the lab group.
    public static func open(socketPath: String) async throws(IPCClientError) -> LabClient {
        let channel = try LabChannel(socketPath: socketPath)
        do {
            let response = try await channel.call(.manager { $0.labOpen = .init() })
            return LabClient(channel: channel, welcome: response.manager.labWelcome)
        } catch {
            channel.close()
            throw error
        }
    }

    @discardableResult
    func call(_ build: (inout Beryl_Ipc_V1_ManagerRequest) -> Void) async throws(RPCError) -> Beryl_Ipc_V1_ManagerResponse {
        do {
            return try await channel.call(.manager(build)).manager
        } catch {
            throw RPCError(error)
        }
    }

    func events() -> AsyncStream<Beryl_Ipc_V1_LabEvent> {
        let events = channel.events()
        return AsyncStream { continuation in
            let task = Task {
                for await event in events {
                    if case .lab(let lab)? = event.manager.kind { continuation.yield(lab) }
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    func links() async throws(RPCError) -> [Beryl_Ipc_V1_LabLink] {
        try await call { $0.labGetLinks = .init() }.labLinks.links
    }
}

extension Request {
    static func manager(_ build: (inout Beryl_Ipc_V1_ManagerRequest) -> Void) -> Request {
        var request = Request()
        build(&request.manager)
        return request
    }
}

extension RPCError {
    /// managerd's error codes as gRPC's. gRPC's status has only a code and a message, so the typed codes behind the
    /// failure travel as trailing metadata (see `typedDetail`), never to be read back out of the message.
    public init(_ error: IPCClientError) {
        guard case .remote(let code, let message, let field, let detail) = error else {
            self.init(code: .unavailable, message: "the Beryl stack is unavailable: \(error)")
            return
        }
        let text = field.isEmpty ? message : "\(message) (\(field))"
        let metadata = Self.typedDetail(code: code, field: field, detail: detail)
        switch code {
        case .invalidArgument, .missingField, .malformedMessage, .messageTooLarge: self.init(code: .invalidArgument, message: text, metadata: metadata)
        case .notFound: self.init(code: .notFound, message: text, metadata: metadata)
        case .alreadyExists: self.init(code: .alreadyExists, message: text, metadata: metadata)
        case .permissionDenied: self.init(code: .permissionDenied, message: text, metadata: metadata)
        case .busy: self.init(code: .resourceExhausted, message: text, metadata: metadata)
        case .notReady: self.init(code: .unavailable, message: text, metadata: metadata)
        case .timeout: self.init(code: .deadlineExceeded, message: text, metadata: metadata)
        case .cancelled: self.init(code: .cancelled, message: text, metadata: metadata)
        case .unsupported, .unknownMessage: self.init(code: .unimplemented, message: text, metadata: metadata)
        // The link's security is a state the request needed and could not reach.
        case .securityFailed: self.init(code: .failedPrecondition, message: text, metadata: metadata)
        case .internal, .unspecified, .UNRECOGNIZED: self.init(code: .internalError, message: text, metadata: metadata)
        }
    }

    /// Trailing metadata with Beryl's typed codes, each present only when set, as decimal numbers (the wire enums'
    /// numbers for enums): `beryl-ipc-code`, `beryl-field`, `beryl-att-error`, `beryl-bluetooth-error`,
    /// `beryl-hci-status`, `beryl-smp-reason` with `beryl-smp-from-peer`, `beryl-manager-reason`, `beryl-controller-reason`.
    public static func typedDetail(code: IPCErrorCode, field: String, detail: RemoteDetail) -> Metadata {
        var metadata: Metadata = ["beryl-ipc-code": "\(code.rawValue)"]
        if !field.isEmpty { metadata.addString(field, forKey: "beryl-field") }
        if detail.attError != 0 { metadata.addString("\(detail.attError)", forKey: "beryl-att-error") }
        if detail.bluetoothError != .unspecified { metadata.addString("\(detail.bluetoothError.rawValue)", forKey: "beryl-bluetooth-error") }
        if detail.hciStatus != 0 { metadata.addString("\(detail.hciStatus)", forKey: "beryl-hci-status") }
        if detail.smpReason != 0 {
            metadata.addString("\(detail.smpReason)", forKey: "beryl-smp-reason")
            metadata.addString(detail.smpReasonFromPeer ? "true" : "false", forKey: "beryl-smp-from-peer")
        }
        if detail.managerReason != .unspecified { metadata.addString("\(detail.managerReason.rawValue)", forKey: "beryl-manager-reason") }
        if detail.controllerReason != .unspecified { metadata.addString("\(detail.controllerReason.rawValue)", forKey: "beryl-controller-reason") }
        return metadata
    }
}

/// Pandora's addresses: six bytes, most significant first, the kind in the oneof's case.
enum PandoraAddress {
    static func text(_ bytes: Data, random: Bool, field: String) throws(RPCError) -> String {
        guard bytes.count == 6 else {
            throw RPCError(code: .invalidArgument, message: "\(field): an address is 6 bytes, not \(bytes.count)")
        }
        let text = bytes.map { String(format: "%02X", $0) }.joined(separator: ":")
        return random ? text + "/random" : text
    }

    /// "AA:BB:CC:DD:EE:FF[/random]" → the bytes and whether it is random; nil for anything else.
    static func bytes(_ text: String) -> (Data, random: Bool)? {
        let parts = text.split(separator: "/")
        let octets = parts.first?.split(separator: ":").compactMap { UInt8($0, radix: 16) } ?? []
        guard octets.count == 6 else { return nil }
        return (Data(octets), parts.count > 1 && parts[1] != "public")
    }
}

/// A link as Pandora names it: an opaque cookie, here the connection handle (4 bytes, big-endian, as Bumble's).
enum ConnectionCookie {
    static func make(_ handle: UInt32) -> Pandora_Connection {
        var connection = Pandora_Connection()
        connection.cookie.value = Data([UInt8(handle >> 24 & 0xFF), UInt8(handle >> 16 & 0xFF), UInt8(handle >> 8 & 0xFF), UInt8(handle & 0xFF)])
        return connection
    }

    static func handle(_ connection: Pandora_Connection, field: String = "connection") throws(RPCError) -> UInt32 {
        let bytes = connection.cookie.value
        guard connection.hasCookie, bytes.count == 4 else {
            throw RPCError(code: .invalidArgument, message: "\(field): not a connection this server made")
        }
        return bytes.reduce(0) { $0 << 8 | UInt32($1) }
    }
}

/// Runs `body` until the RPC ends. gRPC signals a caller's cancel or passed deadline through the RPC's cancellation
/// handle, not by cancelling the handler's task, so the body runs in a task of its own that either one cancels; its
/// `for await` loops over lab events then end.
func untilRPCEnds<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T {
    let task = Task { try await body() }
    return try await withTaskCancellationHandler {
        try await withRPCCancellationHandler {
            try await task.value
        } onCancelRPC: {
            task.cancel()
        }
    } onCancel: {
        task.cancel()
    }
}
