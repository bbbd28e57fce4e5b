import BerylGATT
import BerylIPC
import Foundation

/// The shell around the pacer and the router's deadlines: transmissions go to hcid, and their fate comes back.
extension AttDaemon {
    func enqueuePaced(_ pdu: [UInt8], on handle: UInt16) { applyPacer(pacer.enqueue(pdu, on: handle)) }

    func applyPacer(_ outputs: [TransmitPacer.Output]) {
        for output in outputs {
            switch output {
            case .transmit(let transmission):
                var request = Request()
                request.hci.sendAcl.handle = UInt32(transmission.link)
                request.hci.sendAcl.pdu = Data(transmission.pdu)
                hcid?.request(request) { [unowned self] result in
                    var busy = false
                    switch result {
                    case .success: break
                    case .failure(.remote(.busy, _, _, _)): busy = true
                    case .failure(let error): self.host.logger.warning("paced PDU to 0x\(String(transmission.link, radix: 16)) refused: \(error)")
                    }
                    self.applyPacer(self.pacer.transmitted(transmission, busy: busy, at: self.host.loop.uptime))
                }
            case .writeReady(let link):
                var event = Event()
                event.att.gattWriteReady.connectionHandle = UInt32(link)
                host.server?.broadcast(event)
            case .readyToUpdate(let publishers):
                var event = Event()
                event.att.readyToUpdate = .init()
                for publisher in publishers { host.server?.sessions[publisher]?.send(.event(event)) }
            }
        }
        armDeadline()
    }

    /// Keeps one timer at the earliest of the router's and the pacer's deadlines.
    func armDeadline() {
        deadlineTimer.arm(at: [router.nextDeadline, pacer.nextDeadline].compactMap { $0 }.min()) { [unowned self] _ in deadlinePassed() }
    }

    private func deadlinePassed() {
        let now = host.loop.uptime
        for (id, answer) in router.expired(at: now) {
            host.logger.warning("publisher did not answer \(answer.isRead ? "read" : "write") \(id) in time")
            complete(answer, read: .failure(.unlikelyError), writeError: .unlikelyError)
        }
        applyPacer(pacer.tick(at: now))
    }
}
