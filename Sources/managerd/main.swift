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
        let status = runDaemon({ try DaemonHost(name: "managerd", paths: options.paths, logLevel: options.logLevel) }) { host in
            // Apps connect here under their own uid; identity comes from SO_PEERCRED.
            host.socketMode = 0o666
            host.handle = { incoming in
                guard case .manager(let request)? = incoming.request.kind, let session = incoming.session else { return false }
                switch request.kind {
                case .hello?:
                    var welcome = Beryl_Ipc_V1_Welcome()
                    welcome.sessionID = session.id
                    welcome.peerPid = session.peer.pid
                    welcome.peerUid = session.peer.uid
                    var response = Response()
                    response.manager.welcome = welcome
                    incoming.respond(response)
                case nil:
                    incoming.fail(.unknownMessage, "empty manager request")
                }
                return true
            }
        }
        throw ExitCode(status)
    }
}

Managerd.main()
