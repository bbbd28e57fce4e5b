import BerylATT
import BerylAttWire
import BerylCore
import BerylGATT
import BerylIPC
import Foundation

extension AttDaemon {
    func handle(_ incoming: IncomingRequest) -> Bool {
        guard case .att(let request)? = incoming.request.kind, let session = incoming.session else { return false }
        switch request.kind {
        case .getBearers?:
            var response = Response()
            response.att.bearers.bearers = links.values.sorted { $0.handle < $1.handle }.map { link in
                .with {
                    $0.connectionHandle = UInt32(link.handle)
                    $0.attMtu = UInt32(link.server.mtu)
                    $0.central = link.isCentral
                    $0.peerAddress = security.peer(of: link.handle)?.description ?? ""
                }
            }
            incoming.respond(response)
        case .publishService(let publish)?:
            publishService(publish.service, for: session, incoming)
        case .unpublishService(let unpublish)?:
            guard unpublish.startHandle <= 0xFFFF, let range = router.unpublish(startingAt: UInt16(unpublish.startHandle), by: session.id) else {
                incoming.fail(.notFound, "this session published no service at handle \(unpublish.startHandle)", field: "start_handle")
                return true
            }
            _ = database.removeService(at: range.lowerBound)
            incoming.respond(.with { $0.ack = .init() })
            announceDatabaseChange(range)
        case .notify(let notify)?:
            guard notify.valueHandle > 0, notify.valueHandle < 0xFFFF,
                  router.owns(session.id, UInt16(notify.valueHandle)) else {
                incoming.fail(.notFound, "handle \(notify.valueHandle) is not a value of this session's services", field: "value_handle")
                return true
            }
            guard notify.value.count <= ATTServer.maxValueLength else {
                incoming.fail(.invalidArgument, "values are at most 512 bytes", field: "value")
                return true
            }
            let sender = UpdateSender(publisher: session.id, onBehalfOf: notify.onBehalfOf)
            if notify.ordered, let latest = pacer.sentBeforeReady(sender, readySeen: notify.readySeen) {
                incoming.fail(.cancelled, "sent before ReadyToUpdate \(latest): send it again; no other ReadyToUpdate follows")
                return true
            }
            guard let update = pacer.update(valueHandle: UInt16(notify.valueHandle), value: Array(notify.value), indicate: notify.indicate,
                                            ordered: notify.ordered, from: sender, on: Array(links.values)) else {
                incoming.fail(.busy, "the transmit queue is full; wait for ReadyToUpdate")
                return true
            }
            for (link, outputs) in update.indications { apply(wrap(outputs, for: link), on: link) }
            applyPacer(update.transmissions)
            incoming.respond(.with { $0.att.notified.peers = update.peers })
        case .forgetSender(let forget)?:
            let sender = UpdateSender(publisher: session.id, onBehalfOf: forget.onBehalfOf)
            if forget.onlyLink {
                pacer.writeSenderGone(sender, on: UInt16(truncatingIfNeeded: forget.connectionHandle))
            } else {
                pacer.senderGone(sender)
            }
            incoming.respond(.with { $0.ack = .init() })
        case .answerRead(let answer)?:
            guard let owed = try? router.answer(answer.id, isRead: true) else {
                incoming.fail(.notFound, "no read \(answer.id) is waiting for an answer (answered already, or timed out)", field: "id")
                return true
            }
            let result: Result<[UInt8], ATTError> = answer.error == 0 ? .success(Array(answer.value))
                : .failure(ATTError(rawValue: UInt8(truncatingIfNeeded: answer.error)))
            complete(owed, read: result, writeError: nil, valueStartsAtOffset: answer.startsAtOffset)
            armDeadline()
            incoming.respond(.with { $0.ack = .init() })
        case .answerWrite(let answer)?:
            guard let owed = try? router.answer(answer.id, isRead: false) else {
                incoming.fail(.notFound, "no write \(answer.id) is waiting for an answer (answered already, or timed out)", field: "id")
                return true
            }
            let error = answer.error == 0 ? nil : ATTError(rawValue: UInt8(truncatingIfNeeded: answer.error))
            complete(owed, read: .failure(.unlikelyError), writeError: error)
            armDeadline()
            incoming.respond(.with { $0.ack = .init() })
        case .gattDiscover?, .gattRead?, .gattWrite?, .gattSubscribe?, .gattReadMultiple?, .gattReadByType?, .gattReliableWrite?:
            return handleClientRequest(request.kind!, incoming)
        case .pair?, .pairingAnswer?, .listBonds?, .removeBond?, .getPrivateAddress?, .setLinkPairing?:
            return handleSecurityRequest(request.kind!, incoming)
        case nil:
            incoming.fail(.unknownMessage, "empty ATT request")
        }
        return true
    }

    private func publishService(_ spec: Beryl_Ipc_V1_ServiceSpec, for session: IPCSession, _ incoming: IncomingRequest) {
        let definition: ServiceDefinition
        do {
            definition = try ServiceDefinition(wire: spec)
        } catch {
            incoming.fail(.invalidArgument, error.message, field: error.field)
            return
        }
        let start: UInt16
        do {
            start = try database.add(definition)
        } catch {
            incoming.fail(.invalidArgument, "the database refused the service: \(error)", field: "service")
            return
        }
        let end = database.attribute(at: start)?.groupEnd ?? start
        router.published(start...end, by: session.id)
        let valueHandles = database.attributes(in: start...end).filter { $0.type == GATTType.characteristic }.map { $0.handle + 1 }
        host.logger.info("service \(definition.uuid) published at \(start)–\(end) by session \(session.id)")
        incoming.respond(.with {
            $0.att.servicePublished.startHandle = UInt32(start)
            $0.att.servicePublished.endHandle = UInt32(end)
            $0.att.servicePublished.valueHandles = valueHandles.map(UInt32.init)
        })
        announceDatabaseChange(start...end)
        adoptStoredSubscriptions(in: start...end)
    }
}
