import BerylCore
import BerylDaemonKit
import BerylHCI
import BerylIPC
import BerylManager
import BerylManagerWire
import Foundation

/// What apps ask of links beyond their own GATT: connection latency, connection events, and the parameters a
/// peripheral asks of this stack as central; and what CBManager.authorization reads.
extension ManagerDaemon {
    /// CBManager.authorization from the app's manifest: the app id declared for this user (or not declared, a
    /// foreground-only app) is allowed; declared for another user, denied.
    func capabilities(appID: String, uid: UInt32) -> Beryl_Ipc_V1_Capabilities {
        .with { $0.authorization = core.catalog.mayUseBluetooth(appID: appID, uid: uid) ? .allowedAlways : .denied }
    }

    /// CBPeripheralManager.setDesiredConnectionLatency(_:for:): this stack is the peripheral on the central's link,
    /// so it asks the central through the Link Layer (LE Connection Update from the peripheral starts the Connection
    /// Parameters Request procedure, Core Vol 4 Part E §7.8.18). The answer says the controller took the request; the
    /// central may still refuse it, as on iOS.
    func setConnectionLatency(_ latency: ConnectionLatency, for central: String, _ incoming: IncomingRequest) throws(WireFailure) {
        guard let link = core.link(toCentral: central) else {
            throw WireFailure(.notFound, "no link with central \(central) on which this stack is the peripheral", field: "central",
                              detail: RemoteDetail(bluetoothError: .notConnected))
        }
        let parameters = latency.parameters
        command(HCICommands.leConnectionUpdate(handle: link.handle, intervalMin: parameters.intervalMin, intervalMax: parameters.intervalMax,
                                               latency: parameters.latency, supervisionTimeout: parameters.timeout),
                named: "LE Connection Update", answering: incoming)
    }

    /// Tells a manager that registered for connection events of a link that came up or went.
    func announce(_ change: ManagerCore<Beryl_Ipc_V1_ManagerEvent>.LinkChange, identifier: String, to key: ManagerKey) {
        guard let device = store?.device(identifier) else { return }
        var event = Beryl_Ipc_V1_ManagerEvent()
        event.connectionEvent = .with {
            $0.manager = key.manager
            $0.kind = change == .peerConnected ? .peerConnected : .peerDisconnected
            $0.peripheral = info(for: device)
        }
        send(event, to: key.holder)
    }

    /// As central, the stack takes what a peripheral asks for when it is valid, as it does on the signalling channel.
    func answerParameterRequest(_ request: RemoteConnectionParameterRequest) {
        let answer = request.answer
        host.logger.info("link 0x\(String(request.handle, radix: 16)): the peripheral asks for interval \(request.parameters.intervalMin)–"
                         + "\(request.parameters.intervalMax), latency \(request.parameters.latency), timeout \(request.parameters.timeout); "
                         + (request.parameters.isValid ? "accepted" : "refused"))
        command(answer)
    }
}
