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

    func run() throws {
        let status = runDaemon({ try DaemonHost(name: "attd", paths: options.paths, logLevel: options.logLevel) }) { host in
            host.handle = { incoming in
                guard case .att(let request)? = incoming.request.kind else { return false }
                switch request.kind {
                case .getBearers?:
                    // No link carries ATT until hcid delivers connections.
                    var response = Response()
                    response.att.bearers = Beryl_Ipc_V1_Bearers()
                    incoming.respond(response)
                case nil:
                    incoming.fail(.unknownMessage, "empty ATT request")
                }
                return true
            }
        }
        throw ExitCode(status)
    }
}

Attd.main()
