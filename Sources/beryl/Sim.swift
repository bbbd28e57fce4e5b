import ArgumentParser
import BerylIPC
import BerylSupervisor
import BerylTransport
import Foundation

/// `beryl sim --dir DIR <command>`: placement and faults on a running berylsim.
struct Sim: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Drive a running berylsim: list, move, range, drop, delay, corrupt, freeze, thaw, wedge-cancel, reset.",
        subcommands: [SimList.self, SimMove.self, SimRange.self, SimDrop.self, SimDelay.self, SimCorrupt.self,
                      SimFreeze.self, SimThaw.self, SimWedgeCancel.self, SimReset.self, SimPty.self])
}

struct SimOptions: ParsableArguments {
    @Option(help: "berylsim's --dir (holds control.sock).")
    var dir: String

    @Flag(help: "Print the resulting state as JSON.")
    var json = false

    func send(_ request: Beryl_Ipc_V1_SimRequest) throws {
        var envelope = Request()
        envelope.sim = request
        let state: Beryl_Ipc_V1_SimState
        do {
            let client = try IPCClient(path: "\(dir)/control.sock")
            state = try client.call(envelope).sim.state
        } catch {
            throw Output.fail("\(error)")
        }
        print(json ? Self.json(state) : Self.render(state))
    }

    static func json(_ state: Beryl_Ipc_V1_SimState) -> String {
        (try? state.jsonString()) ?? "{}"
    }

    static func render(_ state: Beryl_Ipc_V1_SimState) -> String {
        var lines = [String(format: "air: drop %.0f%%, delay %d ms, air-time model %@, seed %llu", state.dropRate * 100, state.delayMs,
                            state.airTime ? "on" : "off", state.seed)]
        for c in state.controllers {
            var flags: [String] = []
            if !c.inRange { flags.append("OUT OF RANGE") }
            if c.frozen { flags.append("FROZEN") }
            if c.wedgesConnectionCancel { flags.append("WEDGES-CANCEL") }
            if c.corruptRate > 0 { flags.append(String(format: "corrupt %.0f%%", c.corruptRate * 100)) }
            if c.advertising { flags.append("advertising") }
            if c.scanning { flags.append("scanning") }
            if c.initiating { flags.append("connecting") }
            if c.commandFlowViolations > 0 { flags.append("\(c.commandFlowViolations) flow violations") }
            if c.aclOverflows > 0 { flags.append("\(c.aclOverflows) ACL overflows") }
            let tcp = c.tcpPort > 0 ? " tcp:\(c.tcpPort)" : ""
            lines.append(String(format: "  %2d %@ at (%.1f, %.1f) host %@%@ links %@ %@", c.index, c.address, c.x, c.y,
                                c.hostAttached ? "attached" : "none", tcp, "\(c.connectionHandles)", flags.joined(separator: ", ")))
        }
        for link in state.links {
            lines.append("  link \(link.central) → \(link.peripheral): interval \(Double(link.intervalUs) / 1000) ms, \(link.phy)M PHY, "
                         + "\(link.maxOctets) octets\(link.encrypted ? ", encrypted" : "")")
        }
        return lines.joined(separator: "\n")
    }
}

struct SimList: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "list", abstract: "Controllers, positions and links.")
    @OptionGroup var sim: SimOptions
    func run() throws { try sim.send(.with { $0.getState = .init() }) }
}

struct SimMove: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "move", abstract: "Move controller INDEX to (X, Y) metres (put -- before negative numbers).")
    @OptionGroup var sim: SimOptions
    @Argument var index: UInt32
    @Argument var x: Double
    @Argument var y: Double
    func run() throws { try sim.send(.with { $0.move = .with { $0.index = index; $0.x = x; $0.y = y } }) }
}

struct SimRange: ParsableCommand {
    enum Placement: String, ExpressibleByArgument { case `in`, out }
    static let configuration = CommandConfiguration(commandName: "range", abstract: "Take controller INDEX out of everyone's range, or back in.")
    @OptionGroup var sim: SimOptions
    @Argument var index: UInt32
    @Argument var placement: Placement
    func run() throws { try sim.send(.with { $0.range = .with { $0.index = index; $0.inRange = placement == .in } }) }
}

struct SimDrop: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "drop", abstract: "Lose this fraction (0–1) of link-layer packets.")
    @OptionGroup var sim: SimOptions
    @Argument var rate: Double
    func validate() throws { guard (0...1).contains(rate) else { throw ValidationError("rate must be between 0 and 1") } }
    func run() throws { try sim.send(.with { $0.drop = .with { $0.rate = rate } }) }
}

struct SimDelay: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "delay", abstract: "Delay link-layer delivery by MS milliseconds.")
    @OptionGroup var sim: SimOptions
    @Argument var milliseconds: UInt32
    func run() throws { try sim.send(.with { $0.delay = .with { $0.milliseconds = milliseconds } }) }
}

struct SimCorrupt: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "corrupt", abstract: "Flip this fraction (0–1) of bytes controller INDEX sends its host.")
    @OptionGroup var sim: SimOptions
    @Argument var index: UInt32
    @Argument var rate: Double
    func validate() throws { guard (0...1).contains(rate) else { throw ValidationError("rate must be between 0 and 1") } }
    func run() throws { try sim.send(.with { $0.corrupt = .with { $0.index = index; $0.rate = rate } }) }
}

struct SimFreeze: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "freeze", abstract: "Controller INDEX stops answering and transmitting.")
    @OptionGroup var sim: SimOptions
    @Argument var index: UInt32
    func run() throws { try sim.send(.with { $0.freeze = .with { $0.index = index } }) }
}

struct SimThaw: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "thaw", abstract: "Controller INDEX resumes.")
    @OptionGroup var sim: SimOptions
    @Argument var index: UInt32
    func run() throws { try sim.send(.with { $0.thaw = .with { $0.index = index } }) }
}

struct SimWedgeCancel: ParsableCommand {
    enum Mode: String, ExpressibleByArgument { case on, off }
    static let configuration = CommandConfiguration(
        commandName: "wedge-cancel",
        abstract: "Controller INDEX confirms LE Create Connection Cancel but never completes it, then refuses every connect until reset (as Bumble 0.0.236's).")
    @OptionGroup var sim: SimOptions
    @Argument var index: UInt32
    @Argument var mode: Mode = .on
    func run() throws { try sim.send(.with { $0.wedgeConnectionCancel = .with { $0.index = index; $0.wedges = mode == .on } }) }
}

struct SimReset: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "reset", abstract: "Reset every controller and the air's faults.")
    @OptionGroup var sim: SimOptions
    func run() throws { try sim.send(.with { $0.reset = .init() }) }
}

/// Wires a pseudo-terminal to one simulated controller, so a UART transport can be exercised without hardware.
struct SimPty: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pty",
        abstract: "Serve controller INDEX on a pseudo-terminal (prints its path), until stopped: for testing uart: transports.")
    @Option(help: "berylsim's --dir.")
    var dir: String
    @Argument var index: UInt32

    func run() throws {
        let controller: Int32
        do {
            controller = try StreamSocket.connectUnix(path: "\(dir)/controller-\(index).sock")
        } catch {
            throw Output.fail("\(error)")
        }
        guard let (master, slave) = PseudoTerminal.open() else { throw Output.fail("cannot open a pseudo-terminal") }
        // Unbuffered, so a parent reading our first line gets it now.
        Console.out(slave + "\n")
        // Keep a slave descriptor open so the master does not see a hang-up between hcid's opens.
        let keeper = open(slave, O_RDWR | O_NOCTTY)
        defer { close(keeper) }
        var fds = [pollfd(fd: master, events: Int16(POLLIN), revents: 0), pollfd(fd: controller, events: Int16(POLLIN), revents: 0)]
        var buffer = [UInt8](repeating: 0, count: 4096)
        while poll(&fds, 2, -1) > 0 {
            for (from, to) in [(0, 1), (1, 0)] where fds[from].revents & Int16(POLLIN) != 0 {
                let count = read(fds[from].fd, &buffer, buffer.count)
                if count <= 0 {
                    if from == 1 { return }  // the simulator went away
                    continue
                }
                var offset = 0
                while offset < count {
                    let written = buffer[offset..<count].withUnsafeBytes { write(fds[to].fd, $0.baseAddress, $0.count) }
                    if written <= 0 { break }
                    offset += written
                }
            }
        }
    }
}
