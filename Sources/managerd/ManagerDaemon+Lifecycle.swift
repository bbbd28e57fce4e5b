import BerylCore
import BerylHCI
import BerylIPC
import BerylManager
import BerylStack
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Foreground, background and suspended: what each app's managers may do (Core Bluetooth's background execution
/// rules), queued events for suspended apps, alerts, and the budget of a woken app.
extension ManagerDaemon {
    func lifecycle(of appID: String) -> LifecycleState {
        guard !appID.isEmpty else { return .foreground }
        switch apps[appID]?.state ?? .notRunning {
        case .background: return .background
        case .suspended: return .suspended
        case .notRunning: return sessionsOf(appID).isEmpty ? .notRunning : .foreground
        default: return .foreground
        }
    }

    func policy(forSession id: UInt64) -> LifecyclePolicy {
        guard let app = session(id)?.context as? AppSession else {
            // A preserved manager whose app is not running works as its background modes allow.
            if let preserved = preservedManagers.first(where: { $0.session == id && !$0.live }) {
                return .of(.notRunning, modes: catalog.apps[preserved.appID]?.backgroundModes ?? [])
            }
            return .of(.foreground, modes: [])
        }
        return .of(lifecycle(of: app.appID), modes: catalog.apps[app.appID]?.backgroundModes ?? [])
    }

    /// An app's state changes (reported by the app, forced by `beryl app state`, or by a timer).
    func setLifecycle(_ appID: String, _ state: Beryl_Ipc_V1_AppLifecycle, reason: String) {
        let previous = lifecycle(of: appID)
        var runtime = apps[appID, default: AppRuntime()]
        runtime.state = state
        runtime.wokenAt = nil
        runtime.suspensionTimer?.cancel()
        runtime.suspensionTimer = nil
        apps[appID] = runtime
        let now = lifecycle(of: appID)
        if now != previous { host.logger.info("\(appID) is \(now.rawValue) (\(reason))") }
        let modes = catalog.apps[appID]?.backgroundModes ?? []
        if now == .background, modes.isEmpty {
            // Foreground-only: suspended a few seconds after going to the background.
            let delay = catalog.apps[appID]?.suspendAfter ?? defaultSuspendAfter
            apps[appID]?.suspensionTimer = try? host.loop.after(.milliseconds(Int(delay * 1000))) { [unowned self] in
                guard self.lifecycle(of: appID) == .background else { return }
                self.setLifecycle(appID, .suspended, reason: "foreground-only, \(delay) s in the background")
            }
        }
        applyLifecycle(appID)
        if now == .foreground || (now == .background && previous == .suspended) { deliverHeld(appID) }
    }

    /// Re-applies every rule that depends on app states: which scans run (and how), who advertises (and how).
    func applyLifecycle(_ appID: String) {
        for live in sessionsOf(appID) { applyScanPolicy(live.id) }
        updateScanning()
        updateAdvertising()
    }

    /// Whether the session's scans run, and whether their duplicates are coalesced, by its app's state now.
    func applyScanPolicy(_ session: UInt64) {
        let policy = policy(forSession: session)
        if policy.scans { scans.paused.remove(session) } else { scans.paused.insert(session) }
        if policy.coalesceDuplicates { scans.coalesced.insert(session) } else { scans.coalesced.remove(session) }
    }


    /// Every scanner in the background: the slow interval (1.28 s, 30 ms window), as iOS scans for background apps.
    var scanIsSlow: Bool {
        let scanners = scans.scanners
        return !scanners.isEmpty && scanners.allSatisfy { policy(forSession: $0.session).slowScan }
    }

    // MARK: Held events

    /// An event for a session whose app may not take it now: held (coalesced, bounded) until it returns, with an
    /// alert when the app asked for one. False when the event should go out at once.
    func holdIfSuspended(_ event: Beryl_Ipc_V1_ManagerEvent, for sessionID: UInt64) -> Bool {
        guard let app = session(sessionID)?.context as? AppSession, !app.appID.isEmpty else { return false }
        let policy = policy(forSession: sessionID)
        if policy.deliversEvents {
            noteWake(app.appID, by: event)
            return false
        }
        switch event.kind {
        case .pairingPrompt?, .readyToUpdate?, .readyToWrite?:
            return true  // nothing to answer later
        default:
            break
        }
        alertIfAsked(event, app: app)
        app.held.hold(event)
        return true
    }

    func deliverHeld(_ appID: String) {
        for live in sessionsOf(appID) {
            guard let app = live.context as? AppSession, app.held.count > 0 else { continue }
            let events = app.held.drain()
            host.logger.info("\(appID): \(events.count) held event(s) delivered")
            for event in events {
                var envelope = Event()
                envelope.manager = event
                live.send(.event(envelope))
            }
        }
    }

    // MARK: Alerts

    private func alertIfAsked(_ event: Beryl_Ipc_V1_ManagerEvent, app: AppSession) {
        let alert: (kind: String, peripheral: String)?
        switch event.kind {
        case .connected(let connected)? where app.connectOptions[connected.peripheral]?.notifyOnConnection == true:
            alert = ("connection", connected.peripheral)
        case .disconnected(let disconnected)? where app.connectOptions[disconnected.peripheral]?.notifyOnDisconnection == true:
            alert = ("disconnection", disconnected.peripheral)
        case .notification(let notification)? where app.connectOptions[notification.peripheral]?.notifyOnNotification == true:
            alert = ("notification", notification.peripheral)
        default:
            alert = nil
        }
        guard let alert else { return }
        let name = store?.device(alert.peripheral)?.name ?? alert.peripheral
        let message = "\(app.appID): \(alert.kind) \(alert.kind == "notification" ? "from" : "of") \(name)"
        host.logger.warning("alert: \(message)")
        var event = Beryl_Ipc_V1_ManagerEvent()
        event.alert = .with { $0.appID = app.appID; $0.message = message; $0.kind = alert.kind; $0.peripheral = alert.peripheral }
        for subscriber in alertSubscribers { send(event, to: subscriber) }
        if let manifest = catalog.apps[app.appID], let command = manifest.alertCommand {
            do {
                _ = try Spawn.start(command + [message], environment: ["PATH": "/usr/bin:/bin", "BERYL_APP_ID": app.appID, "BERYL_ALERT": alert.kind],
                                    logPath: host.paths.logDir + "/alerts-\(app.appID).log", uid: manifest.uid, gid: manifest.gid)
            } catch {
                host.logger.error("alert command of \(app.appID) failed: \(error)")
            }
        }
    }

    // MARK: Wake budget

    /// An event reaching an app in the background with a background mode wakes it: it has its budget to handle the
    /// event and report idle (by saying background again); one that overruns is suspended.
    private func noteWake(_ appID: String, by event: Beryl_Ipc_V1_ManagerEvent) {
        guard lifecycle(of: appID) == .background, let manifest = catalog.apps[appID], !manifest.backgroundModes.isEmpty,
              apps[appID]?.wokenAt == nil else { return }
        switch event.kind {
        // Pairing's outcome is news of what the stack did, with no delegate call an app must make; it cannot report
        // idle for an event it may have no callback for.
        case .stateChanged?, .readyToUpdate?, .readyToWrite?, .pairingFinished?: return
        default: break
        }
        let woken = ContinuousClock.now
        apps[appID]?.wokenAt = woken
        _ = try? host.loop.after(.milliseconds(Int(manifest.wakeBudget * 1000))) { [unowned self] in
            guard self.apps[appID]?.wokenAt == woken, self.lifecycle(of: appID) == .background else { return }
            self.host.logger.warning("\(appID) overran its \(manifest.wakeBudget) s background budget without reporting idle; suspending it")
            self.setLifecycle(appID, .suspended, reason: "overran its wake budget")
        }
    }
}
