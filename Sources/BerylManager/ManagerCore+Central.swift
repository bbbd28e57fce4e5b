import BerylCore

/// A central manager's commands and what its GATT operations leave behind: each change is made, then the manager's
/// record (if it opted into restoration) is written before the shell acknowledges the command.
extension ManagerCore {
    /// scanForPeripherals(withServices:options:): the manager's scan replaces its last, under the background rules of
    /// its app's state from the first scan (an app launched into the background scans by them).
    public mutating func startScan(_ request: ScanRequest, for key: ManagerKey) -> [Output] {
        scans.start(key, request)
        if let session = key.holder.sessionID { applyScanPolicy(session) }
        return [.scanningChanged] + persisting(key.holder)
    }

    public mutating func stopScan(for key: ManagerKey) -> [Output] {
        scans.stop(key)
        return [.scanningChanged] + persisting(key.holder)
    }

    /// connect(_:options:): the book holds the request before the record is written, so the record lists it.
    public mutating func connect(_ key: ManagerKey, to identifier: String, at address: DeviceAddress,
                                 options: PreservedState.ConnectOptions) -> [Output] {
        // Compared as written, the book's links included: a link asked again after it dropped, with the same options,
        // is a change.
        let before = record(of: key.holder)
        let actions = connections.connect(key, identifier: identifier, address: address)
        if let session = key.holder.sessionID { sessions[session]?.connectOptions[identifier] = options }
        _ = restoration.update(heldBy: key.holder) {
            $0.connectOptions[identifier] = options
            $0.lostToStack[identifier] = nil
        }
        return written(key.holder, since: before) + actions.map(Output.connections)
    }

    /// cancelPeripheralConnection(_:): the record forgets the peripheral's options and what was found on it.
    public mutating func cancelConnection(_ key: ManagerKey, to identifier: String) throws(CentralConnections.Refusal) -> [Output] {
        let link = book.link(for: identifier)?.handle
        let before = record(of: key.holder)
        let lost = restoration.manager(heldBy: key.holder)?.lostToStack[identifier] != nil
        let actions: [CentralConnections.Output]
        do {
            actions = try connections.cancel(key, identifier: identifier)
        } catch where lost {
            // The stack lost the link and the record still asks for it: cancelled as a request that only waited.
            actions = [.event(.disconnected(key, identifier: identifier, reason: 0))]
        }
        // Its subscriptions end with its connection; a link others keep carries the clearing.
        let clearing = link.map { remoteSubscriptions.release(key.holder, on: $0).map(Output.unsubscribe) } ?? []
        _ = restoration.update(heldBy: key.holder) {
            $0.connectOptions[identifier] = nil
            $0.databases[identifier] = nil
            $0.notifying[identifier] = nil
            $0.lostToStack[identifier] = nil
        }
        // The app counts its writes' readies afresh on its next link; attd must too, if others keep this one.
        var forget: [Output] = []
        if let link, case .session(let session) = key.holder {
            forgettingWrites(of: session, onLink: link)
            forget.append(.forgetWrites(session: session, link: link))
        }
        return written(key.holder, since: before) + clearing + forget + actions.map(Output.connections)
    }

    /// A discovery on `identifier` answered for `holder`: the services it saw feed connection events and
    /// retrieveConnectedPeripherals(withServices:); what it found (nil: not readable) is kept for willRestoreState, a
    /// whole-database discovery of every service replacing the copy and any other adding to it (reads and writes
    /// change nothing kept).
    public mutating func discovered(_ found: RemoteDatabase.Discovery?, services: [BluetoothUUID], everyService: Bool,
                                    on identifier: String, by holder: ManagerHolder) -> [Output] {
        discoveredServices[identifier, default: []].formUnion(services)
        guard let found else { return [] }
        return updatingRecord(of: holder) {
            if everyService, case .whole(let services, _) = found {
                $0.databases[identifier] = RemoteDatabase(services: services)
            } else {
                $0.databases[identifier, default: .init()].add(found)
            }
        }
    }

    /// setNotifyValue(_:for:) from `holder` on `link`: nil when the peripheral's descriptor is to be written (its
    /// answer goes to `notifyWritten`); otherwise another manager's subscription stands for it, and what answering
    /// the holder at once changes.
    public mutating func notifyRequested(_ enable: Bool, valueHandle: UInt16, cccdHandle: UInt16, on link: UInt16, identifier: String,
                                         by holder: ManagerHolder) -> [Output]? {
        guard !remoteSubscriptions.request(enable, .init(link: link, valueHandle: valueHandle), cccdHandle: cccdHandle, by: holder) else { return nil }
        return notifyChanged(valueHandle, enabled: enable, on: identifier, by: holder)
    }

    /// The descriptor write `notifyRequested` asked for was answered; a failed subscription leaves the holder out.
    public mutating func notifyWritten(_ enable: Bool, succeeded: Bool, valueHandle: UInt16, on link: UInt16, identifier: String,
                                       by holder: ManagerHolder) -> [Output] {
        let value = RemoteSubscriptions.Value(link: link, valueHandle: valueHandle)
        guard succeeded else {
            if enable { remoteSubscriptions.subscribeFailed(value, by: holder) }
            return []
        }
        if enable { remoteSubscriptions.subscribed(value) }
        return notifyChanged(valueHandle, enabled: enable, on: identifier, by: holder)
    }

    /// Who hears a value the peripheral on `link` notified: the managers subscribed to it, as Core Bluetooth's do — or
    /// every holder of the link when this stack does not know who subscribed (managerd restarted under it).
    public func audience(ofNotification valueHandle: UInt16, onLink link: UInt16) -> (identifier: String, holders: Set<ManagerHolder>)? {
        guard let (identifier, holders) = holders(ofLink: link) else { return nil }
        guard let listeners = remoteSubscriptions.listeners(of: .init(link: link, valueHandle: valueHandle)) else { return (identifier, holders) }
        return (identifier, holders.intersection(listeners))
    }

    /// setNotifyValue(_:for:) answered: the record keeps which values notify, to subscribe again on restoration.
    public mutating func notifyChanged(_ valueHandle: UInt16, enabled: Bool, on identifier: String, by holder: ManagerHolder) -> [Output] {
        updatingRecord(of: holder) {
            if enabled { $0.notifying[identifier, default: []].insert(valueHandle) } else { $0.notifying[identifier]?.remove(valueHandle) }
        }
    }

    /// A record is written only when what it preserves changed: the same discovery again, or a subscription the
    /// value already had, writes (and fsyncs) nothing.
    mutating func updatingRecord(of holder: ManagerHolder, _ change: (inout PreservedManager) -> Void) -> [Output] {
        let before = record(of: holder)
        _ = restoration.update(heldBy: holder, change)
        return written(holder, since: before)
    }

    /// The holder's record as it would be written, the book's links and the scan included (names come from the store,
    /// never from a change, so they are left out of the comparison).
    func record(of holder: ManagerHolder) -> PreservedState? {
        restoration.manager(heldBy: holder).map { snapshot($0, name: { _ in "" }) }
    }

    /// The holder's record is to be written if it differs from `before`.
    func written(_ holder: ManagerHolder, since before: PreservedState?) -> [Output] {
        guard let manager = restoration.manager(heldBy: holder), record(of: holder) != before else { return [] }
        return [.persist(preservedID: manager.id)]
    }

    /// The link to a peripheral that one of the holder's managers holds: what GATT, RSSI and write lengths need.
    public func link(to identifier: String, heldBy holder: ManagerHolder) -> ConnectionBook.Link? {
        book.link(for: identifier).flatMap { link in link.holders.contains { $0.holder == holder } ? link : nil }
    }

    /// retrieveConnectedPeripherals(withServices:): the peripherals this stack is central to that offer one of the
    /// services (any, for none), by identifier.
    public func connectedPeripherals(offering services: [BluetoothUUID], address: (String) -> DeviceAddress?) -> [String] {
        book.links.filter { $0.value.isCentral }.keys.sorted().filter { identifier in
            services.isEmpty || address(identifier).map { !servicesOffered(by: identifier, at: $0).isDisjoint(with: services) } == true
        }
    }

    // MARK: ATT bearers

    /// attd opened a link's ATT bearer or changed its ATT_MTU: the GATT requests that waited for it are asked again.
    public mutating func bearer(_ handle: UInt16, mtu: UInt16) -> [Output] {
        attMTUs[handle] = mtu
        return resumeGatt(on: handle)
    }

    public mutating func bearerClosed(_ handle: UInt16) {
        attMTUs[handle] = nil
    }

    /// The links an updateValue(_:for:onSubscribedCentrals:) goes to: [] for every subscribed central (none named),
    /// those of the named centrals connected to this stack as its peripheral, or nil when none of them is (the value
    /// goes nowhere).
    public func links(ofCentrals centrals: [String]) -> [UInt16]? {
        guard !centrals.isEmpty else { return [] }
        let links = centrals.compactMap { book.link(for: $0.uppercased()) }.filter { !$0.isCentral }.map(\.handle)
        return links.isEmpty ? nil : links
    }

    /// An app's writes without response on a link that attd is to forget (the app cancelled a link others keep, and
    /// counts its readies afresh on its next one): until attd answers, a GattWriteReady for them was counted before
    /// the forget and would put the app's count ahead of attd's.
    mutating func forgettingWrites(of session: UInt64, onLink link: UInt16) { writesBeingForgotten.insert(WriteSender(session: session, link: link)) }

    public mutating func writesForgotten(of session: UInt64, onLink link: UInt16) { writesBeingForgotten.remove(WriteSender(session: session, link: link)) }

    /// Whether attd's GattWriteReady for an app's writes on a link reaches the app.
    public func admitsWriteReady(for session: UInt64, onLink link: UInt16) -> Bool {
        !writesBeingForgotten.contains(WriteSender(session: session, link: link))
    }

    /// ATT_MTU - 3: the most one notification or write without response carries (Core Vol 3 Part F §3.4.7.1, §3.4.5.3).
    public func maximumUpdateLength(on handle: UInt16) -> UInt32 { UInt32((attMTUs[handle] ?? 23) - 3) }

    /// With response a long write carries up to 512 bytes, an attribute's largest value (Core Vol 3 Part F §3.2.9).
    public func maximumWriteLength(on handle: UInt16, withoutResponse: Bool) -> UInt32 {
        withoutResponse ? maximumUpdateLength(on: handle) : 512
    }
}

extension ManagerCore.Output {
    /// A record written or removed: done before the command that changed it is acknowledged.
    public var isRecord: Bool {
        switch self {
        case .persist, .forget, .forgetApp: true
        default: false
        }
    }
}

/// A remote central's subscription to a published value changed on a link, as attd reports it (the Client
/// Characteristic Configuration it wrote, or restored for a bonded client: Core Vol 3 Part G §3.3.3.3).
public struct ReportedSubscription: Equatable, Sendable {
    public var link: UInt16
    public var valueHandle: UInt16
    public var notify: Bool
    public var indicate: Bool

    public init(link: UInt16, valueHandle: UInt16, notify: Bool, indicate: Bool) {
        self.link = link
        self.valueHandle = valueHandle
        self.notify = notify
        self.indicate = indicate
    }
}

/// An app's writes without response on one link, as attd counts them.
struct WriteSender: Hashable, Sendable {
    var session: UInt64
    var link: UInt16
}
