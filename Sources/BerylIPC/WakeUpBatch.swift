import BerylEventLoop

/// What one loop wake-up sends one peer, leaving as one datagram when the wake-up ends (the loop's zero timer runs once
/// the wake-up's other events are handled), or sooner when the next envelope would not fit. Both ends of a daemon's
/// sessions batch through it: a server's session and a daemon's connection.
final class WakeUpBatch {
    private let loop: EventLoop
    private var batch: EnvelopeBatch
    private var flushScheduled = false
    private let send: ([UInt8]) -> Void

    init(loop: EventLoop, capacity: Int, send: @escaping ([UInt8]) -> Void) {
        self.loop = loop
        batch = EnvelopeBatch(capacity: capacity)
        self.send = send
    }

    func add(_ encoded: [UInt8]) {
        if !batch.fits(encoded) { send(batch.take()) }
        batch.append(encoded)
        guard !flushScheduled else { return }
        flushScheduled = true
        do {
            try loop.after(.zero) { [weak self] in self?.flush() }
        } catch {
            flush()
        }
    }

    func flush() {
        flushScheduled = false
        guard !batch.isEmpty else { return }
        send(batch.take())
    }
}
