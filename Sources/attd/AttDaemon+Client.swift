import BerylATT
import BerylAttWire
import BerylCore
import BerylGATT
import BerylHCI
import BerylIPC
import BerylLink
import FoundationEssentials
import Glibc

/// The shell around each link's GATT client core: requests in, the core's outputs out to hcid, apps and the
/// security manager.
extension AttDaemon {
    /// `publisher`: who sent a write without response, for its pacing and ready events — the session that asked, or
    /// for an app's data channel the publisher that opened it (so both ways share the app's place in the pacer).
    func handleClientRequest(_ request: Beryl_Ipc_V1_AttRequest.OneOf_Kind, publisher: PublisherID? = nil, _ incoming: IncomingRequest) -> Bool {
        guard let handle = request.clientConnectionHandle else { return false }
        guard let link = usableLink(handle, incoming) else { return true }
        let operation: GATTClient.Operation?
        do {
            operation = try GATTClient.Operation(wire: request)
        } catch {
            incoming.fail(.invalidArgument, error.message, field: error.field)
            return true
        }
        guard let operation else {
            if case .gattWrite(let write) = request { writeWithoutResponse(write, on: link, from: publisher ?? incoming.session?.id ?? 0, incoming) }
            return true
        }
        let id = nextClientOperation
        nextClientOperation += 1
        clientAnswers[id] = incoming
        applyGATT(link.gatt.start(operation, id: id, at: host.loop.uptime), on: link)
        return true
    }

    private func usableLink(_ handle: UInt32, _ incoming: IncomingRequest) -> LinkSession? {
        guard let link = links[UInt16(truncatingIfNeeded: handle)] else {
            incoming.fail(WireFailure(.noLink, link: handle))
            return nil
        }
        guard link.gatt.isUsable else {
            incoming.fail(.notReady, "the link's ATT bearer timed out and is unusable until it reconnects")
            return nil
        }
        return link
    }

    /// Paced, not answered by the peer: the pacer admits it or refuses it as the sender hears.
    private func writeWithoutResponse(_ write: Beryl_Ipc_V1_GattWrite, on link: LinkSession, from publisher: PublisherID, _ incoming: IncomingRequest) {
        switch pacer.admitWrite(write, from: publisher, on: link, encrypted: security.level(of: link.handle)?.encrypted == true,
                                sign: { signedWritePDU(on: link, handle: $0, value: $1) }) {
        case .failure(let refusal):
            incoming.fail(refusal)
        case .success(let command):
            for case .send(let pdu) in link.clientOutputs(link.client.submit(command, at: host.loop.uptime).outputs) {
                enqueuePaced(pdu, on: link.handle)
            }
            incoming.respond(.with { $0.ack = .init() })
        }
    }

    /// What the link's bearer said to its client half goes through the GATT client core.
    func clientEvent(_ output: ATTClientOutput, on link: LinkSession) {
        applyGATT(link.gatt.receive([output], security: clientSecurity(of: link), at: host.loop.uptime), on: link)
    }

    /// Both halves of each bearer time their transactions (Core Vol 3 Part F §3.3.3).
    func tickBearers() {
        for link in links.values {
            applyGATT(link.gatt.tick(security: clientSecurity(of: link), at: host.loop.uptime), on: link)
            apply(wrap(link.server.tick(at: host.loop.uptime), for: link), on: link)
            // Asked each tick while the unusable link lasts: a Disconnect may be lost on the way (hcid restarting).
            if !link.server.isUsable { sendCommand(HCICommands.disconnect(handle: link.handle)) }
        }
    }

    private func clientSecurity(of link: LinkSession) -> GATTClient.Security? {
        security.level(of: link.handle).map { GATTClient.Security(level: $0, canSecure: security.canSecure(link.handle)) }
    }

    func applyGATT(_ outputs: [GATTClient.Output], on link: LinkSession) {
        let tag = "link 0x\(String(link.handle, radix: 16))"
        for output in outputs {
            switch output {
            case .send(let bytes):
                send(link.attPDU(bytes), on: link.handle)
            case .finished(let id, .success(let outcome)):
                clientAnswers.removeValue(forKey: id)?.respond(Response(outcome))
            case .finished(let id, .failure(let failure)):
                clientAnswers.removeValue(forKey: id)?.fail(WireFailure(failure))
            case .secure:
                secure(link) { [unowned self] result in
                    if case .failure(let failure) = result { self.host.logger.warning("\(tag): could not secure the link: \(failure.message)") }
                    guard self.links[link.handle] === link else { return }
                    self.applyGATT(link.gatt.secured((try? result.get()) != nil, at: self.host.loop.uptime), on: link)
                }
            case .mtuExchanged(let mtu, let refused):
                if let refused { host.logger.info("\(tag): MTU exchange refused (\(refused)); ATT_MTU stays \(mtu)") }
                broadcastMTU(link)
            case .notification(let handle, let value, let indication):
                deliverNotification(handle, value: value, indication: indication, on: link.handle)
            case .serviceChanged(let range, let result):
                broadcastToClients(Event(serviceChanged: range, link: link.handle, result))
            case .serviceChangedFound(let valueHandle):
                applySecurity(security.peerServiceChangedFound(valueHandle, on: link.handle))
            case .disconnect:
                sendCommand(HCICommands.disconnect(handle: link.handle))
            case .log(let level, let message):
                host.logger.log(level, "\(tag): \(message)")
            }
        }
    }
}
