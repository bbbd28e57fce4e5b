import BerylWire
import FoundationEssentials
import Glibc

/// What attd sends hcid during one loop wake-up: every PDU, in order, as one request when the wake-up ends. A batch
/// stays well under the IPC's 64 KiB datagram cap however many links' credits came back at once.
public struct ACLBatch: Sendable {
    public static let maximumBytes = 48 * 1024
    /// What a PDU costs in the datagram besides its bytes (its handle, lane and framing).
    static let overheadBytes = 8

    private var pdus: [Beryl_Ipc_V1_SendAcl] = []
    private var bytes = 0

    public init() {}

    public var isEmpty: Bool { pdus.isEmpty }

    /// Adds a PDU; returns the batch gathered so far, to send first, when the PDU would take it past the cap.
    public mutating func add(_ pdu: [UInt8], on handle: UInt16, lane: Beryl_Ipc_V1_AclLane) -> Beryl_Ipc_V1_Request? {
        let full = bytes + pdu.count > Self.maximumBytes ? take() : nil
        pdus.append(.with { $0.handle = UInt32(handle); $0.pdu = Data(pdu); $0.lane = lane })
        bytes += pdu.count + Self.overheadBytes
        return full
    }

    /// The batch as hcid's request (one SendAcl, or a batch of them), emptied; nil when there is nothing.
    public mutating func take() -> Beryl_Ipc_V1_Request? {
        guard !pdus.isEmpty else { return nil }
        defer { removeAll() }
        var request = Beryl_Ipc_V1_Request()
        if pdus.count == 1 {
            request.hci.sendAcl = pdus[0]
        } else {
            request.hci.sendAclBatch.pdus = pdus
        }
        return request
    }

    /// A link that closed: what it still had here goes nowhere (its handle may soon name another link).
    public mutating func drop(link handle: UInt16) {
        pdus.removeAll { $0.handle == UInt32(handle) }
        bytes = pdus.reduce(0) { $0 + $1.pdu.count + Self.overheadBytes }
    }

    public mutating func removeAll() {
        pdus = []
        bytes = 0
    }
}
