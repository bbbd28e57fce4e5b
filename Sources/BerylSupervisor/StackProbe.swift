import BerylDaemonKit
import BerylHCI
import BerylIPC
import Foundation

/// What `beryl status` reports about one daemon.
public struct DaemonReport: Codable, Sendable, Equatable {
    public var name: String
    public var socket: String
    public var pid: Int32?
    public var state: String
    public var restarts: UInt32?
    public var lastExit: String?
    public var rssBytes: UInt64?
    public var uptimeMs: UInt64?
    /// The stack's daemons this one is attached to (attd to hcid once subscribed; managerd to hcid and attd).
    public var attachedTo: [String]?
}

/// The controller as hcid sees it.
public struct ControllerReport: Codable, Sendable, Equatable {
    public var state: String
    public var transport: String
    public var profile: String
    public var address: String?
    public var leAclMtu: UInt32?
    public var leAclBuffers: UInt32?
    public var aclBufferSource: String?
    public var filterAcceptListSize: UInt32?
    public var detail: String?
    /// Tuning opcodes hcid stopped sending on its own because the controller left them unanswered while it went on sending.
    public var unansweredCommands: [UInt32]
    /// How many times the controller fell silent since hcid started (however many resets each silence took).
    public var timesUnresponsive: UInt32
    /// How many times the controller confirmed LE Create Connection Cancel, never completed it, and was reset for it.
    public var cancelsNeverCompleted: UInt32

    init(_ info: Beryl_Ipc_V1_ControllerInfo) {
        state = StackProbe.controllerStateName(info.state)
        transport = info.transport
        profile = info.profile
        let on = info.state == .poweredOn
        address = on ? info.address : nil
        leAclMtu = on ? info.leAclMtu : nil
        leAclBuffers = on ? info.leAclBuffers : nil
        aclBufferSource = on ? info.aclBufferSource : nil
        filterAcceptListSize = on ? info.filterAcceptListSize : nil
        detail = info.detail.isEmpty ? nil : info.detail
        unansweredCommands = info.unansweredCommands
        timesUnresponsive = info.timesUnresponsive
        cancelsNeverCompleted = info.cancelsNeverCompleted
    }
}

public struct StackReport: Codable, Sendable, Equatable {
    public var runtimeDir: String
    public var supervisorPid: Int32?
    public var daemons: [DaemonReport]
    public var controller: ControllerReport?

    public var isUp: Bool { daemons.contains { $0.state == "running" } }
}

public enum StackProbe {
    public static let daemonNames = ["hcid", "attd", "managerd"]

    public static func status(at path: String, timeout: Duration = .seconds(2)) -> Beryl_Ipc_V1_Status? {
        guard let client = try? IPCClient(path: path) else { return nil }
        var request = Request()
        request.getStatus = Beryl_Ipc_V1_GetStatus()
        return try? client.call(request, timeout: timeout).status
    }

    /// Asks the supervisor (if any) and every daemon; a daemon that does not answer is reported as such.
    public static func report(paths: DaemonPaths) -> StackReport {
        let supervisor = status(at: paths.socket(Supervisor.socketName))
        let children = Dictionary(uniqueKeysWithValues: (supervisor?.children ?? []).map { ($0.name, $0) })
        let daemons = daemonNames.map { name -> DaemonReport in
            let socket = paths.socket(name)
            let child = children[name]
            var report = DaemonReport(name: name, socket: socket, pid: nil, state: "not running",
                                      restarts: child?.restarts, lastExit: child.flatMap { $0.lastExit.isEmpty ? nil : $0.lastExit })
            if let child, child.state == .restarting { report.state = "restarting" }
            if let live = status(at: socket) {
                report.pid = live.pid
                report.state = stateName(live.state)
                report.rssBytes = live.rssBytes
                report.uptimeMs = live.uptimeMs
                report.attachedTo = live.attachedTo
            }
            return report
        }
        return StackReport(runtimeDir: paths.runtimeDir, supervisorPid: supervisor?.pid, daemons: daemons,
                           controller: controllerInfo(at: paths.socket("hcid")).map(ControllerReport.init))
    }

    public static func controllerInfo(at path: String, timeout: Duration = .seconds(2)) -> Beryl_Ipc_V1_ControllerInfo? {
        guard let client = try? IPCClient(path: path) else { return nil }
        var request = Request()
        request.hci.getControllerInfo = Beryl_Ipc_V1_GetControllerInfo()
        return try? client.call(request, timeout: timeout).hci.controllerInfo
    }

    public static func controllerStateName(_ state: Beryl_Ipc_V1_ControllerState) -> String {
        switch state {
        case .unknown, .UNRECOGNIZED: "unknown"
        case .resetting: "resetting"
        case .unsupported: "unsupported"
        case .unauthorized: "unauthorized"
        case .poweredOff: "poweredOff"
        case .poweredOn: "poweredOn"
        case .unresponsive: "unresponsive"
        }
    }

    public static func stateName(_ state: Beryl_Ipc_V1_DaemonState) -> String {
        switch state {
        case .starting: "starting"
        case .running: "running"
        case .stopping: "stopping"
        case .restarting: "restarting"
        case .stopped: "stopped"
        case .unspecified, .UNRECOGNIZED: "unknown"
        }
    }
}
