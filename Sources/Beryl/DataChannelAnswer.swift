import BerylWire

/// attd's answer to a value the app sent on its data channel, as the ordered send queue takes it: sent; the queue
/// full (the ready event follows); to send again (sent before the latest ready, or refused by the grant, when it goes
/// again through managerd); or failed for good, with the error the app is told.
struct DataChannelAnswer<Item: Equatable & Sendable>: Equatable {
    var queueAnswer: OrderedSendQueue<Item>.Answer
    /// The grant did not cover it (revoked, or outside it): managerd carries the app's values until attd says otherwise.
    var grantRefused = false
    var failure: BerylError?

    init(_ result: Result<Response, IPCClientError>) {
        switch result {
        case .success:
            queueAnswer = .sent
        case .failure(.remote(let code, let message, let field, let detail)):
            switch (code, detail.grantReason) {
            case (_, .revoked), (_, .outsideGrant):
                queueAnswer = .sendAgain
                grantRefused = true
            case (.busy, _):
                queueAnswer = .queueFull
            case (.cancelled, _):
                queueAnswer = .sendAgain
            default:
                queueAnswer = .failed
                failure = BerylError(remote: code, message: message, field: field, detail: detail)
            }
        case .failure(let error):
            queueAnswer = .failed
            failure = BerylError(error)
        }
    }
}

extension Result {
    var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
