import ArgumentParser
import BerylCore
import BerylDaemonKit
import BerylIPC
import BerylSMP

extension IOCapability: ExpressibleByArgument {
    public init?(argument: String) { self.init(name: argument) }
    public static var allValueStrings: [String] { allCases.map(\.description) }
}

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

    @Option(help: "What this stack's user can do in pairing: display-only, display-yes-no, keyboard-only, no-input-no-output, keyboard-display.")
    var ioCapability: IOCapability = .noInputNoOutput

    @Flag(help: "Refuse pairing without MITM protection (Just Works).")
    var requireMitm = false

    @Flag(help: "Refuse LE legacy pairing (Secure Connections Only mode).")
    var secureConnectionsOnly = false

    @Flag(help: "Pair without LE Secure Connections, as a pre-4.2 device would (for testing peers' legacy pairing).")
    var legacyPairing = false

    @Flag(help: "Pair without bonding: keys last only for the connection.")
    var noBonding = false

    @Flag(help: "Accept numeric comparisons without asking (for labs); passkeys are still shown or asked for.")
    var autoAccept = false

    func validate() throws {
        guard !(secureConnectionsOnly && legacyPairing) else { throw ValidationError("--secure-connections-only and --legacy-pairing contradict each other") }
        guard !deviceName.isEmpty, deviceName.utf8.count <= 248 else { throw ValidationError("--device-name must be 1 to 248 bytes") }
        guard (23...517).contains(mtu) else { throw ValidationError("--mtu must be from 23 to 517") }
        guard answerTimeout > 0, answerTimeout <= 30 else { throw ValidationError("--answer-timeout must be in (0, 30] seconds") }
    }

    func run() throws {
        var daemon: AttDaemon?
        let status = runDaemon({ try DaemonHost(name: "attd", paths: options.paths, logLevel: options.logLevel) }) { host in
            let security = SecurityConfiguration(ioCapability: ioCapability, bondable: !noBonding, requireMITM: requireMitm,
                                                 secureConnectionsOnly: secureConnectionsOnly, secureConnections: !legacyPairing)
            daemon = try AttDaemon(host: host, deviceName: deviceName, serverMTU: mtu, answerTimeout: .milliseconds(Int(answerTimeout * 1000)),
                                   security: security, autoAccept: autoAccept)
        }
        withExtendedLifetime(daemon) {}
        throw ExitCode(status)
    }
}

Attd.main()
