import ArgumentParser
import BerylIPC
import BerylSupervisor
import Foundation

/// `beryl app`: the apps managerd knows from their manifests, and their lifecycle (launch, terminate, quit, state).
struct AppCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "app",
        abstract: "List the apps declared by manifests, and launch, terminate, quit or force the state of one.",
        subcommands: [AppList.self, AppLaunch.self, AppTerminate.self, AppQuit.self, AppState.self])

    static func call(_ stack: StackOptions, _ build: (inout Beryl_Ipc_V1_ManagerRequest) -> Void) throws -> Beryl_Ipc_V1_AppList {
        var request = Request()
        build(&request.manager)
        do {
            return try IPCClient(path: stack.paths.socket("managerd")).call(request).manager.apps
        } catch IPCClientError.remote(_, let message, _, _) {
            throw Output.fail(message)
        } catch {
            throw Output.fail("cannot reach managerd in \(stack.paths.runtimeDir): \(error)")
        }
    }

    static func state(_ app: Beryl_Ipc_V1_AppInfo) -> String {
        switch app.state {
        case .foreground: "foreground"
        case .background: "background"
        case .suspended: "suspended"
        default: "not running"
        }
    }

    static func describe(_ app: Beryl_Ipc_V1_AppInfo) -> String {
        var line = "\(app.id)  " + (app.user.isEmpty ? "no manifest" : "user \(app.user)") + "  \(state(app))"
        if !app.pids.isEmpty { line += "  pids \(app.pids.map(String.init).joined(separator: ","))" }
        if !app.backgroundModes.isEmpty { line += "  modes \(app.backgroundModes.joined(separator: ","))" }
        if !app.preservedCentrals.isEmpty { line += "  preserved centrals \(app.preservedCentrals.joined(separator: ","))" }
        if !app.preservedPeripherals.isEmpty { line += "  preserved peripherals \(app.preservedPeripherals.joined(separator: ","))" }
        if app.queuedEvents > 0 { line += "  queued \(app.queuedEvents)" }
        if app.launches > 0 { line += "  launches \(app.launches)" }
        if !app.lastLaunchError.isEmpty { line += "  last launch: \(app.lastLaunchError)" }
        return line
    }

    static func launchFailure(_ kind: Beryl_Ipc_V1_LaunchFailureKind) -> Any {
        switch kind {
        case .none, .UNRECOGNIZED: NSNull()
        case .couldNotStart: "couldNotStart"
        case .didNotRestore: "didNotRestore"
        case .exitedWithoutRestoring: "exitedWithoutRestoring"
        }
    }

    static func object(_ app: Beryl_Ipc_V1_AppInfo) -> [String: Any] {
        ["id": app.id, "manifest": app.manifest, "user": app.user, "backgroundModes": app.backgroundModes, "launchable": app.launchable,
         "state": state(app), "pids": app.pids.map(Int.init),
         "preservedCentrals": app.preservedCentrals, "preservedPeripherals": app.preservedPeripherals,
         "queuedEvents": Int(app.queuedEvents), "launches": Int(app.launches), "lastLaunchError": app.lastLaunchError,
         "lastLaunchFailure": launchFailure(app.lastLaunchFailure), "lastLaunchUnrestored": app.lastLaunchUnrestored,
         "wakes": ["begun": Int(app.wakes), "endedIdle": Int(app.wakesEndedIdle), "overran": Int(app.wakesOverran)],
         "restorations": Int(app.restorations),
         "relaunches": ["endedUnrestored": Int(app.launchesEndedUnrestored), "backedOff": Int(app.launchesBackedOff),
                        "launchedBeforeReaped": Int(app.launchesBeforeReaped)]]
    }

    static func print(_ list: Beryl_Ipc_V1_AppList, json: Bool) {
        if json {
            let object: [String: Any] = ["apps": list.apps.map(object), "refused": list.refused]
            if let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) { Swift.print(String(decoding: data, as: UTF8.self)) }
            return
        }
        for app in list.apps { Swift.print(describe(app)) }
        for refusal in list.refused { Swift.print("refused: \(refusal)") }
    }
}

struct AppList: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "list", abstract: "The apps managerd loaded, their state and preserved managers; refused manifests.")
    @OptionGroup var stack: StackOptions
    @Flag(help: "One JSON object.") var json = false
    func run() throws { AppCommand.print(try AppCommand.call(stack) { $0.listApps = .init() }, json: json) }
}

struct AppLaunch: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "launch", abstract: "Launch an app through managerd, exactly as a relaunch would.")
    @OptionGroup var stack: StackOptions
    @Argument(help: "The app id.") var app: String
    @Flag(help: "One JSON object.") var json = false
    func run() throws { AppCommand.print(try AppCommand.call(stack) { $0.launchApp.appID = app }, json: json) }
}

struct AppTerminate: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "terminate", abstract: "A system termination: the app's processes end, its preserved state is kept.")
    @OptionGroup var stack: StackOptions
    @Argument(help: "The app id.") var app: String
    func run() throws { AppCommand.print(try AppCommand.call(stack) { $0.stopApp = .with { $0.appID = app } }, json: false) }
}

struct AppQuit: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "quit", abstract: "A user quit: the app's processes end and its preserved state is discarded.")
    @OptionGroup var stack: StackOptions
    @Argument(help: "The app id.") var app: String
    func run() throws { AppCommand.print(try AppCommand.call(stack) { $0.stopApp = .with { $0.appID = app; $0.userQuit = true } }, json: false) }
}

struct AppState: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "state", abstract: "Force an app's lifecycle state (labs, tests).")
    @OptionGroup var stack: StackOptions
    @Argument(help: "The app id.") var app: String
    @Argument(help: "foreground, background or suspended.") var state: String

    func validate() throws {
        guard ["foreground", "background", "suspended"].contains(state) else { throw ValidationError("the state is foreground, background or suspended") }
    }

    func run() throws {
        let lifecycle: Beryl_Ipc_V1_AppLifecycle = state == "foreground" ? .foreground : state == "background" ? .background : .suspended
        AppCommand.print(try AppCommand.call(stack) { $0.setAppState = .with { $0.appID = app; $0.state = lifecycle } }, json: false)
    }
}

/// `beryl alerts`: the alerts managerd raises for suspended apps (connection options' notifyOn*), one per line.
struct Alerts: ParsableCommand {
    static func alertKind(_ kind: Beryl_Ipc_V1_AlertKind) -> String {
        switch kind {
        case .connection: "connection"
        case .disconnection: "disconnection"
        case .notification: "notification"
        case .unspecified, .UNRECOGNIZED: "unknown"
        }
    }

    static let configuration = CommandConfiguration(abstract: "Print the alerts managerd raises for suspended apps, until stopped (or --count).")
    @OptionGroup var stack: StackOptions
    @Option(help: "Stop after this many alerts.") var count: Int?
    @Flag(help: "One JSON object per line.") var json = false

    func validate() throws {
        if let count, count < 1 { throw ValidationError("--count must be at least 1") }
    }

    func run() throws {
        let client: IPCClient
        do {
            client = try IPCClient(path: stack.paths.socket("managerd"))
            var subscribe = Request()
            subscribe.manager.subscribeAlerts = .init()
            _ = try client.call(subscribe)
        } catch {
            throw Output.fail("cannot reach managerd in \(stack.paths.runtimeDir): \(error)")
        }
        var seen = 0
        while seen < (count ?? .max) {
            let envelope: Envelope
            switch Result(catching: { () throws(IPCClientError) -> Envelope in try client.receive(timeout: .seconds(1)) }) {
            case .success(let received): envelope = received
            case .failure(.timedOut): continue
            case .failure(let error): throw Output.fail("managerd went away: \(error)")
            }
            guard case .alert(let alert)? = envelope.event.manager.kind else { continue }
            seen += 1
            let line: String
            if json, let data = try? JSONSerialization.data(withJSONObject: ["app": alert.appID, "kind": Self.alertKind(alert.kind), "peripheral": alert.peripheral,
                                                                               "message": alert.message], options: [.sortedKeys]) {
                line = String(decoding: data, as: UTF8.self)
            } else {
                line = alert.message
            }
            Console.out(line + "\n")
        }
    }
}
