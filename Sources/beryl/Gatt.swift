import ArgumentParser
import BerylCore
import BerylEventLoop
import BerylTools
import Foundation

/// `beryl gatt --peer PEER <operation>`: one GATT client operation against a peer, for scripts. An ordinary app of
/// managerd; `--direct` drives hcid and attd itself (for debugging those daemons without managerd).
struct Gatt: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Connect to a peer and discover, read, write or subscribe; values are hex.",
        discussion: """
            Operations: discover | read UUID | write UUID HEX [--without-response] | subscribe UUID --count N (then unsubscribes)
              | read-descriptor UUID DESCRIPTOR | write-descriptor UUID DESCRIPTOR HEX
            """)

    @OptionGroup var stack: StackOptions

    @Option(help: "The peer: its identifier (as `beryl scan` prints), or AA:BB:CC:DD:EE:FF[/random].")
    var peer: String

    @Flag(help: "Bypass managerd: connect through hcid and run the operation through attd (needs an address).")
    var direct = false

    @Argument(help: "discover, read, write or subscribe.")
    var operation: String

    @Argument(help: "The characteristic UUID (read, write, subscribe) and, for write, the value in hex.")
    var arguments: [String] = []

    @Flag(help: "A reliable write: prepared, echoed and checked by the peer, then executed as one.")
    var reliable = false

    @Flag(help: "Write without response.")
    var withoutResponse = false

    @Option(help: "Values to wait for when subscribing.")
    var count: Int = 1

    @Option(help: "Seconds the whole operation may take.")
    var timeout: Double = 15

    @Flag(help: "One JSON object per line.")
    var json = false

    @Option(help: "The passkey to enter if the read or write needs pairing and pairing asks for one.")
    var passkey: UInt32?

    @Flag(help: "Accept numeric comparisons without asking.")
    var autoAccept = false

    func parsed() throws -> GattClientSession.Operation {
        func uuid(_ index: Int) throws -> BluetoothUUID {
            guard index < arguments.count, let uuid = BluetoothUUID(arguments[index]) else { throw ValidationError("\(operation) needs a characteristic UUID") }
            return uuid
        }
        switch operation {
        case "discover": return .discover
        case "read": return .read(try uuid(0))
        case "write":
            guard arguments.count == 2, let value = Hex.decode(arguments[1]), value.count <= 512 else {
                throw ValidationError("write needs a UUID and a hex value of at most 512 bytes")
            }
            guard !(reliable && withoutResponse) else { throw ValidationError("--reliable and --without-response contradict each other") }
            return reliable ? .reliableWrite(try uuid(0), value) : .write(try uuid(0), value, withoutResponse: withoutResponse)
        case "subscribe":
            guard (1...100_000).contains(count) else { throw ValidationError("--count must be from 1 to 100000") }
            return .subscribe(try uuid(0), count: count)
        case "read-descriptor":
            guard arguments.count == 2, let descriptor = BluetoothUUID(arguments[1]) else {
                throw ValidationError("read-descriptor needs a characteristic UUID and a descriptor UUID")
            }
            return .readDescriptor(try uuid(0), descriptor: descriptor)
        case "write-descriptor":
            guard arguments.count == 3, let descriptor = BluetoothUUID(arguments[1]), let value = Hex.decode(arguments[2]), value.count <= 512 else {
                throw ValidationError("write-descriptor needs a characteristic UUID, a descriptor UUID and a hex value of at most 512 bytes")
            }
            return .writeDescriptor(try uuid(0), descriptor: descriptor, value)
        default:
            throw ValidationError("unknown operation '\(operation)'; use discover, read, write, subscribe, read-descriptor or write-descriptor")
        }
    }

    func validate() throws {
        _ = try parsed()
        try AppSupport.validatePeer(peer)
        if direct, DeviceAddress(peer) == nil { throw ValidationError("--direct needs the peer's address, not an identifier") }
        guard timeout > 0, timeout <= 3600 else { throw ValidationError("--timeout must be in (0, 3600] seconds") }
        if let passkey, passkey > 999_999 { throw ValidationError("--passkey is at most six digits") }
    }

    func run() throws {
        let operation = try parsed()
        let agent = PairingAgent(passkey: passkey, autoAccept: autoAccept, ask: PairingAgent.terminal)
        guard direct, let address = DeviceAddress(peer) else {
            return try GattApp.run(stack: stack, peer: peer, operation: operation, timeout: timeout, json: json, agent: agent)
        }
        try Gatt.runSession(stack: stack, peer: address, operation: operation, timeout: timeout, json: json, agent: agent)
    }

    /// Connects, runs one operation, prints each event as a line (key=value, or JSON), disconnects.
    static func runSession(stack: StackOptions, peer: DeviceAddress, operation: GattClientSession.Operation, timeout: Double, json: Bool,
                           agent: PairingAgent) throws {
        let loop: EventLoop
        do { loop = try EventLoop() } catch { throw Output.fail("\(error)") }
        let printer = EventPrinter(json: json)
        let session = GattClientSession(loop: loop, paths: stack.paths, peer: peer, operation: operation,
                                        timeout: .milliseconds(Int(timeout * 1000))) { printer.emit($0) }
        session.agent = agent
        do { try session.start() } catch { throw Output.fail("cannot reach the stack in \(stack.paths.runtimeDir): \(error)") }
        do { try loop.run() } catch { throw Output.fail("\(error)") }
        guard let failure = session.failure else { return }
        if json { printer.emit(failure.fields) }
        throw Output.fail(failure.message)
    }
}
