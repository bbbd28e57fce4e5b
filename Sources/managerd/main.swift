import ArgumentParser
import BerylCore
import BerylDaemonKit
import BerylIPC
import FoundationEssentials
import Glibc

struct Managerd: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "managerd",
        abstract: "Beryl's manager daemon: the central and peripheral managers apps talk to.",
        version: Beryl.version)

    @OptionGroup var options: DaemonOptions

    @Option(help: "Where app manifests (*.json) are; /etc/beryl/apps when it exists.")
    var appsDir: String?

    @Option(help: "Seconds a foreground-only app stays in the background before it is suspended (a manifest may say otherwise).")
    var suspendAfter: Double = 5

    @Option(help: "Seconds a relaunched app has to re-create the managers it was launched to restore before it is ended and launched again.")
    var restoreGrace: Double = 15

    func validate() throws {
        guard (0...3600).contains(suspendAfter) else { throw ValidationError("--suspend-after must be in [0, 3600] seconds") }
        guard (0.1...3600).contains(restoreGrace) else { throw ValidationError("--restore-grace must be in [0.1, 3600] seconds") }
    }

    func run() throws {
        var daemon: ManagerDaemon?
        let status = runDaemon({ try DaemonHost(name: "managerd", paths: options.paths, logLevel: options.logLevel) }) { host in
            let directory = appsDir ?? (FileManager.default.fileExists(atPath: "/etc/beryl/apps") ? "/etc/beryl/apps" : nil)
            daemon = try ManagerDaemon(host: host, appsDir: directory, suspendAfter: suspendAfter, restoreGrace: restoreGrace)
        }
        withExtendedLifetime(daemon) {}
        throw ExitCode(status)
    }
}

Managerd.main()
