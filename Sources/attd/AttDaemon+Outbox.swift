import BerylIPC
import Foundation

/// PDUs no one answers (notifications, writes without response) are paced per link: hcid's queue is bounded and says
/// busy when full, so attd keeps a short outbox per link, retries what hcid refused, and refuses more than the outbox
/// holds. The app hears when there is room again (Core Bluetooth's updateValue returning false and
/// peripheralManagerIsReady(toUpdateSubscribers:); canSendWriteWithoutResponse and peripheralIsReady(toSendWriteWithoutResponse:)).
struct Outbox {
    static let capacity = 32
    static let inFlightLimit = 8
    /// Responses, indications and signalling hcid refused while paced traffic filled its queue: they go first and
    /// are never dropped (a lost response stalls the peer's bearer for 30 s, Core Vol 3 Part F §3.3.3).
    var urgent: [[UInt8]] = []
    var queued: [[UInt8]] = []
    var inFlight = 0
    var retryScheduled = false
    var refusedWrites = false

    var hasRoom: Bool { queued.count + inFlight < Self.capacity }
}

extension AttDaemon {
    func hasRoom(on handle: UInt16) -> Bool { outboxes[handle, default: Outbox()].hasRoom }

    func enqueuePaced(_ pdu: [UInt8], on handle: UInt16) {
        outboxes[handle, default: Outbox()].queued.append(pdu)
        pumpOutbox(handle)
    }

    /// A PDU that is not paced (an answer, an indication) which hcid refused as busy: sent again before paced ones.
    func retryUrgent(_ pdu: [UInt8], on handle: UInt16) {
        outboxes[handle, default: Outbox()].urgent.append(pdu)
        pumpOutbox(handle)
    }

    func pumpOutbox(_ handle: UInt16) {
        while var box = outboxes[handle], box.inFlight < Outbox.inFlightLimit, !box.urgent.isEmpty || !box.queued.isEmpty {
            let isUrgent = !box.urgent.isEmpty
            let pdu = isUrgent ? box.urgent.removeFirst() : box.queued.removeFirst()
            box.inFlight += 1
            outboxes[handle] = box
            var request = Request()
            request.hci.sendAcl.handle = UInt32(handle)
            request.hci.sendAcl.pdu = Data(pdu)
            hcid?.request(request) { [unowned self] result in
                guard var box = self.outboxes[handle] else { return }
                box.inFlight -= 1
                if case .failure(.remote(.busy, _, _, _)) = result {
                    // hcid's queue is full: try again shortly, in order.
                    if isUrgent { box.urgent.insert(pdu, at: 0) } else { box.queued.insert(pdu, at: 0) }
                    if !box.retryScheduled {
                        box.retryScheduled = true
                        _ = try? self.host.loop.after(.milliseconds(2)) { [unowned self] in
                            self.outboxes[handle]?.retryScheduled = false
                            self.pumpOutbox(handle)
                        }
                    }
                    self.outboxes[handle] = box
                    return
                }
                if case .failure(let error) = result { self.host.logger.warning("paced PDU to 0x\(String(handle, radix: 16)) refused: \(error)") }
                self.outboxes[handle] = box
                if !box.retryScheduled { self.pumpOutbox(handle) }
                self.announceRoom(handle)
            }
        }
    }

    private func announceRoom(_ handle: UInt16) {
        guard let box = outboxes[handle], box.hasRoom else { return }
        if box.refusedWrites {
            outboxes[handle]?.refusedWrites = false
            var event = Event()
            event.att.gattWriteReady.connectionHandle = UInt32(handle)
            host.server?.broadcast(event)
        }
        guard !notifyRefused.isEmpty, outboxes.values.allSatisfy(\.hasRoom) else { return }
        let waiting = notifyRefused
        notifyRefused.removeAll()
        var event = Event()
        event.att.readyToUpdate = .init()
        for session in waiting { host.server?.sessions[session]?.send(.event(event)) }
    }
}
