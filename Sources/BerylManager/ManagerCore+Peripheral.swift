import BerylCore

/// The peripheral role's requests whose answer depends on the managers' state: what a remote central's subscription
/// means for its value's owner, whether an app's service stayed published, whose pairing an app may answer.
extension ManagerCore {
    /// A remote central's subscription change attd reported: for the value's owner, as its app hears it and its record
    /// keeps it (the central named by the link's identifier, the link's longest update) — or nil when no manager owns
    /// the value, or the link is not one managerd has: attd tells of a link before any subscription on it and of its
    /// end after, so a change on a link managerd does not have is one it ended itself (hcid went) and is stale.
    public mutating func subscriptionRouted(_ report: ReportedSubscription)
        -> (owner: ManagerKey, subscription: PreservedState.Subscription, outputs: [Output])? {
        guard let owner = router.owner(of: report.valueHandle), let central = book.identifier(for: report.link) else {
            return nil
        }
        let subscription = PreservedState.Subscription(central: central, valueHandle: report.valueHandle, notify: report.notify,
                                                       indicate: report.indicate,
                                                       maximumUpdateLength: UInt16(truncatingIfNeeded: maximumUpdateLength(on: report.link)))
        return (owner, subscription, subscriptionChanged(subscription))
    }

    /// What becomes of a remote central's read or write (`handles`: the read's, or each write's of an Execute Write).
    public enum RemoteRequestStep: Equatable, Sendable {
        /// To the owner's app, with the central as the app names it (empty while the link is unknown) and the link's
        /// longest update.
        case toApp(ManagerKey, central: String, maximumUpdateLength: UInt32)
        /// No app can answer now: attd answers the central with this ATT error.
        case refuse(attError: UInt8)
        /// A write without response no app takes: nothing to answer.
        case drop
    }

    /// Unlikely Error for a request no app can answer now (Core Vol 3 Part F §3.4.1.1), as Core Bluetooth refuses a
    /// suspended app's dynamic reads.
    public mutating func remoteRequestRouted(_ id: UInt64, _ request: PeripheralRouter.Request, onLink link: UInt16, handles: [UInt16],
                                             expectsAnswer: Bool, isLive: (UInt64) -> Bool) -> RemoteRequestStep {
        switch routeRemoteRequest(id, request, handles: handles, expectsAnswer: expectsAnswer, isLive: isLive) {
        case .app(let owner):
            .toApp(owner, central: book.identifier(for: link) ?? "", maximumUpdateLength: maximumUpdateLength(on: link))
        case .unlikelyError: .refuse(attError: 0x0E)
        case .dropped: .drop
        }
    }

    /// attd published the service an app's manager asked for. `kept` is false when it was withdrawn instead (the
    /// app's session closed, or the stack left poweredOn and cleared the app's services, before attd answered): the
    /// app is refused and adds it again at poweredOn.
    public mutating func appServicePublished(_ service: PreservedState.PublishedService?, at range: ClosedRange<UInt16>,
                                             owner: ManagerKey) -> (kept: Bool, outputs: [Output]) {
        let outputs = servicePublished(service, at: range, owner: owner)
        return (router.owner(of: range.lowerBound) == owner, outputs)
    }

    /// managerd restarted under an app whose data channel attd kept, with what the app had (att.proto's
    /// AdoptDataChannel): its services are its own again as if it had added them again — nothing preserved for it is
    /// published again beside them — and it holds the links it held and hears the values it subscribed to, without
    /// hearing that it connected. Returns the links it holds now (one that went meanwhile is left out) and what the
    /// change means.
    public mutating func adopted(_ session: UInt64, manager: UInt32, services: [PreservedState.PublishedService],
                                 heldLinks: [UInt16], heard: [RemoteSubscriptions.Value]) -> (heldLinks: [UInt16], outputs: [Output]) {
        let owner = ManagerKey(.session(session), manager: manager)
        pendingRepublish = pendingRepublish.filter { $0.key.holder != owner.holder }
        var outputs: [Output] = []
        for service in services {
            guard let range = service.handles else { continue }
            router.publish(range, owner: owner)
            serviceSpecs[range.lowerBound] = service
        }
        if !services.isEmpty { restoration.appPublished(heldBy: owner.holder) }
        let held = connections.adopt(owner, links: heldLinks)
        for value in heard where held.contains(value.link) { remoteSubscriptions.adopt(value, by: owner.holder) }
        outputs += persisting(owner.holder)
        return (held, outputs)
    }

    /// The link an app's answer to a pairing prompt goes to: the one with `peer` whose pairing the session hears —
    /// never another app's, nor a link a lab session holds (`isLabLink`), whose pairing is the lab's to answer.
    public func pairingLink(with peer: String, answeredBy session: UInt64, isLabLink: (UInt16) -> Bool) -> UInt16? {
        guard let link = book.link(for: peer), !isLabLink(link.handle),
              pairingAudience(ofLink: link.handle)?.holders.contains(.session(session)) == true else { return nil }
        return link.handle
    }

    /// setDesiredConnectionLatency(_:for:) names a central: the link on which this stack is its peripheral.
    public func link(toCentral central: String) -> ConnectionBook.Link? {
        book.link(for: central).flatMap { $0.isCentral ? nil : $0 }
    }
}
