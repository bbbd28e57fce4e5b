import ArgumentParser
import BerylCore
import BerylDaemonKit
import BerylIPC

struct Attd: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "attd",
        abstract: "Beryl's ATT daemon: L2CAP, ATT, GATT server and client, SMP.",
        version: Beryl.version)

    @OptionGroup var options: DaemonOptions

    @Option(help: "The GAP Device Name this stack's GATT server shows.")
    var deviceName: String = "Beryl"

    @Option(help: "The ATT MTU this server offers in an MTU exchange (23 to 517).")
    var mtu: UInt16 = 517

    @Option(help: "Seconds a publisher has to answer a remote read or write before the peer gets an error.")
    var answerTimeout: Double = 5

    func validate() throws {
        guard !deviceName.isEmpty, deviceName.utf8.count <= 248 else { throw ValidationError("--device-name must be 1 to 248 bytes") }
        guard (23...517).contains(mtu) else { throw ValidationError("--mtu must be from 23 to 517") }
        guard answerTimeout > 0, answerTimeout <= 30 else { throw ValidationError("--answer-timeout must be in (0, 30] seconds") }
    }

    func run() throws {
        var daemon: AttDaemon?
        let status = runDaemon({ try DaemonHost(name: "attd", paths: options.paths, logLevel: options.logLevel) }) { host in
            daemon = try AttDaemon(host: host, deviceName: deviceName, serverMTU: mtu, answerTimeout: .milliseconds(Int(answerTimeout * 1000)))
        }
        withExtendedLifetime(daemon) {}
        throw ExitCode(status)
    }
}

Attd.main()
