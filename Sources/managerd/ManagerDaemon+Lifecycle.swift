import BerylCore
import BerylDaemonKit
import BerylHCI
import BerylIPC
import BerylManager
import Foundation
import Glibc
#if canImport(Glibc)
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

    func policy(for holder: ManagerHolder) -> LifecyclePolicy {
        switch holder {
        case .session(let id): policy(forSession: id)
        case .preserved(let id):
            // A preserved manager whose app is not running works as its background modes allow.
            .of(.notRunning, modes: preservedManagers.first { $0.id == id }.flatMap { catalog.apps[$0.appID]?.backgroundModes } ?? [])
        }
    }

    func policy(forSession id: UInt64) -> LifecyclePolicy {
        guard let app = appSessions[id] else { return .of(.foreground, modes: []) }
        return .of(lifecycle(of: app.appID), modes: catalog.apps[app.appID]?.backgroundModes ?? [])
    }

    /// An app's state changes (reported by the app, forced by `beryl app state`, or by a timer).
    func setLifecycle(_ appID: String, _ state: Beryl_Ipc_V1_AppLifecycle, reason: String) {
        let previous = lifecycle(of: appID)
        var runtime = apps[appID, default: AppRuntime()]
        runtime.state = state
        runtime.suspensionTimer?.cancel()
        runtime.suspensionTimer = nil
        apps[appID] = runtime
        wakes.end(appID)
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
        if policy.scans { scans.paused.remove(.session(session)) } else { scans.paused.insert(.session(session)) }
        if policy.coalesceDuplicates { scans.coalesced.insert(.session(session)) } else { scans.coalesced.remove(.session(session)) }
    }


    /// Every scanner in the background: the slow interval (1.28 s, 30 ms window), as iOS scans for background apps.
    var scanIsSlow: Bool {
        let scanners = scans.scanners
        return !scanners.isEmpty && scanners.allSatisfy { policy(for: $0.holder).slowScan }
    }

    // MARK: Held events

    /// An event for a session whose app may not take it now: held (coalesced, bounded) until it returns, with an
    /// alert when the app asked for one. False when the event should go out at once.
    func holdIfSuspended(_ event: inout Beryl_Ipc_V1_ManagerEvent, for sessionID: UInt64) -> Bool {
        guard let app = appSessions[sessionID], !app.appID.isEmpty else { return false }
        let policy = policy(forSession: sessionID)
        if policy.deliversEvents {
            noteWake(app.appID, by: event)
            event.wake = wakes.stamp(session: sessionID, app: app.appID)
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
            guard let app = appSessions[live.id], app.held.count > 0 else { continue }
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
        let alert: (kind: AlertKind, peripheral: String)?
        switch event.kind {
        case .connected(let connected)? where app.connectOptions[connected.peripheral]?.notifyOnConnection == true:
            alert = (.connection, connected.peripheral)
        case .disconnected(let disconnected)? where app.connectOptions[disconnected.peripheral]?.notifyOnDisconnection == true:
            alert = (.disconnection, disconnected.peripheral)
        case .notification(let notification)? where app.connectOptions[notification.peripheral]?.notifyOnNotification == true:
            alert = (.notification, notification.peripheral)
        default:
            alert = nil
        }
        guard let alert else { return }
        let message = alert.kind.message(appID: app.appID, peripheral: store?.device(alert.peripheral)?.name ?? alert.peripheral)
        host.logger.warning("alert: \(message)")
        var event = Beryl_Ipc_V1_ManagerEvent()
        event.alert = .with { $0.appID = app.appID; $0.message = message; $0.kind = Self.wire(alert.kind); $0.peripheral = alert.peripheral }
        for subscriber in alertSubscribers { send(event, to: subscriber) }
        if let manifest = catalog.apps[app.appID], let command = manifest.alertCommand {
            do {
                _ = try Spawn.start(command + [message], environment: ["PATH": "/usr/bin:/bin", "BERYL_APP_ID": app.appID, "BERYL_ALERT": alert.kind.rawValue],
                                    logPath: host.paths.logDir + "/alerts-\(app.appID).log", uid: manifest.uid, gid: manifest.gid)
            } catch {
                host.logger.error("alert command of \(app.appID) failed: \(error)")
            }
        }
    }

    static func wire(_ kind: AlertKind) -> Beryl_Ipc_V1_AlertKind {
        switch kind {
        case .connection: .connection
        case .disconnection: .disconnection
        case .notification: .notification
        }
    }

    // MARK: Wake budget

    /// An event reaching an app in the background with a background mode wakes it for its budget. The library says
    /// when each session has handled what it was given (AppIdle); an app that overruns is ended, as iOS ends it, and
    /// its preserved managers wake it again (a relaunch) for their next event.
    private func noteWake(_ appID: String, by event: Beryl_Ipc_V1_ManagerEvent) {
        guard lifecycle(of: appID) == .background, let manifest = catalog.apps[appID], !manifest.backgroundModes.isEmpty,
              !wakes.isAwake(appID) else { return }
        switch event.kind {
        // News that needs no handling within a budget: the state, flow control, pairing's outcome.
        case .stateChanged?, .readyToUpdate?, .readyToWrite?, .pairingFinished?: return
        default: break
        }
        beginWake(appID, budget: manifest.wakeBudget, reason: "an event")
    }

    func beginWake(_ appID: String, budget: Double, reason: String) {
        guard wakes.begin(appID, at: host.loop.uptime, budget: .milliseconds(Int(budget * 1000))) else { return }
        host.logger.info("\(appID) woken in the background by \(reason) (budget \(budget) s)")
        armWakeDeadline()
    }

    /// A session has handled everything up to `wake`; the app is idle once all its sessions have.
    func sessionIdle(_ session: UInt64, appID: String, wake: UInt64) {
        guard !appID.isEmpty else { return }
        if let awake = wakes.idle(session: session, upTo: wake, app: appID, sessions: sessionsOf(appID).map(\.id), at: host.loop.uptime) {
            host.logger.info("\(appID) is idle again after \(awake) awake")
        }
    }

    func wakeSessionClosed(_ session: UInt64, appID: String) {
        guard !appID.isEmpty else { return }
        let remaining = sessionsOf(appID).map(\.id).filter { $0 != session }
        if let awake = wakes.closed(session: session, app: appID, remaining: remaining, at: host.loop.uptime) {
            host.logger.info("\(appID) is idle again after \(awake) awake")
        }
    }

    /// One timer, at the ledger's earliest deadline.
    private func armWakeDeadline() {
        wakeDeadline?.cancel()
        wakeDeadline = nil
        guard let deadline = wakes.nextDeadline else { return }
        wakeDeadline = try? host.loop.after(max(.zero, deadline - host.loop.uptime) + .milliseconds(1)) { [unowned self] in
            for appID in self.wakes.overrun(at: self.host.loop.uptime) where self.lifecycle(of: appID) == .background {
                self.endOverrunningApp(appID, budget: self.catalog.apps[appID]?.wakeBudget ?? 0)
            }
            self.armWakeDeadline()
        }
    }

    /// iOS ends a background app that overruns its wake; its preserved managers then launch it again for their next
    /// event, so nothing waits on a process that stopped answering.
    private func endOverrunningApp(_ appID: String, budget: Double) {
        var pids = Set(sessionsOf(appID).map(\.peer.pid))
        if let pid = apps[appID]?.launchedPID { pids.insert(pid) }
        pids = pids.filter { $0 > 1 && $0 != getpid() }
        host.logger.warning("\(appID) overran its \(budget) s background budget; ending it (pids \(pids.sorted())); its next event wakes it again")
        for pid in pids { kill(pid, SIGTERM) }
        _ = try? host.loop.after(.seconds(2)) {
            for pid in pids where ProcessStats.isAlive(pid: pid) { kill(pid, SIGKILL) }
        }
    }
}
