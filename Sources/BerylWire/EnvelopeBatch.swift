/// What one side sends the other during one loop wake-up, framed as one datagram: a single envelope as it is, several
/// as an Envelope whose body is a Batch. Each envelope is encoded once; the batch's framing is written around the bytes
/// (protobuf's length-delimited fields), so batching costs no second encode.
public struct EnvelopeBatch {
    /// The datagram cap less room for the framing: a batch never grows past what one datagram carries.
    public let capacity: Int
    private var encoded: [[UInt8]] = []
    private var framedBytes = 0

    public init(capacity: Int) { self.capacity = capacity }

    public var isEmpty: Bool { encoded.isEmpty }
    public var count: Int { encoded.count }

    /// Envelopes a server takes in one batch (each counts against its per-wake-up read budget).
    public static let maxEnvelopes = 1024

    /// Whether `bytes` (an encoded envelope) fits beside what is here.
    public func fits(_ bytes: [UInt8]) -> Bool {
        encoded.isEmpty || (encoded.count < Self.maxEnvelopes && framedBytes + Self.framedSize(bytes.count) + 10 <= capacity)
    }

    public mutating func append(_ bytes: [UInt8]) {
        encoded.append(bytes)
        framedBytes += Self.framedSize(bytes.count)
    }

    /// The datagram, and the batch emptied.
    public mutating func take() -> [UInt8] {
        defer {
            encoded.removeAll(keepingCapacity: true)
            framedBytes = 0
        }
        if encoded.count == 1 { return encoded[0] }
        var datagram: [UInt8] = []
        datagram.reserveCapacity(framedBytes + 6)
        datagram.append(Self.batchTag)
        Self.appendVarint(UInt64(framedBytes), to: &datagram)
        for bytes in encoded {
            datagram.append(Self.envelopeTag)
            Self.appendVarint(UInt64(bytes.count), to: &datagram)
            datagram += bytes
        }
        return datagram
    }

    /// Envelope.batch is field 5, Batch.envelopes field 1, both length-delimited (wire type 2).
    static let batchTag: UInt8 = 5 << 3 | 2
    static let envelopeTag: UInt8 = 1 << 3 | 2

    static func framedSize(_ length: Int) -> Int { 1 + varintSize(UInt64(length)) + length }

    static func varintSize(_ value: UInt64) -> Int {
        var size = 1
        var rest = value >> 7
        while rest != 0 { size += 1; rest >>= 7 }
        return size
    }

    static func appendVarint(_ value: UInt64, to bytes: inout [UInt8]) {
        var rest = value
        while rest >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: rest) | 0x80)
            rest >>= 7
        }
        bytes.append(UInt8(rest))
    }
}

extension Envelope {
    /// The envelopes a datagram carried, in order: a batch's (a batch inside it is dropped: batches do not nest), or
    /// this one.
    public var unbatched: [Envelope] {
        guard case .batch(let batch)? = body else { return [self] }
        return batch.envelopes.filter { if case .batch? = $0.body { false } else { true } }
    }
}
