import BerylIPC
import BerylSupervisor
import Foundation

/// Answers attd's pairing prompts for a command-line tool: a passkey given up front, numbers accepted without asking
/// (labs), or the user at the terminal.
public struct PairingAgent: Sendable {
    public var passkey: UInt32?
    public var autoAccept: Bool
    /// Asks the user (nil when stdin is not a terminal: prompts then go unanswered and pairing times out).
    public var ask: (@Sendable (String) -> String?)?

    public init(passkey: UInt32? = nil, autoAccept: Bool = false, ask: (@Sendable (String) -> String?)? = nil) {
        self.passkey = passkey
        self.autoAccept = autoAccept
        self.ask = ask
    }

    /// A terminal prompt when stdin is one.
    public static var terminal: (@Sendable (String) -> String?)? {
        guard isatty(STDIN_FILENO) == 1 else { return nil }
        return { question in
            Console.error(question + " ")
            return readLine()
        }
    }

    /// The line to show for a prompt, and the answer to send (nil: nothing to answer, or no one to ask).
    public func respond(to prompt: Beryl_Ipc_V1_PairingPrompt) -> (line: String, answer: Beryl_Ipc_V1_PairingAnswer?) {
        var answer = Beryl_Ipc_V1_PairingAnswer()
        answer.connectionHandle = prompt.connectionHandle
        let number = String(format: "%06u", prompt.number)
        switch prompt.kind {
        case .displayPasskey:
            return ("pairing with \(prompt.peer): passkey \(number)", nil)
        case .enterPasskey:
            if let passkey {
                answer.accept = true
                answer.passkey = passkey
                return ("pairing with \(prompt.peer): entering the given passkey", answer)
            }
            guard let ask, let typed = ask("passkey shown by \(prompt.peer):") else { return ("pairing with \(prompt.peer): a passkey is needed (--passkey)", nil) }
            guard let value = UInt32(typed.trimmingCharacters(in: .whitespaces)), value <= 999_999 else {
                answer.accept = false
                return ("pairing with \(prompt.peer): '\(typed)' is not a six-digit passkey; cancelled", answer)
            }
            answer.accept = true
            answer.passkey = value
            return ("pairing with \(prompt.peer): passkey entered", answer)
        case .confirmNumber:
            if autoAccept {
                answer.accept = true
                return ("pairing with \(prompt.peer): number \(number) accepted (--auto-accept)", answer)
            }
            guard let ask, let reply = ask("does \(prompt.peer) show \(number)? [y/N]") else {
                return ("pairing with \(prompt.peer): number \(number) to confirm (--auto-accept)", nil)
            }
            answer.accept = reply.lowercased().hasPrefix("y")
            return ("pairing with \(prompt.peer): number \(number) \(answer.accept ? "confirmed" : "rejected")", answer)
        default:
            return ("pairing with \(prompt.peer): unknown prompt", nil)
        }
    }

    /// A readable line for the end of a pairing.
    public static func describe(_ finished: Beryl_Ipc_V1_PairingFinished) -> String {
        if finished.success {
            let result = finished.result
            return "paired with \(finished.peer): \(result.secureConnections ? "LE Secure Connections" : "legacy"), "
                + "\(result.authenticated ? "authenticated" : "unauthenticated"), \(result.bonded ? "bonded as \(result.identity)" : "not bonded")"
        }
        let reason = finished.reason == 0xFF ? "timeout" : "reason 0x\(String(finished.reason, radix: 16))"
        return "pairing with \(finished.peer) failed: \(finished.remote ? "the peer" : "we") ended it, \(reason)"
    }
}

/// What a tool reports of a pairing: a prompt and how the agent answered it, or the end. `beryl serve`, `beryl gatt` and
/// `beryl pair` report them alike, as a line or (`--json`) one object whose fields a script reads.
public enum PairingEvent: Sendable, Equatable {
    case prompt(Beryl_Ipc_V1_PairingPrompt, line: String)
    case finished(Beryl_Ipc_V1_PairingFinished)

    public var text: String {
        switch self {
        case .prompt(_, let line): line
        case .finished(let finished): PairingAgent.describe(finished)
        }
    }

    public var fields: [String: any Sendable] {
        switch self {
        case .prompt(let prompt, let line):
            var fields: [String: any Sendable] = ["event": "pairing", "peer": prompt.peer, "prompt": line]
            switch prompt.kind {
            case .displayPasskey: fields["kind"] = "displayPasskey"; fields["number"] = Int(prompt.number)
            case .enterPasskey: fields["kind"] = "enterPasskey"
            case .confirmNumber: fields["kind"] = "confirmNumber"; fields["number"] = Int(prompt.number)
            default: fields["kind"] = "unknown"
            }
            return fields
        case .finished(let finished):
            var fields: [String: any Sendable] = [
                "event": finished.success ? "pairing-complete" : "pairing-failed", "peer": finished.peer, "reason": Int(finished.reason),
                "endedByPeer": finished.remote, "bonded": finished.result.bonded, "authenticated": finished.result.authenticated,
                "secureConnections": finished.result.secureConnections, "detail": PairingAgent.describe(finished)]
            // The identity address the bond is kept under (the peer's address when it distributed none).
            if !finished.result.identity.isEmpty { fields["identity"] = finished.result.identity }
            return fields
        }
    }
}
