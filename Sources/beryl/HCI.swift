import ArgumentParser
import BerylHCI
import BerylIPC
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

    func run() throws {
        let client: IPCClient
        do {
            client = try IPCClient(path: stack.paths.socket("hcid"))
            var request = Request()
            request.hci.subscribe.monitor = true
            _ = try client.call(request)
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
            guard let envelope = try? client.receive(timeout: .milliseconds(200)) else { continue }
            guard case .monitor(let packet)? = envelope.event.hci.kind else { continue }
            seen += 1
            let bytes = Array(packet.h4)
            file?.write(Data(BTSnoop.record(h4: bytes, received: packet.received, unixMicroseconds: packet.timestampUs)))
            if json {
                print(#"{"received":\#(packet.received),"timestampUs":\#(packet.timestampUs),"h4":"\#(bytes.map { String(format: "%02x", $0) }.joined())"}"#)
            } else {
                print(BTSnoop.describe(h4: bytes, received: packet.received))
            }
        }
    }
}
