import ArgumentParser
import BerylCore
import BerylDaemonKit
import BerylIPC
import BerylSim

struct Berylsim: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "berylsim",
        abstract: "Beryl's simulated LE radio: N virtual controllers on one air, served as H4.",
        discussion: "Controller i is served at DIR/controller-<i>.sock (and at PORT+i with --tcp); DIR/control.sock takes `beryl sim` commands.",
        version: Beryl.version)

    @Option(help: "Number of virtual controllers.")
    var controllers: Int = 2

    @Option(help: "Directory for controller-<i>.sock and control.sock.")
    var dir: String

    @Option(help: "Also serve controller i over TCP at HOST:PORT+i (a numeric IPv4 address, e.g. 127.0.0.1:9000).")
    var tcp: String?

    @Option(help: "Seed for addresses and fault randomness, so runs reproduce.")
    var seed: UInt64 = 1

    @Flag(help: "Limit each connection event to the PDUs that fit in it on air (interval, PHY, data length).")
    var airTime = false

    @Option(help: "ACL buffers the controllers report and enforce, as SIZE:COUNT.")
    var aclBuffers: String = "251:8"

    @Option(help: "How data crosses a link: events (at connection events, as a radio) or instant (delivered and its buffer returned at once, to measure hosts).")
    var link: LinkModel = .events

    @Option(help: "Log level: error, warning, info, debug or trace.")
    var logLevel: LogLevel = .info

    func validate() throws {
        guard (1...64).contains(controllers) else { throw ValidationError("--controllers must be from 1 to 64") }
        if let tcp { _ = try Self.parseTCP(tcp) }
        _ = try Self.parseBuffers(aclBuffers)
        guard !(airTime && link == .instant) else { throw ValidationError("--air-time limits connection events; an --link instant link has none") }
    }

    static func parseTCP(_ text: String) throws -> (String, UInt16) {
        guard let colon = text.lastIndex(of: ":"), let port = UInt16(text[text.index(after: colon)...]), port > 0 else {
            throw ValidationError("--tcp takes HOST:PORT with a port from 1 to 65535, e.g. 127.0.0.1:9000")
        }
        return (String(text[..<colon]), port)
    }

    static func parseBuffers(_ text: String) throws -> (Int, Int) {
        let parts = text.split(separator: ":")
        guard parts.count == 2, let size = Int(parts[0]), let count = Int(parts[1]), (27...1021).contains(size), (1...255).contains(count) else {
            throw ValidationError("--acl-buffers takes SIZE:COUNT with SIZE 27–1021 and COUNT 1–255")
        }
        return (size, count)
    }

    func run() throws {
        var config = SimConfig()
        config.airTime = airTime
        config.link = link
        (config.aclBufferSize, config.aclBufferCount) = try Self.parseBuffers(aclBuffers)
        let tcp = try self.tcp.map(Self.parseTCP)
        let paths = DaemonPaths(runtimeDir: dir, stateDir: dir)
        let count = controllers
        let seed = self.seed
        var daemon: SimDaemon?
        let status = runDaemon({
            try DaemonHost(name: "berylsim", paths: paths, socketPath: "\(dir)/control.sock", logLevel: logLevel, timers: .microseconds)
        }) { host in
            daemon = try SimDaemon(host: host, air: SimAir(controllerCount: count, seed: seed, config: config), directory: dir, tcp: tcp,
                                   seed: seed)
        }
        withExtendedLifetime(daemon) {}
        throw ExitCode(status)
    }
}

extension LinkModel: ExpressibleByArgument {}

Berylsim.main()
