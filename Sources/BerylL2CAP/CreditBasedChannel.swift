import BerylCore

/// One end of a connection-oriented channel in LE Credit Based (or Enhanced Credit Based) Flow Control mode, sans-IO:
/// the credits each way, SDUs cut into K-frames as credits allow, and K-frames put back together into SDUs
/// (Core Vol 3 Part A §3.4, §10.1). What it receives stays within its window: a K-frame's credit goes back to the peer
/// only once the app has taken the SDU it carried, so bytes the app has not read hold back the peer, and no more than
/// `window` K-frames of `local.mps` octets are ever held.
public struct CreditBasedChannel: Sendable {
    /// One side's end: its CID, and the largest SDU (MTU) and K-frame payload (MPS) it takes.
    public struct Endpoint: Equatable, Sendable {
        public var cid: UInt16
        public var mtu: UInt16
        public var mps: UInt16

        public init(cid: UInt16, mtu: UInt16, mps: UInt16) {
            self.cid = cid
            self.mtu = mtu
            self.mps = mps
        }
    }

    /// What a peer did that ends the channel (Core Vol 3 Part A §10.1): the channel is disconnected.
    public enum Violation: Error, Equatable, Sendable {
        /// A K-frame sent while it held no credit.
        case frameWithoutCredit
        /// A K-frame whose payload is longer than the MPS this end gave.
        case frameOverMPS(Int)
        /// An SDU Length above the MTU this end gave.
        case sduOverMTU(Int)
        /// K-frames carrying more than their SDU Length said.
        case sduOverrun(Int)
        /// A first K-frame too short to carry the SDU Length.
        case missingSDULength
        /// Credits that would take the peer's grant above 65,535.
        case creditOverflow
    }

    public enum SendRefusal: Error, Equatable, Sendable {
        /// Longer than the peer's MTU.
        case sduOverMTU(Int, mtu: UInt16)
        /// The queue holds `sendQueueLimit` octets already: wait for credits to drain it.
        case queueFull
    }

    /// A whole SDU received, and the K-frames it took (their credits go back once the app has it).
    public struct ReceivedSDU: Equatable, Sendable {
        public var bytes: [UInt8]
        public var frames: Int

        public init(bytes: [UInt8], frames: Int) {
            self.bytes = bytes
            self.frames = frames
        }
    }

    /// This end; its MTU and MPS can grow by reconfiguration (enhanced channels).
    public internal(set) var local: Endpoint
    /// The peer's end; its MTU and MPS can change by reconfiguration (enhanced channels).
    public internal(set) var remote: Endpoint
    /// K-frames this end may still send (the peer's grant).
    public private(set) var sendCredits: Int
    /// K-frames the peer may still send (this end's grant, not yet used).
    public private(set) var peerCredits: Int
    /// The most K-frames this end holds at once: granted, in flight, or held until the app takes their SDU.
    public let window: Int
    /// Octets of SDUs waiting for credits that `send` accepts before it refuses with `queueFull`.
    public let sendQueueLimit: Int

    /// K-frames whose SDU is not complete or not taken yet.
    public private(set) var framesHeld = 0
    private var owedCredits = 0
    private var assembling: [UInt8] = []
    private var expectedLength: Int?
    private var framesInSDU = 0
    private var outbound: [[UInt8]] = []
    private var outboundHead = 0
    private var sentOfHead = 0
    public private(set) var queuedBytes = 0

    /// The largest credit count a peer may hold (Core Vol 3 Part A §4.24).
    public static let maxCredits = 65_535

    /// - Parameters:
    ///   - window: this end's initial credits; raised to what one SDU of `local.mtu` needs, so that the peer can
    ///     always finish an SDU it started.
    ///   - sendCredits: the peer's initial credits.
    public init(local: Endpoint, remote: Endpoint, window: Int, sendCredits: Int, sendQueueLimit: Int = 64 * 1024) {
        self.local = local
        self.remote = remote
        self.window = min(Self.maxCredits, max(window, Self.framesPerSDU(mtu: Int(local.mtu), mps: Int(local.mps))))
        peerCredits = self.window
        self.sendCredits = min(sendCredits, Self.maxCredits)
        self.sendQueueLimit = sendQueueLimit
    }

    /// K-frames of `mps` octets that an SDU of `mtu` octets takes, with its 2-octet SDU Length.
    public static func framesPerSDU(mtu: Int, mps: Int) -> Int { (mtu + 2 + mps - 1) / max(mps, 1) }

    // MARK: Receiving

    /// A K-frame's information payload from the peer: a whole SDU once its last K-frame is in.
    public mutating func receive(_ payload: [UInt8]) -> Result<ReceivedSDU?, Violation> {
        // Core Vol 3 Part A §10.1: a K-frame with no credit, or longer than the MPS, ends the channel.
        guard peerCredits > 0 else { return .failure(.frameWithoutCredit) }
        guard payload.count <= Int(local.mps) else { return .failure(.frameOverMPS(payload.count)) }
        peerCredits -= 1
        framesHeld += 1
        framesInSDU += 1
        var data = payload[...]
        if expectedLength == nil {
            guard payload.count >= 2 else { return .failure(.missingSDULength) }
            let length = Int(payload[0]) | Int(payload[1]) << 8
            // Core Vol 3 Part A §3.4.3: an SDU Length above the MTU ends the channel.
            guard length <= Int(local.mtu) else { return .failure(.sduOverMTU(length)) }
            expectedLength = length
            assembling.reserveCapacity(length)
            data = data.dropFirst(2)
        }
        let expected = expectedLength ?? 0
        guard assembling.count + data.count <= expected else { return .failure(.sduOverrun(assembling.count + data.count)) }
        assembling.append(contentsOf: data)
        guard assembling.count == expected else { return .success(nil) }
        let sdu = ReceivedSDU(bytes: assembling, frames: framesInSDU)
        assembling = []
        expectedLength = nil
        framesInSDU = 0
        return .success(sdu)
    }

    /// The app took an SDU: the credits of its K-frames are owed to the peer. The credits to send now (a Flow Control
    /// Credit Indication for `local.cid`), batched until half the window is owed or the peer has none left.
    public mutating func consumed(_ sdu: ReceivedSDU) -> UInt16? {
        let frames = min(sdu.frames, framesHeld)
        framesHeld -= frames
        owedCredits += frames
        guard owedCredits > 0, owedCredits >= max(1, window / 2) || peerCredits == 0 else { return nil }
        let credits = owedCredits
        owedCredits = 0
        peerCredits += credits
        return UInt16(credits)
    }

    // MARK: Sending

    /// The peer's Flow Control Credit Indication (Core Vol 3 Part A §4.24): a grant above 65,535 ends the channel.
    public mutating func addSendCredits(_ credits: UInt16) throws(Violation) {
        guard sendCredits + Int(credits) <= Self.maxCredits else { throw .creditOverflow }
        sendCredits += Int(credits)
    }

    /// Whether `send` takes another SDU now.
    public var hasSpace: Bool { queuedBytes < sendQueueLimit }

    /// Queues an SDU for the peer; it goes out in K-frames as credits allow (`takeFrames`).
    public mutating func send(_ sdu: [UInt8]) throws(SendRefusal) {
        guard sdu.count <= Int(remote.mtu) else { throw .sduOverMTU(sdu.count, mtu: remote.mtu) }
        // One SDU is taken into an empty queue whatever its size, or an SDU above the limit could never go.
        guard queuedBytes == 0 || queuedBytes + sdu.count <= sendQueueLimit else { throw .queueFull }
        outbound.append(sdu)
        queuedBytes += sdu.count
    }

    /// The K-frame payloads the credits allow now, at most `limit`, cut at the peer's MPS as it is when they are taken
    /// (a reconfiguration applies to the frames after it).
    public mutating func takeFrames(limit: Int = .max) -> [[UInt8]] {
        var frames: [[UInt8]] = []
        while sendCredits > 0, frames.count < limit, outboundHead < outbound.count {
            let sdu = outbound[outboundHead]
            let mps = Int(remote.mps)
            var frame: [UInt8]
            if sentOfHead == 0 {
                let take = min(sdu.count, mps - 2)
                frame = [UInt8(sdu.count & 0xFF), UInt8(sdu.count >> 8)]
                frame.reserveCapacity(take + 2)
                frame.append(contentsOf: sdu[0..<take])
                sentOfHead = take
            } else {
                let take = min(sdu.count - sentOfHead, mps)
                frame = Array(sdu[sentOfHead..<(sentOfHead + take)])
                sentOfHead += take
            }
            sendCredits -= 1
            frames.append(frame)
            if sentOfHead == sdu.count {
                queuedBytes -= sdu.count
                outbound[outboundHead] = []
                outboundHead += 1
                sentOfHead = 0
                if outboundHead > 64, outboundHead * 2 > outbound.count {
                    outbound.removeFirst(outboundHead)
                    outboundHead = 0
                }
            }
        }
        return frames
    }

    /// Whether SDUs wait for credits.
    public var isSendQueueEmpty: Bool { outboundHead == outbound.count }
}
