import BerylATT
import BerylAttWire
import BerylCore
import BerylGATT
import BerylIPC
import FoundationEssentials
import Glibc

extension AttDaemon {
    func handle(_ incoming: IncomingRequest) -> Bool {
        guard let session = incoming.session else { return false }
        if grants.isChannel(session.id) {
            handleDataRequest(incoming.request.att.kind, on: session, incoming)
            return true
        }
        guard case .att(let request)? = incoming.request.kind else { return false }
        switch request.kind {
        case .getBearers?:
            incoming.respond(.with {
                $0.att.bearers.bearers = openBearers
                $0.att.bearers.complete = hasHcidsLinks
                $0.att.bearers.orphanedChannels = UInt32(grants.orphanCount)
            })
        case .publishService(let publish)?:
            publishService(publish.service, for: session, app: publish.onBehalfOf, incoming)
        case .unpublishService(let unpublish)?:
            guard unpublish.startHandle <= 0xFFFF, let range = router.unpublish(startingAt: UInt16(unpublish.startHandle), by: session.id) else {
                incoming.fail(.notFound, "this session published no service at handle \(unpublish.startHandle)", field: "start_handle")
                return true
            }
            _ = database.removeService(at: range.lowerBound)
            serviceSpecs[range.lowerBound] = nil
            incoming.respond(.with { $0.ack = .init() })
            announceDatabaseChange(range)
        case .notify(let notify)?:
            if notify.onBehalfOf != 0 { dataPlane.publisherValues += 1 }
            send(notify, from: session.id, owns: { router.owns(session.id, $0) }, incoming)
        case .forgetSender(let forget)?:
            let sender = UpdateSender(publisher: session.id, onBehalfOf: forget.onBehalfOf)
            if forget.onlyLink {
                pacer.writeSenderGone(sender, on: UInt16(truncatingIfNeeded: forget.connectionHandle))
            } else {
                pacer.senderGone(sender)
                // The app's session with managerd ended: its channel goes with it.
                if let channel = grants.channel(of: sender) { host.server?.sessions[channel]?.close(reason: "its app's session ended") }
            }
            incoming.respond(.with { $0.ack = .init() })
        case .answerRead(let answer)?:
            let read: Result<[UInt8], ATTError> = answer.error == 0 ? .success(Array(answer.value)) : .failure(ATTError(rawValue: UInt8(truncatingIfNeeded: answer.error)))
            answerOwed(answer.id, isRead: true, incoming) { complete($0, read: read, writeError: nil, valueStartsAtOffset: answer.startsAtOffset) }
        case .answerWrite(let answer)?:
            let error = answer.error == 0 ? nil : ATTError(rawValue: UInt8(truncatingIfNeeded: answer.error))
            answerOwed(answer.id, isRead: false, incoming) { complete($0, read: .failure(.unlikelyError), writeError: error) }
        case .gattDiscover?, .gattRead?, .gattWrite?, .gattSubscribe?, .gattReadMultiple?, .gattReadByType?, .gattReliableWrite?:
            if case .gattWrite(let write)? = request.kind, write.withoutResponse, write.onBehalfOf != 0 { dataPlane.publisherWriteCommands += 1 }
            return handleClientRequest(request.kind!, incoming)
        case .pair?, .pairingAnswer?, .listBonds?, .removeBond?, .getPrivateAddress?, .setLinkPairing?:
            return handleSecurityRequest(request.kind!, incoming)
        case .openDataChannel?, .setDataGrant?, .nameLink?, .notificationAudience?, .setGrantLinks?, .adoptDataChannel?:
            handleGrantRequest(request.kind!, from: session, incoming)
        case nil:
            incoming.fail(.unknownMessage, "empty ATT request")
        }
        return true
    }

    /// A value for the subscribed peers (or the links named), from a publisher or an app's channel, paced.
    func send(_ notify: Beryl_Ipc_V1_Notify, from publisher: PublisherID, owns: (UInt16) -> Bool, _ incoming: IncomingRequest) {
        switch pacer.update(notify, from: publisher, owns: owns, on: Array(links.values)) {
        case .success(let update):
            for (link, outputs) in update.indications { apply(wrap(outputs, for: link), on: link) }
            applyPacer(update.transmissions)
            incoming.respond(.with { $0.att.notified.peers = update.peers })
        case .failure(let refusal):
            incoming.fail(refusal)
        }
    }

    private func publishService(_ spec: Beryl_Ipc_V1_ServiceSpec, for session: IPCSession, app: UInt64, _ incoming: IncomingRequest) {
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
        router.published(start...end, by: session.id, for: app)
        if app != 0 { serviceSpecs[start] = spec }
        host.logger.info("service \(definition.uuid) published at \(start)–\(end) by session \(session.id)")
        incoming.respond(.with { $0.att.servicePublished = .init(start...end, in: database) })
        announceDatabaseChange(start...end)
        adoptStoredSubscriptions(in: start...end)
    }

    /// A publisher's answer to a peer's read or write (or an app's, `by` its data channel), if one is still owed
    /// under that id.
    func answerOwed(_ id: UInt64, isRead: Bool, by app: UpdateSender? = nil, _ incoming: IncomingRequest, then complete: (ServiceRouter.OwedAnswer) -> Void) {
        let owed: ServiceRouter.OwedAnswer
        do {
            owed = try router.answer(id, isRead: isRead, by: app)
        } catch .anotherApps {
            incoming.fail(.permissionDenied, "\(isRead ? "read" : "write") \(id) is not this app's to answer", field: "id",
                          detail: RemoteDetail(grantReason: .outsideGrant))
            return
        } catch {
            incoming.fail(.notFound, "no \(isRead ? "read" : "write") \(id) is waiting for an answer (answered already, or timed out)", field: "id")
            return
        }
        complete(owed)
        armDeadline()
        incoming.respond(.with { $0.ack = .init() })
    }
}
