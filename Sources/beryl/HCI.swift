import ArgumentParser
import BerylHCI
import BerylIPC
import BerylSupervisor
import Foundation

struct HCI: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "hci", abstract: "Look at the controller's traffic.",
                                                    subcommands: [HCIMonitor.self])
}

/// `beryl hci monitor`: every packet between hcid and the controller, btmon-style, optionally into a btsnoop file.
struct HCIMonitor: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "monitor", abstract: "Show every HCI packet; --btsnoop writes a file Wireshark opens.")

    @OptionGroup var stack: StackOptions

    @Option(help: "Also write the packets to this btsnoop file.")
    var btsnoop: String?

    @Option(help: "Stop after this many packets.")
    var count: Int?

    @Option(help: "Stop after this many seconds.")
    var seconds: Double?

    @Flag(help: "One JSON object per packet (direction, hex, timestamp).")
    var json = false

    @Flag(help: "When hcid goes away, wait for it to come back (a supervisor restarting it) instead of exiting.")
    var follow = false

    /// sysexits' EX_UNAVAILABLE: the stack the monitor watched is gone, which a script must tell from a bad argument.
    static let stackGoneExitCode: Int32 = 69

    func run() throws {
        let socket = stack.paths.socket("hcid")
        var client: IPCClient
        do {
            client = try Self.subscribe(socket)
        } catch {
            throw Output.fail("\(error)")
        }
        var file: FileHandle?
        if let btsnoop {
            guard FileManager.default.createFile(atPath: btsnoop, contents: Data(BTSnoop.header)),
                  let handle = FileHandle(forWritingAtPath: btsnoop) else { throw Output.fail("cannot write \(btsnoop)") }
            handle.seekToEndOfFile()
            file = handle
        }
        defer { try? file?.close() }
        let clock = ContinuousClock()
        let end = seconds.map { clock.now + .milliseconds(Int($0 * 1000)) }
        var seen = 0
        while count.map({ seen < $0 }) ?? true {
            if let end, clock.now >= end { break }
            let envelope: Envelope
            do {
                envelope = try client.receive(timeout: .milliseconds(200))
            } catch .timedOut {
                continue
            } catch {
                // A closed socket polls readable forever: without this the monitor spun on a core after `beryl down`.
                guard follow else {
                    throw Output.fail("hcid at \(socket) went away (\(error)); the monitor stops", code: Self.stackGoneExitCode)
                }
                Console.error("beryl: hcid at \(socket) went away; waiting for it to come back (--follow)\n")
                guard let resumed = Self.resubscribe(socket, until: end, clock: clock) else { break }
                client = resumed
                Console.error("beryl: following hcid at \(socket) again\n")
                continue
            }
            guard case .monitor(let packet)? = envelope.event.hci.kind else { continue }
            seen += 1
            let bytes = Array(packet.h4)
            file?.write(Data(BTSnoop.record(h4: bytes, received: packet.received, unixMicroseconds: packet.timestampUs)))
            if json {
                print(#"{"received":\#(packet.received),"timestampUs":\#(packet.timestampUs),"h4":"\#(bytes.map { String(format: "%02x", $0) }.joined())"}"#)
            } else {
                print(BTSnoop.describe(h4: bytes, received: packet.received))
            }
            // A live view, as btmon is: each packet reaches a pipe or a file as it happens, not when a buffer fills.
            fflush(nil)  // every stream: stdout itself is a global the concurrency checker will not let us name
        }
    }

    private static func subscribe(_ socket: String) throws -> IPCClient {
        let client = try IPCClient(path: socket)
        var request = Request()
        request.hci.subscribe.monitor = true
        _ = try client.call(request)
        return client
    }

    /// Polls for a new hcid on the same socket until `end`; nil when the time ran out first.
    private static func resubscribe(_ socket: String, until end: ContinuousClock.Instant?, clock: ContinuousClock) -> IPCClient? {
        while end.map({ clock.now < $0 }) ?? true {
            if let client = try? subscribe(socket) { return client }
            usleep(250_000)
        }
        return nil
    }
}
