import ArgumentParser
import BerylCore
import BerylDaemonKit
import BerylIPC
import Foundation

struct Managerd: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "managerd",
        abstract: "Beryl's manager daemon: the central and peripheral managers apps talk to.",
        version: Beryl.version)

    @OptionGroup var options: DaemonOptions

    @Option(help: "Where app manifests (*.json) are; /etc/beryl/apps when it exists.")
    var appsDir: String?

    func run() throws {
        var daemon: ManagerDaemon?
        let status = runDaemon({ try DaemonHost(name: "managerd", paths: options.paths, logLevel: options.logLevel) }) { host in
            let directory = appsDir ?? (FileManager.default.fileExists(atPath: "/etc/beryl/apps") ? "/etc/beryl/apps" : nil)
            daemon = try ManagerDaemon(host: host, appsDir: directory)
        }
        withExtendedLifetime(daemon) {}
        throw ExitCode(status)
    }
}

Managerd.main()
