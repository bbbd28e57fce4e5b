import ArgumentParser
import BerylDaemonKit
import BerylIPC
import BerylPandora
import Dispatch
import Foundation
import Synchronization
import GRPCCore
import GRPCNIOTransportHTTP2Posix
#if canImport(Glibc)
import Glibc
#endif

/// Makes this board a Pandora device for device labs: Google's bt-test-interfaces over gRPC, served from a lab session
/// on managerd. Pandora has no authentication: it listens on loopback unless --listen says otherwise.
@main
struct BerylPandoraCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "beryl-pandora",
        abstract: "Serve the Pandora gRPC interfaces (pandora.Host, Security, SecurityStorage, L2CAP) for device labs.")

    @Option(help: "Directory of managerd's socket (default: $BERYL_RUNTIME_DIR or /run/beryl).")
    var runtimeDir: String?

    @Option(help: "Port on 127.0.0.1.")
    var port: Int = 8999

    @Option(help: "HOST:PORT to listen on instead, to serve a lab network (Pandora has no authentication).")
    var listen: String?

    @Option(help: "The name include_*_local_name advertises.")
    var name: String = "Beryl"

    @Option(help: "Seconds to wait for managerd's socket at start.")
    var waitForStack: Double = 30

    func validate() throws {
        guard (1...65535).contains(port) else { throw ValidationError("--port must be 1 to 65535, not \(port)") }
        if let listen, parseListen(listen) == nil { throw ValidationError("--listen must be HOST:PORT (IPv4 or [IPv6]), not '\(listen)'") }
        guard waitForStack >= 0 else { throw ValidationError("--wait-for-stack must not be negative") }
    }

    func run() async throws {
        let paths = DaemonPaths.resolve(runtimeDir: runtimeDir, stateDir: nil)
        let lab = try await openLab(socket: paths.socket("managerd"))
        let (host, port) = listen.flatMap(parseListen) ?? ("127.0.0.1", self.port)
        let address = host.contains(":") ? SocketAddress.ipv6(host: host, port: port) : SocketAddress.ipv4(host: host, port: port)
        let transport = HTTP2ServerTransport.Posix(address: address, transportSecurity: .plaintext)
        let services = PandoraServices(lab: lab, deviceName: name)
        let server = GRPCServer(transport: transport, services: services.all)
        let stop = StopRequested()
        var signalSources: [any DispatchSourceSignal] = []
        for number in [SIGTERM, SIGINT] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler {
                stop.set()
                server.beginGracefulShutdown()
            }
            source.resume()
            signalSources.append(source)
        }
        try await withThrowingDiscardingTaskGroup { group in
            group.addTask {
                try await server.serve()
                lab.channel.close()  // ends the tasks below
            }
            group.addTask { await services.runPairingDesk() }
            let bound = try await transport.listeningAddress
            // Unbuffered: a supervisor or a test waits for this line.
            FileHandle.standardOutput.write(Data("beryl-pandora: serving Pandora on \(bound) (lab session \(lab.welcome.sessionID), controller \(lab.welcome.publicAddress))\n".utf8))
            // The stack going away ends the lab session: stop, so that a supervisor starts a fresh one.
            group.addTask {
                for await _ in lab.channel.events() {}
                if lab.channel.closedReason != nil {
                    FileHandle.standardError.write(Data("beryl-pandora: \(lab.channel.closedReason ?? "") ; stopping\n".utf8))
                    server.beginGracefulShutdown()
                }
            }
        }
        for source in signalSources { source.cancel() }
        if lab.channel.closedReason != nil, !stop.isSet { throw ExitCode(75) }  // EX_TEMPFAIL: managerd went away
    }

    private func openLab(socket: String) async throws -> LabClient {
        let deadline = Date().addingTimeInterval(waitForStack)
        while true {
            do {
                return try await LabClient.open(socketPath: socket)
            } catch .connect(let error) where Date() < deadline {
                _ = error
                try await Task.sleep(for: .milliseconds(200))
            } catch {
                FileHandle.standardError.write(Data("beryl-pandora: cannot open a lab session on \(socket): \(error)\n".utf8))
                throw ExitCode(error.isPermissionDenied ? 77 : 69)  // EX_NOPERM, EX_UNAVAILABLE
            }
        }
    }
}

extension IPCClientError {
    var isPermissionDenied: Bool {
        if case .remote(.permissionDenied, _, _, _) = self { return true }
        return false
    }
}

func parseListen(_ text: String) -> (String, Int)? {
    guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]), (1...65535).contains(port) else { return nil }
    var host = String(text[..<colon])
    if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
    return host.isEmpty ? nil : (host, port)
}

/// Set once SIGTERM or SIGINT asked the server to stop.
final class StopRequested: Sendable {
    private let flag = Mutex(false)
    var isSet: Bool { flag.withLock { $0 } }
    func set() { flag.withLock { $0 = true } }
}
