import BerylCore
import BerylDaemonKit
import BerylIPC
import BerylManager
import BerylManagerWire
import FoundationEssentials
import Glibc

/// The shell of BerylManager's AppLifecycle: it applies what a state change means to scans, advertising and held
/// events, runs alerts, and ends an app that overran its wake. The rules are the core's.
extension ManagerDaemon {
    func lifecycle(of appID: String) -> LifecycleState { core.lifecycle(of: appID) }

    /// An app's state changes, reported by the app or forced by `beryl app state`.
    func setLifecycle(_ appID: String, _ state: LifecycleState, reason: String) {
        let (change, outputs) = core.setLifecycle(appID, state, at: host.loop.uptime)
        if change.current != change.previous { host.logger.info("\(appID) is \(change.current.rawValue) (\(reason))") }
        apply(outputs)
    }

    // MARK: Events for apps

    /// Stamps the event with its wake number, or holds it (with an alert when the app asked for one) or drops it
    /// while the app is suspended. False when the event should not go out now.
    func admit(_ event: inout Beryl_Ipc_V1_ManagerEvent, for sessionID: UInt64) -> Bool {
        let disposition = core.admit(event, as: AppLifecycle.EventClass(event), replacing: event.heldKey, for: sessionID,
                                     at: host.loop.uptime)
        logWakes()
        switch disposition {
        case nil:
            return true
        case .deliver(let wake)?:
            event.wake = wake
            return true
        case .hold?:
            if let alert = core.alert(AlertKind.candidate(for: event), heldFor: sessionID, name: { store?.device($0)?.name }) {
                raise(alert, heldForUID: session(sessionID)?.peer.uid)
            }
            return false
        case .drop?:
            return false
        }
    }

    /// What was held for a session while its app was suspended goes out, in order, as it was held.
    func deliver(_ events: [Beryl_Ipc_V1_ManagerEvent], to sessionID: UInt64) {
        guard let live = session(sessionID) else { return }
        host.logger.info("\(core.sessions[sessionID]?.appID ?? "?"): \(events.count) held event(s) delivered")
        for event in events {
            var envelope = Event()
            envelope.manager = event
            live.send(.event(envelope))
        }
    }

    // MARK: Alerts

    /// `heldForUID`: the user of the session the alert's event was held for (the app's own user, not whoever else says
    /// Hello under its id).
    private func raise(_ alert: AppAlert, heldForUID: UInt32?) {
        host.logger.warning("alert: \(alert.message)")
        let event = Beryl_Ipc_V1_ManagerEvent(alert: alert.kind, appID: alert.appID, message: alert.message, peripheral: alert.peripheral)
        for (subscriber, uid) in alertSubscribers where core.mayHearAlerts(of: alert.appID, uid: uid, managerdUID: getuid(), heldFor: heldForUID) {
            send(event, to: subscriber)
        }
        guard let command = alert.command, let manifest = alert.manifest else { return }
        do {
            _ = try Spawn.start(command, environment: alert.environment, logPath: host.paths.logDir + "/alerts-\(alert.appID).log",
                                uid: manifest.uid, gid: manifest.gid, user: manifest.user)
        } catch {
            host.logger.error("alert command of \(alert.appID) failed: \(error)")
        }
    }

    // MARK: Wakes and deadlines

    func logWakes() {
        let begun = core.life.takeWakesBegun()
        for wake in begun { host.logger.info("\(wake.app) woken in the background (budget \(wake.budget))") }
        if !begun.isEmpty { armDeadline() }
    }

    /// iOS ends a background app that overruns its wake; its preserved managers then launch it again for their next
    /// event, so nothing waits on a process that stopped answering.
    func endOverrunningApp(_ appID: String) {
        let pids = processes(of: appID)
        let budget = core.catalog.apps[appID]?.wakeBudget ?? 0
        host.logger.warning("\(appID) overran its \(budget) s background budget; ending it (pids \(pids.sorted())); its next event wakes it again")
        ProcessEnding(grace: .seconds(2)).end(pids, on: host.loop, look: { [unowned self] in reapEndedApps() })
    }
}
