import BerylCore
import BerylGATT
import BerylIPC
import Foundation

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
                for notice in notices {
                    var event = Event()
                    event.att.gattWriteReady = .with {
                        $0.connectionHandle = UInt32(link)
                        $0.count = notice.count
                        $0.onBehalfOf = notice.sender.onBehalfOf
                    }
                    host.server?.sessions[notice.sender.publisher]?.send(.event(event))
                }
            case .readyToUpdate(let notices):
                for notice in notices {
                    var event = Event()
                    event.att.readyToUpdate.count = notice.count
                    event.att.readyToUpdate.onBehalfOf = notice.sender.onBehalfOf
                    host.server?.sessions[notice.sender.publisher]?.send(.event(event))
                }
            }
        }
    }

    /// Credits hcid granted or returned.
    func credited(_ credits: Beryl_Ipc_V1_AclCredits) {
        let grants = credits.links.map { ACLCreditGrant(handle: UInt16(truncatingIfNeeded: $0.handle), credits: Int($0.credits), fresh: $0.fresh) }
        applyPacer(pacer.credited(grants, bufferSize: Int(credits.aclMtu)))
    }

    func queueACL(_ pdu: [UInt8], on handle: UInt16, lane: Beryl_Ipc_V1_AclLane) {
        guard hcid != nil else { return }
        // A datagram stays well under the IPC's 64 KiB cap however many links' credits came back at once.
        if outgoingACLBytes + pdu.count > Self.maximumBatchBytes { flushACL() }
        outgoingACL.append(.with { $0.handle = UInt32(handle); $0.pdu = Data(pdu); $0.lane = lane })
        outgoingACLBytes += pdu.count + 8
        guard let aclFlush else { return flushACL() }
        aclFlush.schedule()
    }

    static let maximumBatchBytes = 48 * 1024

    /// Sends the ACL of this wake-up now: before any other request to hcid, which must not overtake it (a Disconnect
    /// or a barrier after the keys of a pairing, a connection update after its signalling response).
    func flushACL() {
        let batch = outgoingACL
        outgoingACL = []
        outgoingACLBytes = 0
        guard let hcid, !batch.isEmpty else { return }
        var request = Request()
        if batch.count == 1 {
            request.hci.sendAcl = batch[0]
        } else {
            request.hci.sendAclBatch.pdus = batch
        }
        hcid.request(request) { [unowned self] result in
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

    /// What a link that closed still had waiting for the wake-up's end goes nowhere (its handle may soon name another).
    func dropQueuedACL(for handle: UInt16) {
        let before = outgoingACL.count
        outgoingACL.removeAll { $0.handle == UInt32(handle) }
        if outgoingACL.count != before { outgoingACLBytes = outgoingACL.reduce(0) { $0 + $1.pdu.count + 8 } }
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
