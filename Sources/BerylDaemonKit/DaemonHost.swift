import BerylCore
import CBerylSys
import BerylEventLoop
import BerylIPC
import FoundationEssentials
import Glibc

/// The shell every daemon runs in: its socket, pid file, signals and the requests all daemons answer
/// (Ping, GetStatus, SetLogLevel). The daemon adds its own requests through `handle`.
public final class DaemonHost {
    public let name: String
    public let paths: DaemonPaths
    public let socketPath: String
    public let loop: EventLoop
    public let logger: Logger
    public private(set) var server: IPCServer?
    public private(set) var state: Beryl_Ipc_V1_DaemonState = .starting

    /// Takes a daemon-specific request and returns true, or returns false to have it refused as UNSUPPORTED.
    public var handle: (IncomingRequest) -> Bool = { _ in false }
    /// Sessions the daemon confines (attd's data channels): past Ping, everything they ask goes to `handle`, which
    /// decides; they neither read the daemon's status nor set its log level.
    public var confines: (UInt64) -> Bool = { _ in false }
    /// Lets the daemon add to its Status answer.
    public var decorateStatus: (inout Beryl_Ipc_V1_Status) -> Void = { _ in }
    /// Runs when the daemon stops, before the socket goes away.
    public var onShutdown: () -> Void = {}
    /// What SIGTERM/SIGINT do; by default `stop()`. A daemon with children to stop first replaces it.
    public var onTerminationSignal: (() -> Void)?
    public var limits: IPCLimits = .standard
    /// Permissions of the socket file; managerd opens its to every local user.
    public var socketMode: mode_t = 0o660

    /// The stack's daemons this one holds a working connection to (`markAttached`), for its status.
    public private(set) var attachedTo: Set<String> = []
    private var signalWatchers: [EventRegistration] = []
    private var wrotePidFile = false

    public init(name: String, paths: DaemonPaths, socketPath: String? = nil, logLevel: LogLevel,
                timers: EventLoop.TimerPrecision = .milliseconds) throws {
        self.name = name
        self.paths = paths
        self.socketPath = socketPath ?? paths.socket(name)
        loop = try EventLoop(timers: timers)
        logger = Logger(component: name, level: logLevel)
    }

    /// Creates the directories, claims the socket (refusing if a live daemon holds it) and the pid file.
    public func start() throws {
        beryl_ignore_sigpipe()
        try paths.createDirectories()
        let server = try IPCServer(loop: loop, path: socketPath, limits: limits, logger: logger, mode: socketMode)
        server.onRequest = { [unowned self] in self.dispatch($0) }
        self.server = server
        try writePidFile()
        for signalNumber in [SIGTERM, SIGINT] {
            signalWatchers.append(try loop.onSignal(signalNumber) { [unowned self] in
                self.logger.info("signal \(signalNumber): stopping")
                if let onTerminationSignal = self.onTerminationSignal { onTerminationSignal() } else { self.stop() }
            })
        }
        state = .running
        logger.info("\(name) \(Beryl.version) listening on \(socketPath)")
    }

    /// Runs the loop until stopped; returns the process exit status.
    public func run() -> Int32 {
        do {
            try loop.run()
        } catch {
            logger.error("event loop failed: \(error)")
            cleanUp()
            return 1
        }
        cleanUp()
        return 0
    }

    public func stop() {
        guard state != .stopping else { return }
        state = .stopping
        onShutdown()
        loop.stop()
    }

    private func cleanUp() {
        server?.shutdown()
        server = nil
        for watcher in signalWatchers { watcher.cancel() }
        signalWatchers.removeAll()
        if wrotePidFile { unlink(paths.pidFile(name)) }
        logger.info("\(name) stopped")
    }

    private func writePidFile() throws {
        let path = paths.pidFile(name)
        let temporary = path + ".tmp.\(getpid())"
        try "\(getpid())\n".write(toFile: temporary, atomically: false, encoding: .utf8)
        guard rename(temporary, path) == 0 else {
            unlink(temporary)
            throw PidFileError(path: path, errno: errno)
        }
        wrotePidFile = true
    }

    private func dispatch(_ incoming: IncomingRequest) {
        if let session = incoming.session, confines(session.id) {
            if case .ping? = incoming.request.kind {} else {
                if !handle(incoming) { incoming.fail(.unsupported, "\(name) does not serve \(Self.describe(incoming.request)) here") }
                return
            }
        }
        switch incoming.request.kind {
        case .ping(let ping)?:
            var pong = Beryl_Ipc_V1_Pong()
            pong.payload = ping.payload
            var response = Response()
            response.pong = pong
            incoming.respond(response)
        case .getStatus?:
            var response = Response()
            response.status = status()
            incoming.respond(response)
        case .setLogLevel(let request)?:
            guard request.level != .unspecified else {
                incoming.fail(.missingField, "SetLogLevel needs a level", field: "level")
                return
            }
            guard let level = LogLevel(rawValue: request.level.rawValue) else {
                incoming.fail(.invalidArgument, "unknown log level \(request.level.rawValue)", field: "level")
                return
            }
            logger.level = level
            var response = Response()
            response.ack = Beryl_Ipc_V1_Ack()
            incoming.respond(response)
        default:
            if !handle(incoming) {
                logger.debug("no handler took \(String(describing: incoming.request.kind))")
                incoming.fail(.unsupported, "\(name) does not serve \(Self.describe(incoming.request))")
            }
        }
    }

    public func status() -> Beryl_Ipc_V1_Status {
        var status = Beryl_Ipc_V1_Status()
        status.daemon = name
        status.version = Beryl.version
        status.pid = getpid()
        status.state = state
        status.uptimeMs = UInt64(loop.uptime.components.seconds * 1000 + loop.uptime.components.attoseconds / 1_000_000_000_000_000)
        status.rssBytes = ProcessStats.residentBytes(pid: getpid()) ?? 0
        status.sessions = UInt32(server?.sessions.count ?? 0)
        status.runtimeDir = paths.runtimeDir
        status.stateDir = paths.stateDir
        status.attachedTo = attachedTo.sorted()
        decorateStatus(&status)
        return status
    }

    static func describe(_ request: Request) -> String {
        switch request.kind {
        case .hci?: "HCI requests"
        case .att?: "ATT requests"
        case .manager?: "manager requests"
        case .sim?: "simulator control requests"
        default: "this request"
        }
    }
}

/// Runs a daemon's whole life and turns startup failures into a clear message and exit status.
public func runDaemon(_ host: () throws -> DaemonHost, configure: (DaemonHost) throws -> Void = { _ in }) -> Int32 {
    let daemon: DaemonHost
    do {
        daemon = try host()
        // configure may open databases in the state directory: it must exist first.
        try daemon.paths.createDirectories()
        try configure(daemon)
        try daemon.start()
    } catch {
        StandardError.write("error: \(error)\n")
        return 1
    }
    return daemon.run()
}

extension DaemonHost {
    /// The connection `attach(to:)` made to `daemon` works (subscribed, where this daemon subscribes): until it is lost,
    /// this daemon's status says it is attached.
    public func markAttached(_ daemon: String) { attachedTo.insert(daemon) }

    /// Connects to another of the stack's daemons, and again half a second after each failure or loss, for as long
    /// as this one runs (a daemon restarted by the supervisor comes back under the same socket). `attached` has each
    /// new connection, to subscribe on; `lost` says why the last one ended, before the next attempt.
    public func attach(to daemon: String, onEvent: @escaping (Event) -> Void, attached: @escaping (IPCConnection) -> Void,
                       lost: @escaping (String) -> Void) {
        let again = { [unowned self] in
            _ = try? loop.after(.milliseconds(500)) { [unowned self] in attach(to: daemon, onEvent: onEvent, attached: attached, lost: lost) }
        }
        do {
            let connection = try IPCConnection(loop: loop, path: paths.socket(daemon))
            connection.onEvent = onEvent
            connection.onClose = { [unowned self] reason in
                attachedTo.remove(daemon)
                lost(reason)
                again()
            }
            attached(connection)
        } catch {
            logger.debug("\(daemon) not reachable yet: \(error)")
            again()
        }
    }
}

/// The pid file could not be put in place (a rename that failed: a read-only or missing runtime directory).
public struct PidFileError: Error, CustomStringConvertible {
    public let path: String
    public let errno: Int32
    public var description: String { "cannot write the pid file \(path): \(String(cString: strerror(errno)))" }
}
