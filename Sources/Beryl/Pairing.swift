import BerylWire
import Foundation

/// What pairing asks of the user (the stack pairs itself; these reach the app that holds the link).
public enum PairingPrompt: Sendable, Equatable {
    /// Show this six-digit passkey; the peer's user types it.
    case displayPasskey(UInt32)
    /// Ask the user for the passkey the peer shows; answer with `PairingResponder.enter(passkey:)`.
    case enterPasskey
    /// Show the number; answer with `PairingResponder.confirm(_:)` once the user compared it with the peer's.
    case confirmNumber(UInt32)
}

/// The app's answer to a prompt, once.
public struct PairingResponder: Sendable {
    let channel: Channel
    let peer: String
    /// The peer's address on the link ("AA:BB:CC:DD:EE:FF[/random]"), to show the user.
    public let address: String

    public func enter(passkey: UInt32) { answer(accept: true, passkey: passkey) }
    public func confirm(_ matches: Bool) { answer(accept: matches, passkey: 0) }
    public func cancel() { answer(accept: false, passkey: 0) }

    private func answer(accept: Bool, passkey: UInt32) {
        channel.request(.manager { $0.answerPairing = .with { $0.peer = peer; $0.accept = accept; $0.passkey = passkey } })
    }
}

/// How a pairing ended.
public struct PairingOutcome: Sendable, Equatable {
    public var success: Bool
    public var bonded: Bool
    public var authenticated: Bool
    public var secureConnections: Bool
    /// The SMP Pairing Failed reason (Core Vol 3 Part H §3.5.5), 0xFF for the 30 s timeout; 0 on success.
    public var reason: UInt8
    /// The peer ended it rather than this device.
    public var endedByPeer: Bool
    /// The peer's address on the link, and the identity address it distributed (nil when it gave none).
    public var address: String
    public var identity: String?
}

/// The pairing delegate: passkey display, passkey entry and numeric comparison, and how pairing ended. Beryl's
/// (iOS asks the user itself); called on the manager's queue, as its delegate is.
public protocol PairingDelegate: AnyObject {
    func pairing(with peer: UUID, prompt: PairingPrompt, responder: PairingResponder)
    func pairing(with peer: UUID, finished outcome: PairingOutcome)
}

public extension PairingDelegate {
    func pairing(with peer: UUID, finished outcome: PairingOutcome) {}
}

extension Channel {
    /// Hands a pairing event to the delegate on its queue; true when the event was one.
    func deliverPairing(_ event: Beryl_Ipc_V1_ManagerEvent, to slot: DelegateSlot, on queue: DelegateQueue) -> Bool {
        switch event.kind {
        case .pairingPrompt(let prompt)?:
            let responder = PairingResponder(channel: self, peer: prompt.peer, address: prompt.address)
            let kind: PairingPrompt = switch prompt.kind {
            case .displayPasskey: .displayPasskey(prompt.number)
            case .confirmNumber: .confirmNumber(prompt.number)
            default: .enterPasskey
            }
            let peer = UUID(uuidString: prompt.peer) ?? UUID()
            slot.call(PairingDelegate.self, on: queue) { $0.pairing(with: peer, prompt: kind, responder: responder) }
            return true
        case .pairingFinished(let finished)?:
            let peer = UUID(uuidString: finished.peer) ?? UUID()
            let outcome = PairingOutcome(success: finished.success, bonded: finished.bonded, authenticated: finished.authenticated,
                                         secureConnections: finished.secureConnections, reason: UInt8(truncatingIfNeeded: finished.reason),
                                         endedByPeer: finished.remote, address: finished.address,
                                         identity: finished.identity.isEmpty ? nil : finished.identity)
            slot.call(PairingDelegate.self, on: queue) { $0.pairing(with: peer, finished: outcome) }
            return true
        default:
            return false
        }
    }
}
