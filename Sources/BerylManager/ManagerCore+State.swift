/// CBManagerState as managerd reports it to apps, plus a controller that stopped answering (printed by its case name).
public enum StackState: Equatable, Sendable, CaseIterable {
    case unknown, resetting, unsupported, unauthorized, poweredOff, poweredOn, unresponsive
}

/// The stack's state as apps see it: poweredOn only when the controller is and attd is attached (the stack can do
/// GATT); a lost attd reads as resetting, as Core Bluetooth reports a restarting bluetoothd.
extension ManagerCore {
    /// hcid reported the controller's state. `isRunning` says whether a holder's app runs (see `controllerLost`).
    public mutating func controllerChanged(_ controller: StackState, isRunning: (ManagerHolder) -> Bool) -> [Output] {
        controllerState = controller
        return refreshState(isRunning: isRunning)
    }

    /// attd came or went: its database went with it (see `attdLost`).
    public mutating func attd(attached: Bool, isRunning: (ManagerHolder) -> Bool) -> [Output] {
        let lost = !attached && attdAttached ? attdLost() : []
        attdAttached = attached
        return lost + refreshState(isRunning: isRunning)
    }

    /// Leaving poweredOn clears the running apps' services and advertising (Core Bluetooth's rule, `controllerLost`)
    /// and stops asking the controller for links; reaching it publishes what waits to be published again and asks for
    /// every pending link again.
    private mutating func refreshState(isRunning: (ManagerHolder) -> Bool) -> [Output] {
        let newState: StackState = controllerState == .poweredOn && !attdAttached ? .resetting : controllerState
        guard newState != state else { return [] }
        var outputs: [Output] = []
        if state == .poweredOn {
            outputs += controllerLost(isRunning: isRunning)
            outputs += connections.controller(poweredOn: false).map(Output.connections)
        }
        state = newState
        outputs.append(.stateChanged(newState))
        // Below poweredOn the library empties its update queue and counts ReadyToUpdate from zero again; so does attd.
        guard newState == .poweredOn else { return outputs + welcomedSessions.map { .forgetUpdates(session: $0) } }
        // A preserved manager whose app went while the stack was off has its stash to publish again.
        if !pendingRepublish.isEmpty { outputs.append(.republish) }
        outputs += connections.controller(poweredOn: true).map(Output.connections)
        return outputs
    }
}
