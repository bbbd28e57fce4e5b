import ArgumentParser
import BerylCore
import BerylDaemonKit
import BerylIPC

struct Managerd: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "managerd",
        abstract: "Beryl's manager daemon: the central and peripheral managers apps talk to.",
        version: Beryl.version)

    @OptionGroup var options: DaemonOptions

    func run() throws {
        var daemon: ManagerDaemon?
        let status = runDaemon({ try DaemonHost(name: "managerd", paths: options.paths, logLevel: options.logLevel) }) { host in
            daemon = try ManagerDaemon(host: host)
        }
        withExtendedLifetime(daemon) {}
        throw ExitCode(status)
    }
}

Managerd.main()
