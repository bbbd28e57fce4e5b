import ArgumentParser
import BerylCore
import BerylDaemonKit
import BerylSupervisor
import BerylTransport
import Foundation

struct Up: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Start hcid, attd and managerd for one controller and keep them running until `beryl down`.")

    @OptionGroup var stack: StackOptions

    @Option(help: "The controller: userchannel:hciN, uart:/dev/TTY[,baud=N][,flow|noflow], tcp:HOST:PORT or unix:PATH.")
    var transport: String

    @Option(help: "Adapter profile for hcid: an id, a file, auto or none.")
    var profile: String = "none"

    @Option(help: "Seconds to wait for the controller to be poweredOn.")
    var timeout: Int = 20

    @Option(help: "Log level for the daemons.")
    var logLevel: LogLevel = .info

    @Flag(help: "Print the stack's status as JSON.")
    var json = false

    @Option(help: "Pairing IO capability: display-only, display-yes-no, keyboard-only, no-input-no-output, keyboard-display.")
    var ioCapability: String?

    @Flag(help: "Accept pairing number comparisons without asking (labs).")
    var autoAccept = false

    @Flag(help: "Refuse pairing without MITM protection.")
    var requireMitm = false

    @Option(parsing: .unconditionalSingleValue, help: "One more argument for attd (repeatable), e.g. --attd-arg --legacy-pairing.")
    var attdArg: [String] = []

    @Option(help: "App manifests for managerd (default /etc/beryl/apps when it exists).")
    var appsDir: String?

    @Option(help: "Also run beryl-pandora (device labs' gRPC interfaces) on 127.0.0.1 at this port.")
    var pandoraPort: Int?

    var managerdArguments: [String] {
        appsDir.map { ["--apps-dir", URL(fileURLWithPath: $0).standardizedFileURL.path] } ?? []
    }

    var attdArguments: [String] {
        (ioCapability.map { ["--io-capability", $0] } ?? []) + (autoAccept ? ["--auto-accept"] : []) + (requireMitm ? ["--require-mitm"] : []) + attdArg
    }

    func validate() throws {
        do { _ = try TransportSpec(parsing: transport) } catch { throw ValidationError(error.description) }
        let known = ["display-only", "display-yes-no", "keyboard-only", "no-input-no-output", "keyboard-display"]
        if let ioCapability, !known.contains(ioCapability) {
            throw ValidationError("--io-capability must be one of \(known.joined(separator: ", "))")
        }
        if let pandoraPort, !(1...65535).contains(pandoraPort) { throw ValidationError("--pandora-port must be 1 to 65535, not \(pandoraPort)") }
    }

    func run() throws {
        do {
            let report = try StackControl.up(paths: stack.paths, transport: transport, profile: profile, logLevel: logLevel,
                                             attdArguments: attdArguments, managerdArguments: managerdArguments, pandoraPort: pandoraPort,
                                             timeout: .seconds(timeout))
            print(json ? Output.json(report) : Status.render(report))
        } catch {
            throw Output.fail("\(error)")
        }
    }
}

struct Supervise: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the supervisor in the foreground (what `beryl up` starts in the background).",
        shouldDisplay: false)

    @OptionGroup var stack: StackOptions

    @Option var transport: String

    @Option var profile: String = "none"

    @Option var logLevel: LogLevel = .info

    @Option(parsing: .unconditionalSingleValue) var attdArg: [String] = []

    @Option(parsing: .unconditionalSingleValue) var managerdArg: [String] = []

    @Option var pandoraPort: Int?

    func run() throws {
        let paths = stack.paths
        let supervisor: Supervisor
        do {
            supervisor = try Supervisor(paths: paths, daemons: StackControl.daemons(paths: paths, transport: transport, profile: profile, logLevel: logLevel,
                                                                                    attdArguments: attdArg, managerdArguments: managerdArg,
                                                                                    pandoraPort: pandoraPort),
                                        logLevel: logLevel)
        } catch {
            throw Output.fail("\(error)")
        }
        throw ExitCode(supervisor.run())
    }
}

struct Down: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Stop the stack in a runtime directory.")

    @OptionGroup var stack: StackOptions

    func run() throws {
        do {
            let stopped = try StackControl.down(paths: stack.paths)
            print(stopped.isEmpty ? "no stack running in \(stack.paths.runtimeDir)" : "stopped \(stack.paths.runtimeDir)")
        } catch {
            throw Output.fail("\(error)")
        }
    }
}
