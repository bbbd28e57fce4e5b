import ArgumentParser
import BerylCore
import BerylDaemonKit
import BerylIPC
import BerylTransport

struct Hcid: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "hcid",
        abstract: "Beryl's HCI transport daemon: owns one controller.",
        version: Beryl.version)

    @OptionGroup var options: DaemonOptions

    @Option(help: "The controller: userchannel:hciN, uart:/dev/TTY[,baud=N][,flow|noflow], tcp:HOST:PORT or unix:PATH.")
    var transport: String

    func validate() throws {
        do { _ = try TransportSpec(parsing: transport) } catch { throw ValidationError(error.description) }
    }

    func run() throws {
        let transport = try TransportSpec(parsing: self.transport)
        let status = runDaemon({ try DaemonHost(name: "hcid", paths: options.paths, logLevel: options.logLevel) }) { host in
            host.handle = { incoming in
                guard case .hci(let request)? = incoming.request.kind else { return false }
                switch request.kind {
                case .getControllerInfo?:
                    var info = Beryl_Ipc_V1_ControllerInfo()
                    // Bring-up of the controller behind the transport is the hcid issue's work; until then it is not opened.
                    info.state = .unknown
                    info.transport = transport.description
                    info.detail = "transport not opened"
                    var response = Response()
                    response.hci.controllerInfo = info
                    incoming.respond(response)
                case nil:
                    incoming.fail(.unknownMessage, "empty HCI request")
                }
                return true
            }
        }
        throw ExitCode(status)
    }
}

Hcid.main()
