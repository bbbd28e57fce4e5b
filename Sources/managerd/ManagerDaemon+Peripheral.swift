import BerylCore
import BerylGAP
import BerylHCI
import BerylIPC
import BerylManager
import BerylManagerWire
import Foundation

extension ManagerDaemon {
    func handlePeripheral(_ kind: Beryl_Ipc_V1_ManagerRequest.OneOf_Kind, session: UInt64, _ incoming: IncomingRequest) throws(WireFailure) {
        switch kind {
        case .addService(let add):
            guard let attd else { throw .attdUnreachable }
            let owner = ManagerKey(session: session, manager: add.manager)
            attd.request(.with { $0.att.publishService.service = add.service }) { [unowned self] result in
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
                    kept = try PreservedState.PublishedService(wire: .with { $0.spec = add.service; $0.published = published })
                } catch {
                    host.logger.error("service \(add.service.uuid) cannot be kept for restoration: \(error)")
                    kept = nil
                }
                let (stays, outputs) = core.appServicePublished(kept, at: range, owner: owner)
                apply(outputs)
                guard stays else {
                    return _ = incoming.fail(.notReady, "the stack left poweredOn before the service was published; add it again at poweredOn")
                }
                incoming.respond(.with { $0.manager.serviceAdded = published })
            }
        case .removeService(let remove):
            guard let start = UInt16(exactly: remove.startHandle),
                  let outputs = try? core.removeService(start: start, owner: ManagerKey(session: session, manager: remove.manager)) else {
                throw WireFailure(.notFound, "this manager published no service at handle \(remove.startHandle)", field: "start_handle",
                                  detail: RemoteDetail(managerReason: .notPublished))
            }
            apply(outputs)
            incoming.respond(.with { $0.ack = .init() })
        case .removeAllServices(let remove):
            apply(core.removeAllServices(of: ManagerKey(session: session, manager: remove.manager)))
            incoming.respond(.with { $0.ack = .init() })
        case .startAdvertising(let start):
            let advertiser = Advertiser(localName: start.localName, serviceUUIDs: try BluetoothUUID.list(start.serviceUuids, field: "service_uuids"))
            apply(core.startAdvertising(advertiser, for: ManagerKey(session: session, manager: start.manager)))
            incoming.respond(.with { $0.ack = .init() })
            updateAdvertising { [unowned self] error in
                send(.with { $0.advertisingStarted = .with { $0.manager = start.manager; $0.error = error ?? "" } }, to: session)
            }
        case .stopAdvertising(let stop):
            apply(core.stopAdvertising(for: ManagerKey(session: session, manager: stop.manager)))
            incoming.respond(.with { $0.ack = .init() })
        case .respond(let answer):
            let request: PeripheralRouter.Request
            do {
                request = try core.router.answer(answer.id, from: .session(session), attError: answer.error)
            } catch .notPending {
                throw WireFailure(.notFound, "request \(answer.id) is not waiting for this app's answer (answered already, or timed out)", field: "id",
                                  detail: RemoteDetail(managerReason: .requestNotPending))
            } catch {
                throw WireFailure(.invalidArgument, "ATT error codes are one byte; \(answer.error) is not one", field: "error",
                                  detail: RemoteDetail(bluetoothError: .invalidParameters))
            }
            answerAttd(answer.id, isRead: request == .read, value: Array(answer.value), error: answer.error)
            incoming.respond(.with { $0.ack = .init() })
        case .updateValue(let update):
            guard let valueHandle = UInt16(exactly: update.valueHandle), core.router.owns(ManagerKey(session: session, manager: update.manager), handle: valueHandle) else {
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
        case .answerPairing(let answer):
            // Only who heard the prompt answers it: not another app, nor anyone on a lab's link.
            guard let link = core.pairingLink(with: answer.peer, answeredBy: session, isLabLink: { lab.owns($0, in: book) }) else {
                throw WireFailure(.notFound, "no link with \(answer.peer) whose pairing this app hears", field: "peer")
            }
            try forwardToAttd(.with { $0.att = .init(pairingAnswerOn: link, accept: answer.accept, passkey: answer.passkey) }, incoming)
        default:
            throw WireFailure(.unsupported, "not a peripheral request")
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

    /// The identifier an app is given for a remote central: handed out, so a lab's factory reset no longer takes it back.
    private func central(of connectionHandle: UInt32) -> String {
        guard let identifier = book.identifier(for: UInt16(truncatingIfNeeded: connectionHandle)) else { return "" }
        handedOut(identifier)
        return identifier
    }

    func routeRead(_ read: Beryl_Ipc_V1_ReadRequested) {
        let route = core.routeRemoteRequest(read.id, .read, handles: [UInt16(truncatingIfNeeded: read.handle)], expectsAnswer: true) {
            self.session($0) != nil
        }
        guard case .app(let owner) = route else {
            answerAttd(read.id, isRead: true, value: [], error: 0x0E)
            return
        }
        send(.init(read, manager: owner.manager, central: central(of: read.connectionHandle),
                   maximumUpdateLength: maximumUpdateLength(read.connectionHandle)), to: owner.holder)
    }

    func routeWrite(_ write: Beryl_Ipc_V1_WriteRequested) {
        let handles = write.writes.map { UInt16(truncatingIfNeeded: $0.handle) }
        let route = core.routeRemoteRequest(write.id, .write, handles: handles, expectsAnswer: write.withResponse) { self.session($0) != nil }
        guard case .app(let owner) = route else {
            if route == .unlikelyError { answerAttd(write.id, isRead: false, value: [], error: 0x0E) }
            return
        }
        send(.init(write, manager: owner.manager, central: central(of: write.connectionHandle),
                   maximumUpdateLength: maximumUpdateLength(write.connectionHandle)), to: owner.holder)
    }

    private func maximumUpdateLength(_ connectionHandle: UInt32) -> UInt32 {
        core.maximumUpdateLength(on: UInt16(truncatingIfNeeded: connectionHandle))
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
