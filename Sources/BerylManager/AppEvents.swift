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

    public var description: String {
        switch self {
        case .couldNotStart(let reason): reason
        case .didNotRestore(let ids, let grace): "did not restore \(ids.joined(separator: ", ")) within \(grace)"
        case .exitedWithoutRestoring(let exit, let ids): "exited (\(exit)) without restoring \(ids.joined(separator: ", "))"
        }
    }
}
