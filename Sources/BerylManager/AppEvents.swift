/// Which connection option raised an alert for a suspended app (Core Bluetooth's notifyOnConnection,
/// notifyOnDisconnection and notifyOnNotification).
public enum AlertKind: String, Sendable, CaseIterable {
    case connection, disconnection, notification

    /// What people read, and the app's alert command receives as its argument.
    public func message(appID: String, peripheral name: String) -> String {
        "\(appID): \(rawValue) \(self == .notification ? "from" : "of") \(name)"
    }
}

/// Why managerd's last launch of an app did not give back the managers it was launched to restore.
public enum LaunchFailure: Equatable, Sendable, CustomStringConvertible {
    /// The process could not be started; `reason` is the system's.
    case couldNotStart(reason: String)
    /// It ran but made none of `restoreIDs` within the grace period, and was ended.
    case didNotRestore(restoreIDs: [String], within: Duration)
    /// It exited (`exit` says how) before it made them.
    case exitedWithoutRestoring(exit: String, restoreIDs: [String])

    /// The restore identifiers the launch was made to restore and did not.
    public var unrestored: [String] {
        switch self {
        case .couldNotStart: []
        case .didNotRestore(let ids, _), .exitedWithoutRestoring(_, let ids): ids
        }
    }

    public var description: String {
        switch self {
        case .couldNotStart(let reason): reason
        case .didNotRestore(let ids, let grace): "did not restore \(ids.joined(separator: ", ")) within \(grace)"
        case .exitedWithoutRestoring(let exit, let ids): "exited (\(exit)) without restoring \(ids.joined(separator: ", "))"
        }
    }
}

/// An alert an event raised for a suspended app that asked for it: what people read, and the app's alert command.
public struct AppAlert: Equatable, Sendable {
    public var kind: AlertKind
    public var appID: String
    public var peripheral: String
    public var message: String
    /// The manifest's alert command with the message as its last argument, run as the app's user; nil when it has none.
    public var command: [String]?
    public var manifest: AppManifest?

    /// The alert command's environment: a fixed PATH, not managerd's, and what the alert is.
    public var environment: [String: String] { ["PATH": "/usr/bin:/bin", "BERYL_APP_ID": appID, "BERYL_ALERT": kind.rawValue] }
}

extension ManagerCore {
    /// The alert an event held for a session raises: only one its connection's options asked for (Core Bluetooth's
    /// notifyOnConnection, notifyOnDisconnection and notifyOnNotification); `name` is the peripheral's, when known.
    public func alert(_ candidate: (kind: AlertKind, peripheral: String)?, heldFor session: UInt64, name: (String) -> String?) -> AppAlert? {
        guard let candidate, let app = sessions[session], app.connectOptions[candidate.peripheral]?.alerts(candidate.kind) == true else { return nil }
        let message = candidate.kind.message(appID: app.appID, peripheral: name(candidate.peripheral) ?? candidate.peripheral)
        let manifest = catalog.apps[app.appID]
        return AppAlert(kind: candidate.kind, appID: app.appID, peripheral: candidate.peripheral, message: message,
                        command: manifest?.alertCommand.map { $0 + [message] }, manifest: manifest)
    }
}
