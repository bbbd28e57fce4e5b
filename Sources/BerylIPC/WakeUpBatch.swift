import BerylEventLoop

/// What one loop wake-up sends one peer, leaving as one datagram when the wake-up ends (after the wake-up's other
/// callbacks, without a timer), or sooner when the next envelope would not fit. Both ends of a daemon's
/// sessions batch through it: a server's session and a daemon's connection.
final class WakeUpBatch {
    private var batch: EnvelopeBatch
    private let send: ([UInt8]) -> Void
    /// nil when the loop could not make one: every envelope then leaves on its own.
    private var endOfWakeUp: EndOfWakeUpTask?

    init(loop: EventLoop, capacity: Int, send: @escaping ([UInt8]) -> Void) {
        batch = EnvelopeBatch(capacity: capacity)
        self.send = send
        endOfWakeUp = try? loop.endOfWakeUpTask { [weak self] in self?.flush() }
    }

    deinit { endOfWakeUp?.cancel() }

    func add(_ encoded: [UInt8]) {
        if !batch.fits(encoded) { send(batch.take()) }
        batch.append(encoded)
        guard let endOfWakeUp else { return flush() }
        endOfWakeUp.schedule()
    }

    func flush() {
        guard !batch.isEmpty else { return }
        send(batch.take())
    }
}
