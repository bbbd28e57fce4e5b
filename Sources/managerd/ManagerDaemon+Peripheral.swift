import BerylCore
import BerylGAP
import BerylHCI
import BerylIPC
import BerylManager
import BerylManagerWire
import FoundationEssentials
import Glibc

extension ManagerDaemon {
    func handlePeripheral(_ asked: ManagerCommand, session: UInt64, _ incoming: IncomingRequest) throws(WireFailure) {
        switch asked {
        case .addService(let owner, let spec):
            guard let attd else { throw .attdUnreachable }
            attd.request(.with {
                $0.att.publishService.service = spec
                // The app's data channel may send this service's values.
                $0.att.publishService.onBehalfOf = owner.holder.sessionID ?? 0
            }) { [unowned self] result in
                let response: Response
                switch result {
                case .success(let answer): response = answer
                case .failure(let error): return _ = incoming.fail(relaying: error, from: "attd")
                }
                let published = response.att.servicePublished
                guard let range = published.handles else {
                    incoming.fail(.internal, "attd answered with handles \(published.startHandle)...\(published.endHandle)")
                    return
                }
                let kept: PreservedState.PublishedService?
                do {
                    kept = try PreservedState.PublishedService(wire: .with { $0.spec = spec; $0.published = published })
                } catch {
                    host.logger.error("service \(spec.uuid) cannot be kept for restoration: \(error)")
                    kept = nil
                }
                let (stays, outputs) = core.appServicePublished(kept, at: range, owner: owner)
                apply(outputs)
                guard stays else {
                    return _ = incoming.fail(.notReady, "the stack left poweredOn before the service was published; add it again at poweredOn")
                }
                incoming.respond(.with { $0.manager.serviceAdded = published })
            }
        case .updateValue(let key, let update):
            guard let valueHandle = UInt16(exactly: update.valueHandle), core.router.owns(key, handle: valueHandle) else {
                throw .notPublished(update.valueHandle, field: "value_handle")
            }
            guard let attd else { throw .attdUnreachable }
            guard let links = core.links(ofCentrals: update.centrals) else {
                incoming.respond(.with { $0.manager.updateResult = .init(.sent) })  // none of the centrals named is connected
                return
            }
            attd.request(.with { $0.att = .init(update: update, session: session, links: links) }) { result in
                // Not sent is Core Bluetooth's updateValue returning false; attd sends this app's ReadyToUpdate when there is room.
                if let answer = OrderedSendAnswer(result, ordered: update.ordered) {
                    incoming.respond(.with { $0.manager.updateResult = .init(answer) })
                } else if case .failure(let error) = result {
                    incoming.fail(relaying: error, from: "attd")
                }
            }
        case .answerPairing(let peer, let accept, let passkey):
            // Only who heard the prompt answers it: not another app, nor anyone on a lab's link.
            guard let link = core.pairingLink(with: peer, answeredBy: session, isLabLink: { lab.owns($0, in: book) }) else {
                throw WireFailure(.notFound, "no link with \(peer) whose pairing this app hears", field: "peer")
            }
            try forwardToAttd(.with { $0.att = .init(pairingAnswerOn: link, accept: accept, passkey: passkey) }, incoming)
        default:
            throw WireFailure(.unsupported, "not a request for attd")
        }
    }

    /// attd keeps refusals and ReadyToUpdate counts per app that managerd sent values for; a session that ends has none.
    func forgetUpdateSender(_ session: UInt64) {
        attd?.request(.with { $0.att = .init(forgetting: session) })
    }

    func forgetWriteSender(_ session: UInt64, on handle: UInt16) {
        guard let attd else { return core.writesForgotten(of: session, onLink: handle) }
        // attd answers after every event it sent before the forget, on the same connection.
        attd.request(.with { $0.att = .init(forgetting: session, onLink: handle) }) { [unowned self] _ in core.writesForgotten(of: session, onLink: handle) }
    }

    func unpublish(_ start: UInt16) {
        attd?.request(.with { $0.att.unpublishService.startHandle = UInt32(start) })
    }

    func answerAttd(_ id: UInt64, isRead: Bool, value: [UInt8], error: UInt32) {
        attd?.request(.with { $0.att = .init(answering: id, isRead: isRead, value: value, error: error) })
    }

    /// A remote central's read or write, for the owner's app; the central's identifier is handed out, so a lab's
    /// factory reset no longer takes it back.
    func routeRemoteRequest(_ id: UInt64, _ request: PeripheralRouter.Request, connectionHandle: UInt32, handles: [UInt16], expectsAnswer: Bool,
                            event: (_ manager: UInt32, _ central: String, _ maximumUpdateLength: UInt32) -> Beryl_Ipc_V1_ManagerEvent) {
        switch core.remoteRequestRouted(id, request, onLink: UInt16(truncatingIfNeeded: connectionHandle), handles: handles,
                                        expectsAnswer: expectsAnswer, isLive: { session($0) != nil }) {
        case .toApp(let owner, let central, let maximumUpdateLength):
            if !central.isEmpty { handedOut(central) }
            send(event(owner.manager, central, maximumUpdateLength), to: owner.holder)
        case .refuse(let attError):
            answerAttd(id, isRead: request == .read, value: [], error: UInt32(attError))
        case .drop:
            break
        }
    }

    func routeSubscription(_ report: ReportedSubscription) {
        guard let (owner, subscription, outputs) = core.subscriptionRouted(report) else { return }
        handedOut(subscription.central)
        apply(outputs)
        send(.init(subscription: subscription, manager: owner.manager), to: owner.holder)
    }

    // MARK: Advertising

    /// BerylManager's AdvertisingRotation decides who advertises and how, and when a turn ends (the core's clock); this
    /// runs its commands. A central connecting ends connectable advertising in the controller (Core Vol 6 Part B §4.4.2);
    /// it is started again, so that other centrals still find the app, as Core Bluetooth's does.
    func updateAdvertising(completion: ((String?) -> Void)? = nil) {
        defer { armDeadline() }
        switch core.planAdvertising(lab: lab.advertising?.commands, poweredOn: state == .poweredOn, ownAddressRandom: identityIsRandom,
                                    at: host.loop.uptime) {
        case .off(let disable, let wanted):
            if disable { command(HCICommands.leSetAdvertisingEnable(false)) }
            completion?(wanted ? "the controller is not powered on" : nil)
        case .advertise(let commands, _):
            for packet in commands.dropLast() { command(packet) }
            if let last = commands.last {
                command(last) { result in
                    switch result {
                    case .success(let status) where status.first == 0: completion?(nil)
                    case .success(let status): completion?("the controller refused advertising (0x\(String(status.first ?? 0xFF, radix: 16)))")
                    case .failure(let error): completion?("\(error)")
                    }
                }
            }
        }
    }
}
