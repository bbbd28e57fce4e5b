import BerylCore
import BerylDaemonKit
import BerylHCI
import BerylIPC
import BerylManager
import BerylManagerWire
import FoundationEssentials
import Glibc

/// What apps ask of links beyond their own GATT: connection latency, connection events, and the parameters a
/// peripheral asks of this stack as central; and what CBManager.authorization reads.
extension ManagerDaemon {
    /// CBManager.authorization from the app's manifest: the app id declared for this user (or not declared, a
    /// foreground-only app) is allowed; declared for another user, denied.
    func capabilities(appID: String, uid: UInt32) -> Beryl_Ipc_V1_Capabilities {
        .with { $0.authorization = core.catalog.mayUseBluetooth(appID: appID, uid: uid) ? .allowedAlways : .denied }
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
