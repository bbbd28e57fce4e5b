import BerylIPC
import Foundation
import GRPCCore
import PandoraInterfaces
import Synchronization
import SwiftProtobuf

/// Who answers the pairing prompts on lab links: the OnPairing streams open now, else the desk itself, as a device with
/// no user would (Just Works accepted; a number or passkey refused, since no one can see or type it).
public final class PairingDesk: Sendable {
    private let openStreams = Mutex(0)

    var hasListener: Bool { openStreams.withLock { $0 > 0 } }

    func listening() { openStreams.withLock { $0 += 1 } }
    func stoppedListening() { openStreams.withLock { $0 -= 1 } }

    /// Answers prompts nobody listens for, for as long as the lab session lasts.
    func run(_ lab: LabClient) async {
        for await event in lab.events() {
            guard case .pairingPrompt(let prompt)? = event.kind, !hasListener else { continue }
            guard prompt.kind != .displayPasskey else { continue }  // nothing to answer
            _ = try? await lab.call { $0.labPairingAnswer = .with { $0.handle = prompt.handle; $0.accept = prompt.kind == .confirmPairing } }
        }
    }
}

/// The LE security levels as Pandora's peers (Android, Bumble) read them: level 3 is reached by any pairing that
/// encrypted the link, Just Works included, which is what Avatar's LE pairing cases expect of a NoInputNoOutput
/// reference. This reading stays in this server: the stack's own attribute permissions keep the Core spec's
/// meaning of "authenticated" (MITM protection, Core Vol 3 Part C §10.2).
enum PandoraLESecurity {
    static func reached(_ level: Pandora_LESecurityLevel, _ state: Beryl_Ipc_V1_LabSecurityState?) -> Bool {
        switch level {
        case .leLevel1: return true
        case .leLevel2, .leLevel3: return state?.encrypted == true
        case .leLevel4: return state?.encrypted == true && state?.secureConnections == true && state?.keySize == 16
        case .UNRECOGNIZED: return false
        }
    }
}

public struct SecurityService: Pandora_Security.SimpleServiceProtocol {
    let lab: LabClient
    let desk: PairingDesk

    public func onPairing(request: RPCAsyncSequence<Pandora_PairingEventAnswer, any Error>, response: RPCWriter<Pandora_PairingEvent>,
                          context: ServerContext) async throws {
        desk.listening()
        defer { desk.stoppedListening() }
        let events = lab.events()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                for await event in events {
                    guard case .pairingPrompt(let prompt)? = event.kind else { continue }
                    try await response.write(Self.pairingEvent(prompt))
                }
            }
            group.addTask {
                // Answers come back in any order, late or never; each names its event, hence its link.
                for try await answer in request {
                    guard case .connection(let connection)? = answer.event.remote,
                          let handle = try? ConnectionCookie.handle(connection) else { continue }
                    let accept: Bool
                    var passkey: UInt32 = 0
                    switch (answer.event.method, answer.answer) {
                    case (.justWorks?, .confirm(let yes)?), (.numericComparison?, .confirm(let yes)?): accept = yes
                    case (.passkeyEntryRequest?, .passkey(let value)?):
                        accept = true
                        passkey = value
                    case (.passkeyEntryNotification?, _): continue  // shown, nothing to answer
                    default: accept = false  // no answer, or not this method's: a refusal
                    }
                    _ = try? await lab.call { $0.labPairingAnswer = .with { $0.handle = handle; $0.accept = accept; $0.passkey = passkey } }
                }
            }
            // The client's half-close or cancel ends the call.
            try await group.next()
            group.cancelAll()
        }
    }

    public func secure(request: Pandora_SecureRequest, context: ServerContext) async throws -> Pandora_SecureResponse {
        let handle = try ConnectionCookie.handle(request.connection)
        let level = try leLevel(request.level)
        guard let link = try await lab.links().first(where: { $0.handle == handle }) else { return .with { $0.connectionDied = .init() } }
        if PandoraLESecurity.reached(level, link.hasSecurity ? link.security : nil) { return .with { $0.success = .init() } }
        let outcome = try await lab.call { $0.labSecure.handle = handle }.labSecurity
        switch outcome.outcome {
        case .secured(let state)?: return PandoraLESecurity.reached(level, state) ? .with { $0.success = .init() } : .with { $0.notReached = .init() }
        case .pairingFailed?: return .with { $0.pairingFailure = .init() }
        case .encryptionFailed?: return .with { $0.encryptionFailure = .init() }
        case .linkClosed?, nil: return .with { $0.connectionDied = .init() }
        }
    }

    public func waitSecurity(request: Pandora_WaitSecurityRequest, context: ServerContext) async throws -> Pandora_WaitSecurityResponse {
        let handle = try ConnectionCookie.handle(request.connection)
        let level = try leLevel(request.level)
        let events = lab.events()
        guard let link = try await lab.links().first(where: { $0.handle == handle }) else { return .with { $0.connectionDied = .init() } }
        if PandoraLESecurity.reached(level, link.hasSecurity ? link.security : nil) { return .with { $0.success = .init() } }
        return try await untilRPCEnds { try await Self.awaitSecurity(level, on: handle, events) }
    }

    private static func awaitSecurity(_ level: Pandora_LESecurityLevel, on handle: UInt32, _ events: AsyncStream<Beryl_Ipc_V1_LabEvent>) async throws -> Pandora_WaitSecurityResponse {
        for await event in events {
            switch event.kind {
            case .security(let outcome)? where outcome.handle == handle:
                switch outcome.outcome {
                case .secured(let state)? where PandoraLESecurity.reached(level, state): return .with { $0.success = .init() }
                case .pairingFailed?: return .with { $0.pairingFailure = .init() }
                case .encryptionFailed?: return .with { $0.encryptionFailure = .init() }
                case .linkClosed?: return .with { $0.connectionDied = .init() }
                default: continue
                }
            case .linkDown(let down)? where down.handle == handle:
                return .with { $0.connectionDied = .init() }
            default:
                continue
            }
        }
        throw RPCError(code: .unavailable, message: "the lab session ended")
    }

    private func leLevel(_ level: Pandora_SecureRequest.OneOf_Level?) throws(RPCError) -> Pandora_LESecurityLevel {
        switch level {
        case .le(let value)?: return value
        case .classic?: throw RPCError(code: .unimplemented, message: "level: classic levels are BR/EDR; Beryl is an LE-only stack")
        case nil: throw RPCError(code: .invalidArgument, message: "level: le is needed")
        }
    }

    private func leLevel(_ level: Pandora_WaitSecurityRequest.OneOf_Level?) throws(RPCError) -> Pandora_LESecurityLevel {
        switch level {
        case .le(let value)?: return value
        case .classic?: throw RPCError(code: .unimplemented, message: "level: classic levels are BR/EDR; Beryl is an LE-only stack")
        case nil: throw RPCError(code: .invalidArgument, message: "level: le is needed")
        }
    }

    static func pairingEvent(_ prompt: Beryl_Ipc_V1_LabPairingPrompt) -> Pandora_PairingEvent {
        var event = Pandora_PairingEvent()
        event.connection = ConnectionCookie.make(prompt.handle)
        switch prompt.kind {
        case .confirmNumber: event.numericComparison = prompt.number
        case .enterPasskey: event.passkeyEntryRequest = .init()
        case .displayPasskey: event.passkeyEntryNotification = prompt.number
        default: event.justWorks = .init()
        }
        return event
    }
}

public struct SecurityStorageService: Pandora_SecurityStorage.SimpleServiceProtocol {
    let lab: LabClient

    public func isBonded(request: Pandora_IsBondedRequest, context: ServerContext) async throws -> Google_Protobuf_BoolValue {
        let address = try Self.address(request.address)
        let bonds = try await lab.call { $0.labListBonds = .init() }.labBonds.bonds
        return .with { $0.value = bonds.contains { $0.identity == address } }
    }

    public func deleteBond(request: Pandora_DeleteBondRequest, context: ServerContext) async throws -> Google_Protobuf_Empty {
        let address = try Self.address(request.address)
        do throws(RPCError) {
            try await lab.call { $0.labRemoveBond.address = address }
        } catch {
            if error.code != .notFound { throw error }  // no bond: what was asked
        }
        return .init()
    }

    private static func address(_ oneof: Pandora_IsBondedRequest.OneOf_Address?) throws(RPCError) -> String {
        switch oneof {
        case .public(let bytes)?: try PandoraAddress.text(bytes, random: false, field: "public")
        case .random(let bytes)?: try PandoraAddress.text(bytes, random: true, field: "random")
        case nil: throw RPCError(code: .invalidArgument, message: "address: public or random is needed")
        }
    }

    private static func address(_ oneof: Pandora_DeleteBondRequest.OneOf_Address?) throws(RPCError) -> String {
        switch oneof {
        case .public(let bytes)?: try PandoraAddress.text(bytes, random: false, field: "public")
        case .random(let bytes)?: try PandoraAddress.text(bytes, random: true, field: "random")
        case nil: throw RPCError(code: .invalidArgument, message: "address: public or random is needed")
        }
    }
}
