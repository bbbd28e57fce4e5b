import ArgumentParser
import BerylCore
import BerylIPC
import BerylSMP
import BerylStore
import BerylTools
import Foundation

/// `beryl pair --peer ADDRESS`: connect, pair (or re-encrypt with a stored bond), print the result.
struct Pair: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Connect to a peripheral and pair with it, prompting on the terminal for passkeys and number comparisons.")

    @OptionGroup var stack: StackOptions

    @Option(help: "The peer: AA:BB:CC:DD:EE:FF for a public address, AA:BB:CC:DD:EE:FF/random for a random one.")
    var peer: String

    @Option(help: "The passkey to enter when pairing asks for one (six digits).")
    var passkey: UInt32?

    @Flag(help: "Accept numeric comparisons without asking (labs).")
    var autoAccept = false

    @Option(help: "Seconds pairing may take, connection included.")
    var timeout: Double = 40

    @Flag(help: "One JSON object per line.")
    var json = false

    func validate() throws {
        guard DeviceAddress(peer) != nil else { throw ValidationError("'\(peer)' is not an address like AA:BB:CC:DD:EE:FF[/random]") }
        if let passkey, passkey > 999_999 { throw ValidationError("--passkey is at most six digits") }
        guard timeout > 0, timeout <= 600 else { throw ValidationError("--timeout must be in (0, 600] seconds") }
    }

    func run() throws {
        try Gatt.runSession(stack: stack, peer: DeviceAddress(peer)!, operation: .pair, timeout: timeout, json: json,
                            agent: PairingAgent(passkey: passkey, autoAccept: autoAccept, ask: PairingAgent.terminal))
    }
}

/// `beryl bonds list | remove ADDRESS`: the bonds attd keeps in the state directory.
struct Bonds: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List or remove bonded peers.", subcommands: [List.self, Remove.self, Churn.self])

    /// For the crash-safety test: rewrites bonds in a loop, each version with every key set to one byte value,
    /// so a reader can tell a torn bond (keys from two versions) from a whole one.
    struct Churn: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Rewrite test bonds in a loop until killed.", shouldDisplay: false)
        @Option(help: "The bond store file.") var path: String

        func run() throws {
            let store: BondStore
            do { store = try BondStore(path: path) } catch { throw Output.fail("\(error)") }
            var version: UInt8 = 0
            while true {
                version &+= 1
                for index in 0..<4 {
                    let key = [UInt8](repeating: version, count: 16)
                    let bond = Bond(identity: DeviceAddress(BDAddress(wire: [UInt8(index), 0, 0, 0, 0, 0xC0]), type: .random), irk: key, peerLTK: key,
                                    peerRand: [UInt8](repeating: version, count: 8), localLTK: key, csrk: key, authenticated: version % 2 == 0,
                                    secureConnections: true)
                    do {
                        try store.save(bond)
                        try store.saveClientState(bond.identity, configurations: [UInt16(version) | 1: UInt16(version)], features: [version])
                    } catch { throw Output.fail("\(error)") }
                }
            }
        }
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List bonded peers with their keys and subscriptions.")
        @OptionGroup var stack: StackOptions
        @Flag(help: "JSON output.") var json = false

        func run() throws {
            let response = try Bonds.ask(stack) { $0.att.listBonds = .init() }
            let bonds = response.att.bonds.bonds
            if json {
                let objects: [[String: Any]] = bonds.map {
                    var object: [String: Any] = [
                        "identity": $0.identity, "authenticated": $0.authenticated, "secureConnections": $0.secureConnections,
                        "keySize": Int($0.keySize), "irk": $0.irkKnown, "csrk": $0.csrkKnown, "subscriptions": Int($0.subscriptions),
                        "keyEncryptions": Int($0.keyEncryptions)]
                    if let last = Self.outcomeName($0.lastKeyEncryption.outcome) {
                        var outcome: [String: Any] = ["outcome": last]
                        if Self.namesACode($0.lastKeyEncryption) { outcome["hciCode"] = Int($0.lastKeyEncryption.hciCode) }
                        object["lastKeyEncryption"] = outcome
                    }
                    return object
                }
                let data = try JSONSerialization.data(withJSONObject: ["bonds": objects], options: [.sortedKeys])
                print(String(decoding: data, as: UTF8.self))
                return
            }
            if bonds.isEmpty { print("no bonds") }
            for bond in bonds {
                print("\(bond.identity)  \(bond.secureConnections ? "LE Secure Connections" : "legacy")  "
                      + "\(bond.authenticated ? "authenticated" : "unauthenticated")  key \(bond.keySize) bytes"
                      + (bond.irkKnown ? "  IRK" : "") + (bond.csrkKnown ? "  CSRK" : "") + "  \(bond.subscriptions) subscription(s)"
                      + (Self.outcomeName(bond.lastKeyEncryption.outcome).map {
                          "  last of \(bond.keyEncryptions) encryption(s) with the key: \($0)"
                              + (Self.namesACode(bond.lastKeyEncryption) ? " (HCI 0x\(String(bond.lastKeyEncryption.hciCode, radix: 16)))" : "")
                      } ?? ""))
            }
        }

        /// 0x00 is Success in HCI: a link closed with no reason names no code.
        static func namesACode(_ last: Beryl_Ipc_V1_KeyEncryption) -> Bool {
            last.outcome != .encrypted && !(last.outcome == .linkClosed && last.hciCode == 0)
        }

        static func outcomeName(_ outcome: Beryl_Ipc_V1_KeyEncryption.Outcome) -> String? {
            switch outcome {
            case .none, .UNRECOGNIZED: nil
            case .encrypted: "encrypted"
            case .keyMissing: "keyMissing"
            case .failed: "failed"
            case .linkClosed: "linkClosed"
            }
        }
    }

    struct Remove: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Forget a bonded peer: its keys and its subscriptions.")
        @OptionGroup var stack: StackOptions
        @Argument(help: "The peer's identity address, as `beryl bonds list` shows it.") var address: String

        func validate() throws {
            guard DeviceAddress(address) != nil else { throw ValidationError("'\(address)' is not an address like AA:BB:CC:DD:EE:FF[/random]") }
        }

        func run() throws {
            _ = try Bonds.ask(stack) { $0.att.removeBond.identity = DeviceAddress(address)!.description }
            print("removed \(address)")
        }
    }

    static func ask(_ stack: StackOptions, _ build: (inout Request) -> Void) throws -> Response {
        var request = Request()
        build(&request)
        do {
            let client = try IPCClient(path: stack.paths.socket("attd"))
            return try client.call(request)
        } catch {
            throw Output.fail("\(error)")
        }
    }
}
