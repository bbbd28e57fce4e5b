import BerylCore
import BerylDaemonKit
import BerylIPC
import BerylManager
import BerylManagerWire
import Foundation
import Glibc

/// The shell of BerylManager's AppLifecycle: it applies what a state change means to scans, advertising and held
/// events, runs alerts, and ends an app that overran its wake. The rules are the core's.
extension ManagerDaemon {
    func lifecycle(of appID: String) -> LifecycleState {
        life.state(of: appID, hasSessions: !sessionsOf(appID).isEmpty)
    }

    func lifecycleRules(_ appID: String) -> AppLifecycle.Rules? {
        catalog.apps[appID].map {
            AppLifecycle.Rules(modes: $0.backgroundModes, suspendAfter: .milliseconds(Int($0.suspendAfter * 1000)),
                               wakeBudget: .milliseconds(Int($0.wakeBudget * 1000)))
        }
    }

    func policy(for holder: ManagerHolder) -> LifecyclePolicy {
        switch holder {
        case .session(let id): policy(forSession: id)
        case .preserved(let id):
            // A preserved manager whose app is not running works as its background modes allow.
            .of(.notRunning, modes: restoration.manager(id: id).flatMap { catalog.apps[$0.appID]?.backgroundModes } ?? [])
        }
    }

    func policy(forSession id: UInt64) -> LifecyclePolicy {
        guard let app = appSessions[id] else { return .of(.foreground, modes: []) }
        return .of(lifecycle(of: app.appID), modes: catalog.apps[app.appID]?.backgroundModes ?? [])
    }

    /// An app's state changes, reported by the app or forced by `beryl app state`.
    func setLifecycle(_ appID: String, _ state: LifecycleState, reason: String) {
        let change = life.set(appID, to: state, rules: lifecycleRules(appID), hasSessions: !sessionsOf(appID).isEmpty, at: host.loop.uptime)
        if change.current != change.previous { host.logger.info("\(appID) is \(change.current.rawValue) (\(reason))") }
        applyLifecycle(appID)
        if change.deliversHeld { deliverHeld(appID) }
        armLifecycleDeadline()
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

    // MARK: Events for apps

    /// Stamps the event with its wake number, or holds it (with an alert when the app asked for one) or drops it
    /// while the app is suspended. False when the event should not go out now.
    func admit(_ event: inout Beryl_Ipc_V1_ManagerEvent, for sessionID: UInt64) -> Bool {
        guard let app = appSessions[sessionID], !app.appID.isEmpty else { return true }
        let disposition = life.disposition(of: AppLifecycle.EventClass(event), app: app.appID, session: sessionID,
                                           rules: lifecycleRules(app.appID), at: host.loop.uptime)
        logWakes()
        switch disposition {
        case .deliver(let wake):
            event.wake = wake
            return true
        case .hold:
            alertIfAsked(event, app: app)
            app.held.hold(event)
            return false
        case .drop:
            return false
        }
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
        guard let alert = AlertKind.candidate(for: event), app.connectOptions[alert.peripheral]?.alerts(alert.kind) == true else { return }
        let message = alert.kind.message(appID: app.appID, peripheral: store?.device(alert.peripheral)?.name ?? alert.peripheral)
        host.logger.warning("alert: \(message)")
        var event = Beryl_Ipc_V1_ManagerEvent()
        event.alert = .with { $0.appID = app.appID; $0.message = message; $0.kind = .init(alert.kind); $0.peripheral = alert.peripheral }
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

    // MARK: Wakes and deadlines

    /// A session said Hello: the Welcome's wake number (a launch's first Hello starts its wake).
    func lifecycleHello(_ appID: String, session: UInt64) -> UInt64 {
        let wake = life.hello(appID, session: session, rules: lifecycleRules(appID), at: host.loop.uptime)
        logWakes()
        return wake
    }

    /// A session has handled everything up to `wake`; the app is idle once all its sessions have.
    func sessionIdle(_ session: UInt64, appID: String, wake: UInt64) {
        if let awake = life.idle(session: session, upTo: wake, app: appID, sessions: sessionsOf(appID).map(\.id), at: host.loop.uptime) {
            host.logger.info("\(appID) is idle again after \(awake) awake")
        }
    }

    func lifecycleSessionClosed(_ session: UInt64, appID: String) {
        let remaining = sessionsOf(appID).map(\.id).filter { $0 != session }
        if let awake = life.sessionClosed(session, app: appID, remaining: remaining, launchedHere: apps[appID]?.launchedPID != nil,
                                          at: host.loop.uptime) {
            host.logger.info("\(appID) is idle again after \(awake) awake")
        }
    }

    private func logWakes() {
        let begun = life.takeWakesBegun()
        for wake in begun { host.logger.info("\(wake.app) woken in the background (budget \(wake.budget))") }
        if !begun.isEmpty { armLifecycleDeadline() }
    }

    /// One timer, at the core's earliest deadline.
    func armLifecycleDeadline() {
        // The millisecond keeps a timer that libevent fires from its cached clock from landing just short.
        lifecycleTimer.arm(at: life.nextDeadline.map { $0 + .milliseconds(1) }) { [unowned self] now in
            for expiry in life.expire(at: now) {
                switch expiry {
                case .suspended(let appID, let after):
                    host.logger.info("\(appID) is suspended (foreground-only, \(after) in the background)")
                    applyLifecycle(appID)
                case .overran(let appID):
                    endOverrunningApp(appID)
                }
            }
            armLifecycleDeadline()
        }
    }

    /// iOS ends a background app that overruns its wake; its preserved managers then launch it again for their next
    /// event, so nothing waits on a process that stopped answering.
    private func endOverrunningApp(_ appID: String) {
        var pids = Set(sessionsOf(appID).map(\.peer.pid))
        if let pid = apps[appID]?.launchedPID { pids.insert(pid) }
        pids = pids.filter { $0 > 1 && $0 != getpid() }
        let budget = catalog.apps[appID]?.wakeBudget ?? 0
        host.logger.warning("\(appID) overran its \(budget) s background budget; ending it (pids \(pids.sorted())); its next event wakes it again")
        for pid in pids { kill(pid, SIGTERM) }
        _ = try? host.loop.after(.seconds(2)) {
            for pid in pids where ProcessStats.isAlive(pid: pid) { kill(pid, SIGKILL) }
        }
    }
}
