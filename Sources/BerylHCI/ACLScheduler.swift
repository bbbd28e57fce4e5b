/// Host → controller ACL flow control (Core Vol 4 Part E §4.1.1): fragment each L2CAP PDU to the
/// controller's buffer size, never have more packets in flight than it has buffers, and take turns
/// between connections so one busy link cannot starve the others.
final class ACLScheduler {
    private(set) var mtu = 27
    private(set) var buffers = 0
    private(set) var inFlight = 0
    private var perHandleInFlight: [UInt16: Int] = [:]
    private var queues: [UInt16: [ACLPacket]] = [:]
    private var rotation: [UInt16] = []

    var queuedFragments: Int { queues.values.reduce(0) { $0 + $1.count } }
    func queuedFragments(for handle: UInt16) -> Int { queues[handle]?.count ?? 0 }
    /// Fragments of this link not yet completed by the controller: queued here or in its buffers.
    func pending(for handle: UInt16) -> Int { (queues[handle]?.count ?? 0) + (perHandleInFlight[handle] ?? 0) }

    func configure(mtu: Int, buffers: Int) {
        self.mtu = max(mtu, 1)
        self.buffers = buffers
    }

    func reset() {
        inFlight = 0
        perHandleInFlight.removeAll()
        queues.removeAll()
        rotation.removeAll()
    }

    func isOpen(_ handle: UInt16) -> Bool { queues[handle] != nil }

    func open(_ handle: UInt16) {
        guard queues[handle] == nil else { return }
        queues[handle] = []
        perHandleInFlight[handle] = 0
        rotation.append(handle)
    }

    /// A disconnected link's packets in flight are flushed: their buffers are free again.
    func close(_ handle: UInt16) {
        inFlight -= perHandleInFlight[handle] ?? 0
        perHandleInFlight.removeValue(forKey: handle)
        queues.removeValue(forKey: handle)
        rotation.removeAll { $0 == handle }
    }

    func enqueue(handle: UInt16, pdu: [UInt8]) {
        var offset = 0
        repeat {
            let end = min(offset + mtu, pdu.count)
            // LE hosts start a PDU with "first non-automatically-flushable" (0b00) and continue with 0b01.
            queues[handle]?.append(ACLPacket(handle: handle, boundary: offset == 0 ? .firstNonFlushable : .continuing,
                                             data: Array(pdu[offset..<end])))
            offset = end
        } while offset < pdu.count
    }

    func nextPacket() -> ACLPacket? {
        guard inFlight < buffers else { return nil }
        for _ in 0..<rotation.count {
            let handle = rotation.removeFirst()
            rotation.append(handle)
            if var queue = queues[handle], !queue.isEmpty {
                let packet = queue.removeFirst()
                queues[handle] = queue
                inFlight += 1
                perHandleInFlight[handle, default: 0] += 1
                return packet
            }
        }
        return nil
    }

    /// Credits back from Number Of Completed Packets; returns a complaint when the count cannot be right.
    func completed(handle: UInt16, count: Int) -> String? {
        guard let sent = perHandleInFlight[handle] else { return "completed packets for unknown handle 0x\(String(handle, radix: 16)); ignored" }
        let credited = min(count, sent)
        perHandleInFlight[handle] = sent - credited
        inFlight -= credited
        return credited < count ? "controller completed \(count) packets on 0x\(String(handle, radix: 16)) with \(sent) in flight" : nil
    }
}
