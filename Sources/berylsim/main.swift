import ArgumentParser
import BerylCore
import BerylDaemonKit
import BerylIPC

struct Berylsim: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "berylsim",
        abstract: "Beryl's simulated LE radio: N virtual controllers on one air, served as H4.",
        version: Beryl.version)

    @Option(help: "Number of virtual controllers.")
    var controllers: Int = 2

    @Option(help: "Directory for controller-<i>.sock and control.sock.")
    var dir: String

    @Option(help: "Seed for addresses and fault randomness, so runs reproduce.")
    var seed: UInt64 = 1

    @Option(help: "Log level: error, warning, info, debug or trace.")
    var logLevel: LogLevel = .info

    func validate() throws {
        guard (1...64).contains(controllers) else { throw ValidationError("--controllers must be from 1 to 64") }
    }

    func run() throws {
        let paths = DaemonPaths(runtimeDir: dir, stateDir: dir)
        let status = runDaemon({
            try DaemonHost(name: "berylsim", paths: paths, socketPath: "\(dir)/control.sock", logLevel: logLevel)
        })
        throw ExitCode(status)
    }
}

Berylsim.main()
