import BerylCore

/// What bonded peers leave behind besides keys: SignCounters (Core Vol 3 Part C §10.4), subscriptions
/// (Part G §3.3.3.3) and database changes they have not yet heard of (Part G §7.1).
extension SecurityManager {
    /// Forgets a bond; links with that peer stay up, no longer bonded.
    public func removeBond(_ identity: DeviceAddress) throws(SecurityRequestError) -> [SecurityOutput] {
        guard bonds.contains(where: { $0.identity == identity }) else { throw .noBond }
        do {
            try storage?.remove(identity)
        } catch {
            throw .storage("\(error)")
        }
        forget(identity)
        var outputs: [SecurityOutput] = []
        for link in links.keys.sorted() where links[link]?.bond == identity {
            links[link]?.bond = nil
            outputs += [.levelChanged(link: link, level(of: link)!), .peerSigning(link: link, nil)]
        }
        return outputs + [.log(.info, "bond with \(identity) removed")]
    }

    func signingKey(of bond: Bond) -> PeerSigning? {
        guard let csrk = bond.csrk else { return nil }
        let last = (try? storage?.peerSignCounter(bond.identity)) ?? nil
        return PeerSigning(csrk: csrk, lastCounter: last, authenticated: bond.authenticated)
    }

    /// The CSRK and SignCounter for a signed write to this link's bonded peer; the counter is spent before it is returned.
    public func takeSigningKey(for link: UInt16) -> Result<(csrk: [UInt8], counter: UInt32), SigningRefusal> {
        guard let identity = links[link]?.bond, let bond = bonds.first(where: { $0.identity == identity }), let csrk = bond.localCSRK else {
            return .failure(.noKey)
        }
        guard let counter = (try? storage?.takeLocalSignCounter(identity)) ?? nil else { return .failure(.counterExhausted) }
        return .success((csrk, counter))
    }

    public func peerSignCounterAccepted(_ counter: UInt32, on link: UInt16) -> [SecurityOutput] {
        guard let identity = links[link]?.bond else { return [] }
        do {
            try storage?.setPeerSignCounter(identity, counter)
            return []
        } catch {
            return [.log(.error, "bond store: cannot keep \(identity)'s SignCounter: \(error)")]
        }
    }

    /// The link's GATT client found the peer's Service Changed: a bonded peer's is kept for its next links.
    public func peerServiceChangedFound(_ valueHandle: UInt16, on link: UInt16) -> [SecurityOutput] {
        guard links[link] != nil else { return [] }
        links[link]?.peerServiceChanged = valueHandle
        guard let identity = links[link]?.bond else { return [] }
        return keepPeerServiceChanged(valueHandle, for: identity)
    }

    func keepPeerServiceChanged(_ valueHandle: UInt16, for identity: DeviceAddress) -> [SecurityOutput] {
        do {
            try storage?.setPeerServiceChanged(identity, valueHandle)
            return []
        } catch {
            return [.log(.error, "bond store: cannot keep where \(identity)'s Service Changed is: \(error)")]
        }
    }

    /// The link's ATT server changed a subscription: a bonded peer's are kept.
    public func clientStateChanged(on link: UInt16, configurations: [UInt16: UInt16], features: [UInt8]) -> [SecurityOutput] {
        guard links[link] != nil else { return [] }
        links[link]?.configurations = configurations
        links[link]?.features = features
        return persistClientState(of: link)
    }

    func persistClientState(of link: UInt16) -> [SecurityOutput] {
        guard let state = links[link], let identity = state.bond, let storage else { return [] }
        do {
            try storage.saveClientState(identity, configurations: state.configurations, features: state.features)
            return []
        } catch {
            return [.log(.error, "bond store: cannot save \(identity)'s subscriptions: \(error)")]
        }
    }

    func restoreClientState(of identity: DeviceAddress, on link: UInt16) -> [SecurityOutput] {
        guard let storage else { return [] }
        do {
            let (configurations, features) = try storage.clientState(identity)
            links[link]?.configurations = configurations
            links[link]?.features = features
            var outputs: [SecurityOutput] = [.restoreClientState(link: link, configurations: configurations, features: features)]
            // Our client's side of the bond: where the peer's Service Changed is.
            if let handle = try storage.peerServiceChanged(identity) { outputs.append(.peerServiceChanged(link: link, valueHandle: handle)) }
            if !configurations.isEmpty { outputs.append(.log(.info, "restored \(configurations.count) subscription(s) of bonded \(identity)")) }
            if let range = try storage.takePendingServiceChange(identity) { outputs.append(.indicateServiceChanged(link: link, range)) }
            return outputs
        } catch {
            return [.log(.error, "bond store: cannot restore \(identity)'s GATT state: \(error)")]
        }
    }

    /// A bonded peer's stored subscriptions, for a service published while it is connected.
    public func storedConfigurations(on link: UInt16) -> [UInt16: UInt16]? {
        guard let identity = links[link]?.bond, let storage else { return nil }
        return try? storage.clientState(identity).configurations
    }

    /// The database changed: bonded peers that are away and subscribed to Service Changed hear of it when they return.
    public func databaseChanged(_ range: ClosedRange<UInt16>, serviceChangedValueHandle: UInt16?) -> [SecurityOutput] {
        guard let storage, let changed = serviceChangedValueHandle else { return [] }
        let present = Set(links.values.compactMap(\.bond))
        var outputs: [SecurityOutput] = []
        for bond in bonds where !present.contains(bond.identity) {
            guard let state = try? storage.clientState(bond.identity), (state.configurations[changed + 1] ?? 0) & 2 != 0 else { continue }
            do { try storage.addPendingServiceChange(bond.identity, range) } catch { outputs.append(.log(.error, "bond store: \(error)")) }
        }
        return outputs
    }
}
