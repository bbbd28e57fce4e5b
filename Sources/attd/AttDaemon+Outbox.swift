import BerylAttWire
import BerylCore
import BerylGATT
import BerylIPC
import FoundationEssentials
import Glibc

/// The shell around the pacer and the router's deadlines. What attd sends hcid during one loop wake-up (paced PDUs
/// under credits, answers on the urgent lane) leaves as one datagram when the wake-up ends.
extension AttDaemon {
    func enqueuePaced(_ pdu: [UInt8], on handle: UInt16) { applyPacer(pacer.enqueue(pdu, on: handle)) }

    func applyPacer(_ outputs: [TransmitPacer.Output]) {
        for output in outputs {
            switch output {
            case .transmit(let transmission):
                queueACL(transmission.pdu, on: transmission.link, lane: .credited)
            case .writeReady(let link, let notices):
                for notice in notices { sendWriteReady(notice, link: link) }
            case .readyToUpdate(let notices):
                for notice in notices { session(for: notice.sender)?.send(.event(Event(readyToUpdate: notice))) }
            }
        }
    }

    /// A sender's writes without response have room again on the link: to its app's live channel, naming the
    /// peripheral as managerd does, or to the publisher that sent them for it.
    private func sendWriteReady(_ notice: TransmitPacer.ReadyNotice, link: UInt16) {
        let sessions = host.server?.sessions ?? [:]
        var event = Event(writeReady: notice, link: link)
        if notice.sender.onBehalfOf != 0, let channel = grants.liveChannel(of: notice.sender), let peripheral = grants.name(of: link) {
            event.att.gattWriteReady.peripheral = peripheral
            return sessions[channel]?.send(.event(event)) ?? ()
        }
        sessions[notice.sender.publisher]?.send(.event(event))
    }

    /// Credits hcid granted or returned.
    func credited(_ credits: Beryl_Ipc_V1_AclCredits) {
        let grants = credits.links.map { ACLCreditGrant(handle: UInt16(truncatingIfNeeded: $0.handle), credits: Int($0.credits), fresh: $0.fresh) }
        applyPacer(pacer.credited(grants, bufferSize: Int(credits.aclMtu)))
    }

    func queueACL(_ pdu: [UInt8], on handle: UInt16, lane: Beryl_Ipc_V1_AclLane) {
        guard hcid != nil else { return }
        if let full = outgoingACL.add(pdu, on: handle, lane: lane) { sendACL(full) }
        guard let aclFlush else { return flushACL() }
        aclFlush.schedule()
    }

    /// Sends the ACL of this wake-up now: before any other request to hcid, which must not overtake it (a Disconnect
    /// or a barrier after the keys of a pairing, a connection update after its signalling response).
    func flushACL() {
        if let batch = outgoingACL.take() { sendACL(batch) }
    }

    private func sendACL(_ request: Request) {
        hcid?.request(request) { [unowned self] result in
            // Credited PDUs are never refused; what fails is a link that ended meanwhile, which attd hears of itself.
            if case .failure(let error) = result { host.logger.info("ACL to hcid not all queued: \(error)") }
        }
    }

    /// Any other request to hcid: after the ACL this wake-up queued.
    func requestHcid(_ request: Request, completion: @escaping (Result<Response, IPCClientError>) -> Void) {
        flushACL()
        guard let hcid else { return completion(.failure(.closed)) }
        hcid.request(request, completion: completion)
    }

    /// Keeps one timer at the router's next deadline.
    func armDeadline() {
        deadlineTimer.arm(at: router.nextDeadline) { [unowned self] _ in deadlinePassed() }
    }

    private func deadlinePassed() {
        let now = host.loop.uptime
        for (id, answer) in router.expired(at: now) {
            host.logger.warning("publisher did not answer \(answer.isRead ? "read" : "write") \(id) in time")
            complete(answer, read: .failure(.unlikelyError), writeError: .unlikelyError)
        }
    }
}
