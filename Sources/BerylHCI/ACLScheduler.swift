import BerylCore

/// How a client's PDU waits behind the controller's buffers.
public enum ACLLane: Equatable, Sendable {
    /// Refused when the link's queue is full (tools and tests that send ACL themselves).
    case bounded
    /// Paced traffic under the credits the host granted `client` on the link.
    case credited(HCIClientID)
    /// Answers a peer waits on (ATT responses and confirmations, SMP, signalling): ahead of queued PDUs on the link.
    case urgent
}

/// Host → controller ACL flow control (Core Vol 4 Part E §4.1.1): fragment each L2CAP PDU to the
/// controller's buffer size, never have more packets in flight than it has buffers, and take turns
/// between connections so one busy link cannot starve the others. Fragments of one PDU go out together
/// (an LE link carries one PDU's fragments in a row, Core Vol 3 Part A §7.2.1), so an urgent PDU goes
/// ahead of the PDUs queued, not into the middle of one being sent.
final class ACLScheduler {
    private(set) var mtu = 27
    private(set) var buffers = 0
    private(set) var inFlight = 0

    private struct Queued {
        var pdu: [UInt8]
        var offset = 0
        var creditedTo: HCIClientID?
    }

    private struct Link {
        var sending: Queued?
        var urgent: [Queued] = []
        var paced: [Queued] = []
        var pacedHead = 0
        var inFlight = 0
        /// Fragments queued here, not yet handed to the controller.
        var queuedFragments = 0
        /// Credited fragments queued here, per client: what each has spent and not had back.
        var spent: [HCIClientID: Int] = [:]

        mutating func next() -> Queued? {
            if !urgent.isEmpty { return urgent.removeFirst() }
            guard pacedHead < paced.count else { return nil }
            let next = paced[pacedHead]
            pacedHead += 1
            if pacedHead >= 64, pacedHead * 2 >= paced.count {
                paced.removeFirst(pacedHead)
                pacedHead = 0
            }
            return next
        }
    }

    private var links: [UInt16: Link] = [:]
    private var rotation: [UInt16] = []
    private var nextTurn = 0
    /// Credits handed back as fragments left for the controller, per client and link, until the host reports them.
    private(set) var returned: [HCIClientID: [UInt16: Int]] = [:]

    var queuedFragments: Int { links.values.reduce(0) { $0 + $1.queuedFragments } }
    func queuedFragments(for handle: UInt16) -> Int { links[handle]?.queuedFragments ?? 0 }
    /// Fragments of this link not yet completed by the controller: queued here or in its buffers.
    func pending(for handle: UInt16) -> Int { links[handle].map { $0.queuedFragments + $0.inFlight } ?? 0 }
    /// Credited fragments `client` has queued on the link.
    func spent(by client: HCIClientID, on handle: UInt16) -> Int { links[handle]?.spent[client] ?? 0 }

    func fragments(of length: Int) -> Int { ACLBuffers.needed(forPDUOf: length, bufferSize: mtu) }

    func configure(mtu: Int, buffers: Int) {
        self.mtu = max(mtu, 1)
        self.buffers = buffers
    }

    func reset() {
        inFlight = 0
        links.removeAll()
        rotation.removeAll()
        returned.removeAll()
    }

    var openHandles: [UInt16] { rotation }

    func isOpen(_ handle: UInt16) -> Bool { links[handle] != nil }

    func open(_ handle: UInt16) {
        guard links[handle] == nil else { return }
        links[handle] = Link()
        rotation.append(handle)
    }

    /// A disconnected link's packets in flight are flushed: their buffers are free again.
    func close(_ handle: UInt16) {
        guard let link = links.removeValue(forKey: handle) else { return }
        inFlight -= link.inFlight
        rotation.removeAll { $0 == handle }
        for client in returned.keys { returned[client]?[handle] = nil }
    }

    /// A client went away: what it queued still goes out, but no credit comes back to it.
    func forget(_ client: HCIClientID) {
        for handle in rotation { links[handle]?.spent[client] = nil }
        returned[client] = nil
    }

    func enqueue(handle: UInt16, pdu: [UInt8], lane: ACLLane) {
        guard var link = links[handle] else { return }
        let count = fragments(of: pdu.count)
        link.queuedFragments += count
        switch lane {
        case .bounded: link.paced.append(Queued(pdu: pdu))
        case .urgent: link.urgent.append(Queued(pdu: pdu))
        case .credited(let client):
            link.spent[client, default: 0] += count
            link.paced.append(Queued(pdu: pdu, creditedTo: client))
        }
        links[handle] = link
    }

    func clearReturned(to client: HCIClientID, on handle: UInt16) { returned[client]?[handle] = nil }

    func takeReturned() -> [HCIClientID: [UInt16: Int]] {
        defer { returned.removeAll(keepingCapacity: true) }
        return returned
    }

    func nextPacket() -> ACLPacket? {
        guard inFlight < buffers, !rotation.isEmpty else { return nil }
        for _ in 0..<rotation.count {
            let handle = rotation[nextTurn % rotation.count]
            nextTurn = (nextTurn + 1) % rotation.count
            guard var link = links[handle] else { continue }
            guard var current = link.sending ?? link.next() else { continue }
            let end = min(current.offset + mtu, current.pdu.count)
            // LE hosts start a PDU with "first non-automatically-flushable" (0b00) and continue with 0b01.
            let packet = ACLPacket(handle: handle, boundary: current.offset == 0 ? .firstNonFlushable : .continuing,
                                   data: Array(current.pdu[current.offset..<end]))
            current.offset = end
            link.sending = end < current.pdu.count ? current : nil
            link.queuedFragments -= 1
            link.inFlight += 1
            if let client = current.creditedTo, let spent = link.spent[client] {
                link.spent[client] = spent - 1
                returned[client, default: [:]][handle, default: 0] += 1
            }
            links[handle] = link
            inFlight += 1
            return packet
        }
        return nil
    }

    /// Credits back from Number Of Completed Packets; returns a complaint when the count cannot be right.
    func completed(handle: UInt16, count: Int) -> String? {
        guard let sent = links[handle]?.inFlight else { return "completed packets for unknown handle 0x\(String(handle, radix: 16)); ignored" }
        let credited = min(count, sent)
        links[handle]?.inFlight = sent - credited
        inFlight -= credited
        return credited < count ? "controller completed \(count) packets on 0x\(String(handle, radix: 16)) with \(sent) in flight" : nil
    }
}
