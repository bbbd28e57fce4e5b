import BerylCore

/// What managerd's managers hold, as one value: each holder's scans, links, published services and advertising —
/// a holder being an app's session, or a preserved manager while its app is away — and how that work moves when a
/// session ends, an app comes back, a record is resumed or discarded, or attd or the controller loses it. Sans-IO:
/// every change is made whole before the outputs say what the shell is to do (write a record, tell attd, the
/// controller), so a record never reads a half-made change. `Event` is what an absent app's queue holds (managerd's
/// wire event; the core never looks inside one).
public struct ManagerCore<Event: Sendable>: Sendable {
    public enum Output: Sendable {
        /// Write this preserved manager's record as it stands now.
        case persist(preservedID: UInt64)
        /// Remove this preserved manager's record.
        case forget(appID: String, restoreID: String, role: ManagerRole)
        /// Remove every record of the app, those that could not be read included.
        case forgetApp(appID: String)
        case connections(CentralConnections.Output)
        /// Withdraw the service starting at this handle from attd's database.
        case unpublish(startHandle: UInt16)
        /// A remote central's request whose owner is gone: answered for it, so the central is not left waiting.
        case answerAbandoned(id: UInt64, isRead: Bool)
        /// Who scans, or who advertises, changed: the shell lays the controller's scan or advertising out again.
        case scanningChanged
        case advertisingChanged
        /// A preserved manager's services wait to be published again (`pendingRepublish`).
        case republish
        /// A manager that registered for connection events hears of a link to `identifier`.
        case connectionEvent(ManagerKey, LinkChange, identifier: String)
        /// What was held for the session while its app was suspended, in order.
        case deliver(session: UInt64, events: [Event])
        /// Apps see the stack in a new state; at poweredOn the controller's scanning and advertising are laid out
        /// again (a reset controller forgot them).
        case stateChanged(StackState)
        /// Start this app's process (`launchStarted` or `launchFailed` says how it went).
        case launch(AppLaunch)
        /// Send SIGTERM to an app's launched process, for this reason.
        case terminate(appID: String, pid: Int32, failure: LaunchFailure)
        /// A launch waits until this time (`launches.nextDeadline`), after this failure if there was one.
        case launchDeferred(appID: String, until: Duration, failure: LaunchFailure?)
        /// The launched processes changed: the shell records them, for a managerd started after this one.
        case launchesChanged
        /// The last manager subscribed to a peripheral's value let go: clear its descriptor on the link.
        case unsubscribe(RemoteSubscriptions.Clearing)
        /// A remote central subscribed to the owner's value disconnected: a running app hears it unsubscribe, as
        /// Core Bluetooth's didUnsubscribeFrom follows a subscribed central's disconnection.
        case subscriberGone(owner: ManagerKey, PreservedState.Subscription)
        /// A foreground-only app's time in the background ran out (what that changes follows as outputs of its own).
        case suspended(appID: String, after: Duration)
        /// An app awake in the background overran its budget: the shell ends its processes, as iOS ends such an app.
        case overran(appID: String)
        /// The app's wake ended, after it was awake this long: its sessions went idle or closed.
        case idleAgain(appID: String, after: Duration)
        /// A GATT request that waited for its link's bearer (`gattAsked`) is to be asked again.
        case gattResumed(token: UInt64)
        /// A new attd counts writes without response from zero on this link: its holders hear a GattWriteReady.
        case writesReadyAfresh(link: UInt16)
        /// attd is to forget the session's writes without response on the link (`writesForgotten` once it answered).
        case forgetWrites(session: UInt64, link: UInt16)
        /// attd is to forget the updates it counted for the session (its ReadyToUpdate counts from zero again).
        case forgetUpdates(session: UInt64)
        /// The answer to the app's command `reply` (`command(_:from:reply:directory:)`).
        case reply(UInt64, Result<CommandReply, CommandRefusal>)
        /// The app's command `reply` is answered by the controller's answer to this (its refusal typed).
        case askController(UInt64, ControllerAsk)
        /// A device a manager's scan heard before it started.
        case discovered(Discovery)
        /// The manager asked to advertise: the shell lays advertising out and tells it whether it started.
        case advertisingAsked(ManagerKey)
        /// attd answers a remote central's request with the app's answer.
        case answerRemote(id: UInt64, isRead: Bool, value: [UInt8], attError: UInt8)
    }

    /// CBConnectionEvent.
    public enum LinkChange: Equatable, Sendable {
        case peerConnected, peerDisconnected
    }

    public var scans = ScanCoordinator()
    public var connections = CentralConnections()
    /// Who owns each published service, the remote centrals' requests awaiting an answer, the updates owed a "ready".
    public var router = PeripheralRouter()
    public var advertisers: [ManagerKey: Advertiser] = [:]
    /// Whose turn it is on the controller's one advertiser.
    public internal(set) var advertising = AdvertisingRotation()
    /// Managers that opted into restoration, and the events held for absent apps.
    public var restoration: Restoration<Event>
    /// What each published service was made from (to preserve it and publish it again), by start handle.
    public var serviceSpecs: [UInt16: PreservedState.PublishedService] = [:]
    /// Remote centrals subscribed to this device's characteristics.
    public var subscribers: [PreservedState.Subscription] = []
    /// Services to publish again for preserved managers once attd is there: one list per manager.
    public var pendingRepublish: [ManagerKey: [PreservedState.PublishedService]] = [:]

    /// Each device's advertising joined with its scan response, and when apps hear of it.
    public var heard = HeardDevices()
    /// Services found on each connected peripheral (retrieveConnectedPeripherals(withServices:), connection events).
    public var discoveredServices: [String: Set<BluetoothUUID>] = [:]
    /// Who asked to hear of links (registerForConnectionEvents).
    public var connectionInterests = ConnectionEventInterests()
    /// Which managers subscribed to connected peripherals' values.
    public var remoteSubscriptions = RemoteSubscriptions()
    /// ATT_MTU per link whose ATT bearer attd opened.
    public internal(set) var attMTUs: [UInt16: UInt16] = [:]
    /// GATT requests waiting for their link's bearer, by link, in the order asked (`gattAsked`).
    var gattAwaitingBearer: [UInt16: [UInt64]] = [:]
    var nextGattToken: UInt64 = 1
    var writesBeingForgotten: Set<WriteSender> = []

    /// What apps see of the stack, what hcid last said of the controller, and whether attd is attached.
    public internal(set) var state: StackState = .unknown
    public internal(set) var controllerState: StackState = .unknown
    public internal(set) var attdAttached = false

    /// Each open session, by id (kept here rather than on the IPC session, which the server forgets before the close).
    public var sessions: [UInt64: AppSession<Event>] = [:]
    /// The apps' manifests.
    public var catalog = AppCatalog()
    /// Every app's state, suspensions and background wakes.
    public var life: AppLifecycle
    /// The apps' launched processes and when they are launched again.
    public internal(set) var launches: AppLaunches

    /// `suspendAfter`: how long an app without a manifest stays in the background before it is suspended;
    /// `restoreGrace`: how long a launched app has to restore its managers; `startedAt`: managerd's start.
    public init(suspendAfter: Duration = .seconds(5), queueCapacity: Int = 256, restoreGrace: Duration = .seconds(15),
                startedAt: Duration = .zero) {
        restoration = Restoration(queueCapacity: queueCapacity)
        life = AppLifecycle(defaultSuspendAfter: suspendAfter)
        launches = AppLaunches(relaunch: RelaunchPolicy(restoreGrace: restoreGrace, startedAt: startedAt))
    }

    public var book: ConnectionBook { connections.book }

    // MARK: Snapshots

    /// The record of a preserved manager as its work stands now; `name` is a peripheral's last known name.
    public func snapshot(_ preserved: PreservedManager, name: (String) -> String) -> PreservedState {
        let key = preserved.key
        switch preserved.role {
        case .central:
            let (connected, pending) = book.held(by: key)
            let lost = preserved.lostToStack.keys.filter { !connected.contains($0) && !pending.contains($0) }
            return preserved.centralState(scan: scans.request(for: key), connected: connected, pending: (pending + lost).sorted(), name: name)
        case .peripheral:
            let mine = router.services(of: key)
            let ranges = mine.map(\.range)
            return preserved.peripheralState(published: mine.compactMap { serviceSpecs[$0.range.lowerBound] },
                                             advertising: advertisers[key].map(PreservedState.Advertising.init),
                                             subscriptions: subscribers.filter { entry in ranges.contains { $0.contains(entry.valueHandle) } })
        }
    }

    func persisting(_ holder: ManagerHolder) -> [Output] {
        restoration.manager(heldBy: holder).map { [.persist(preservedID: $0.id)] } ?? []
    }

    // MARK: Sessions

    /// A session closed. A preserved manager's work stays, held under its own id, unless the user quit the app (or
    /// the session never named one); everything else the session held goes.
    public mutating func sessionClosed(_ session: UInt64, poweredOn: Bool, at now: Duration) -> [Output] {
        let holder = ManagerHolder.session(session)
        var outputs = lifecycleSessionClosed(session, at: now)
        let quitting = sessions.removeValue(forKey: session)?.quitting == true
        connectionInterests.remove(holder)
        scans.paused.remove(holder)
        scans.coalesced.remove(holder)
        if let preserved = restoration.manager(heldBy: holder) {
            if quitting || preserved.appID.isEmpty {
                outputs += discard(preserved.id)
            } else if let preservedWork = preserveOnClose(session, poweredOn: poweredOn) {
                return outputs + preservedWork
            }
        }
        return outputs + releaseWork(of: holder)
    }

    /// A session of an opted-in manager closed without the app quitting: its work is held meanwhile.
    mutating func preserveOnClose(_ session: UInt64, poweredOn: Bool) -> [Output]? {
        guard let preserved = restoration.preserve(session: session) else { return nil }
        rebind(from: .session(session), to: preserved.holder)
        var outputs: [Output] = []
        // What the stack lost under the running app is asked for again now that the manager holds its own work.
        for (identifier, address) in preserved.lostToStack.sorted(by: { $0.key < $1.key }) {
            outputs += connections.connect(preserved.key, identifier: identifier, address: address).map(Output.connections)
        }
        restoration.update(heldBy: preserved.holder) { $0.lostToStack.removeAll() }
        if let stash = preserved.unrepublished {
            // Gone before it added its services again: managerd publishes them for it, as for a restored manager.
            if !stash.services.isEmpty { pendingRepublish[preserved.key] = stash.services }
            if advertisers[preserved.key] == nil, let advertising = stash.advertising { advertisers[preserved.key] = Advertiser(advertising) }
            if poweredOn { outputs += [.republish, .advertisingChanged] }
        }
        return outputs + [.persist(preservedID: preserved.id)]
    }

    /// The app is back: the work held for it moves to the new session. Returns the record it restores
    /// (willRestoreState) and the events queued while it was gone.
    public mutating func restore(_ id: UInt64, into session: UInt64, name: (String) -> String) -> (state: PreservedState, queued: [Event])? {
        guard let preserved = restoration.manager(id: id) else { return nil }
        let state = snapshot(preserved, name: name)
        guard let (from, queued) = restoration.restore(id, into: session) else { return nil }
        rebind(from: from, to: .session(session))
        return (state, queued)
    }

    /// A user quit (or the app invalidated the manager): the preserved work is discarded, with its record.
    public mutating func discard(_ id: UInt64) -> [Output] {
        guard let preserved = restoration.discard(id) else { return [] }
        let forget = Output.forget(appID: preserved.appID, restoreID: preserved.restoreID, role: preserved.role)
        return [forget] + (preserved.live ? [] : releaseWork(of: preserved.holder))
    }

    /// Everything a holder had running goes: scans, links, services, advertising; its remote centrals' requests
    /// are answered for it.
    public mutating func releaseWork(of holder: ManagerHolder) -> [Output] {
        scans.stopAll(holder)
        var outputs: [Output] = [.scanningChanged]
        outputs += connections.releaseAll(holder).map(Output.connections)
        for service in router.removeAll(where: { $0.owner.holder == holder }) { outputs += unpublish(service.range.lowerBound) }
        if advertisers.keys.contains(where: { $0.holder == holder }) {
            advertisers = advertisers.filter { $0.key.holder != holder }
            outputs.append(.advertisingChanged)
        }
        for (id, request) in router.abandon(holder) { outputs.append(.answerAbandoned(id: id, isRead: request == .read)) }
        // Before the links are let go of: a link another manager keeps carries the clearing.
        return remoteSubscriptions.release(holder).map(Output.unsubscribe) + outputs
    }

    mutating func unpublish(_ start: UInt16) -> [Output] {
        serviceSpecs[start] = nil
        return [.unpublish(startHandle: start)]
    }

    private mutating func rebind(from old: ManagerHolder, to new: ManagerHolder) {
        scans.rebind(old, to: new)
        remoteSubscriptions.rebind(old, to: new)
        connections.rebind(old, to: new)
        router.rebind(old, to: new)
        for (key, advertiser) in advertisers where key.holder == old {
            advertisers[key] = nil
            advertisers[ManagerKey(new, manager: key.manager)] = advertiser
        }
        for (key, specs) in pendingRepublish where key.holder == old {
            pendingRepublish[key] = nil
            pendingRepublish[ManagerKey(new, manager: key.manager)] = specs
        }
    }

    // MARK: The peripheral role's services and advertising

    /// attd published a service for `owner`, at the app's request or (`republishing`: how many services the manager
    /// is to have back) again for a preserved manager. It routes requests for its handles, and the record keeps what
    /// it was made from (nil: it could not be kept). Once the app has published again after a reset, or a
    /// republication is whole, what the manager has now is its record, in place of the stash.
    public mutating func servicePublished(_ service: PreservedState.PublishedService?, at range: ClosedRange<UInt16>, owner: ManagerKey,
                                          republishing expected: Int? = nil) -> [Output] {
        // attd answered after the app's session closed, or after the stack left poweredOn (which cleared the app's
        // services): nobody knows of this service, so it is withdrawn rather than left in attd's database.
        if expected == nil, let session = owner.holder.sessionID, sessions[session] == nil || state != .poweredOn {
            return [.unpublish(startHandle: range.lowerBound)]
        }
        router.publish(range, owner: owner)
        serviceSpecs[range.lowerBound] = service
        if expected.map({ router.services(of: owner).count >= $0 }) ?? true { restoration.appPublished(heldBy: owner.holder) }
        return persisting(owner.holder)
    }

    /// One preserved manager's services to publish again, and the token that says whose they are when they land.
    public struct Republication: Equatable, Sendable {
        public var key: ManagerKey
        public var services: [PreservedState.PublishedService]
        let token: Restoration<Event>.Republication
    }

    /// The services waiting to be published again now that attd is there, per manager in key order (a manager
    /// discarded meanwhile is left out); taken, so that each is asked of attd once.
    public mutating func takeRepublications() -> [Republication] {
        defer { pendingRepublish.removeAll() }
        return pendingRepublish.sorted { $0.key < $1.key }.compactMap { key, services in
            restoration.startRepublication(heldBy: key.holder).map { Republication(key: key, services: services, token: $0) }
        }
    }

    /// A service published again landed at `range` (`service` with the handles attd gave it): its manager's holder owns it now —
    /// the app may be back, restored — unless the manager was discarded or its app cleared its services meanwhile
    /// and adds its own, when it is withdrawn rather than kept beside them.
    public mutating func republished(_ service: PreservedState.PublishedService, at range: ClosedRange<UInt16>,
                                     for republication: Republication) -> [Output] {
        guard let holder = restoration.owner(of: republication.token) else { return [.unpublish(startHandle: range.lowerBound)] }
        return servicePublished(service, at: range, owner: ManagerKey(holder, manager: republication.key.manager),
                                republishing: republication.services.count)
    }

    public enum PublicationRefusal: Error, Equatable, Sendable {
        /// The manager published no service starting at that handle.
        case notPublished
    }

    public mutating func removeService(start: UInt16, owner: ManagerKey) throws(PublicationRefusal) -> [Output] {
        guard let removed = router.remove(start: start, owner: owner) else { throw .notPublished }
        return unpublish(removed.range.lowerBound) + persisting(owner.holder)
    }

    /// The app adds its own services now: what managerd was to publish again for it, or has under way, is not wanted.
    public mutating func removeAllServices(of owner: ManagerKey) -> [Output] {
        restoration.appClearedServices(heldBy: owner.holder)
        pendingRepublish = pendingRepublish.filter { $0.key.holder != owner.holder }
        let removed = router.removeAll { $0.owner == owner }.flatMap { unpublish($0.range.lowerBound) }
        return removed + persisting(owner.holder)
    }

    /// The shell then lays advertising out again itself, to tell the app whether it started.
    public mutating func startAdvertising(_ advertiser: Advertiser, for key: ManagerKey) -> [Output] {
        advertisers[key] = advertiser
        restoration.appPublished(heldBy: key.holder)
        return persisting(key.holder)
    }

    public mutating func stopAdvertising(for key: ManagerKey) -> [Output] {
        advertisers[key] = nil
        restoration.appStoppedAdvertising(heldBy: key.holder)
        return [.advertisingChanged] + persisting(key.holder)
    }

    /// Where a remote central's read or write goes: to the handle's owner if it can answer now — a live session
    /// (`isLive`) whose app's state lets it, or a preserved manager whose app is launched to answer.
    public mutating func routeRemoteRequest(_ id: UInt64, _ request: PeripheralRouter.Request, handles: [UInt16], expectsAnswer: Bool,
                                            isLive: (UInt64) -> Bool) -> PeripheralRouter.Route {
        let now = self
        return router.route(id, request, handles: handles, expectsAnswer: expectsAnswer) { holder in
            let reachable = switch holder {
            case .session(let session): isLive(session)
            case .preserved(let preserved): now.restoration.manager(id: preserved)?.live == false
            }
            return reachable && now.policy(for: holder).answersRequests
        }
    }

    /// The remote central `identifier` disconnected: it no longer subscribes to anything here (a bonded central's
    /// descriptors stay with its bond in attd, Core Vol 3 Part G §3.3.3.3, and notify it again when it is back).
    mutating func subscribersGone(_ identifier: String) -> [Output] {
        let gone = subscribers.filter { $0.central == identifier }
        guard !gone.isEmpty else { return [] }
        subscribers.removeAll { $0.central == identifier }
        var outputs: [Output] = []
        var owners: [ManagerHolder] = []
        for var subscription in gone {
            guard let owner = router.owner(of: subscription.valueHandle) else { continue }
            subscription.notify = false
            subscription.indicate = false
            outputs.append(.subscriberGone(owner: owner, subscription))
            if !owners.contains(owner.holder) { owners.append(owner.holder) }
        }
        return outputs + owners.flatMap(persisting)
    }

    /// A remote central subscribed to one of the owner's values, or stopped (neither notify nor indicate).
    public mutating func subscriptionChanged(_ subscription: PreservedState.Subscription) -> [Output] {
        // No central: attd's word about a link this stack saw end already, whose centrals unsubscribed then (linkDown).
        guard !subscription.central.isEmpty, let owner = router.owner(of: subscription.valueHandle) else { return [] }
        subscribers.removeAll { $0.central == subscription.central && $0.valueHandle == subscription.valueHandle }
        if subscription.notify || subscription.indicate { subscribers.append(subscription) }
        return persisting(owner.holder)
    }

    // MARK: Links

    /// A link came up: its holders hear so, and the managers watching for it.
    public mutating func linkUp(handle: UInt16, identifier: String, address: DeviceAddress, isCentral: Bool) -> [Output] {
        var outputs = connections.linkUp(handle: handle, identifier: identifier, address: address, isCentral: isCentral).map(Output.connections)
        outputs += connectionEvents(.peerConnected, identifier: identifier, address: address)
        // A record that still lists subscriptions on this peripheral is one managerd resumed under a link hcid and attd
        // kept: those subscriptions stand (the descriptor was written), and the manager hears their values.
        for holder in book.link(for: identifier)?.holders.map(\.holder) ?? [] {
            for valueHandle in restoration.manager(heldBy: holder)?.notifying[identifier] ?? [] {
                remoteSubscriptions.adopt(.init(link: handle, valueHandle: valueHandle), by: holder)
            }
        }
        // A central connecting ended connectable advertising (Core Vol 6 Part B §4.4.2): it is started again.
        return isCentral ? outputs : outputs + [.advertisingChanged]
    }

    /// A link went: its holders hear so, except a preserved manager whose app is away, which asks for it again and
    /// whose record no longer has subscriptions on it.
    /// `stackFailed`: the stack lost the link itself (hcid went, and the controller with it), not the peer or an app;
    /// a link that ends while hcid resets the controller or finds it unresponsive was ended by that (its recovery,
    /// resync or reopened transport) and counts as one too.
    public mutating func linkDown(handle: UInt16, reason: UInt8, stackFailed: Bool = false) -> [Output] {
        let stackFailed = stackFailed || [.resetting, .unresponsive].contains(controllerState)
        attMTUs[handle] = nil
        let resumed = resumeGatt(on: handle)
        remoteSubscriptions.linkClosed(handle)
        let address = book.identifier(for: handle).flatMap { book.link(for: $0)?.address }
        let holders = Set(book.identifier(for: handle).flatMap { book.link(for: $0)?.holders.map(\.holder) } ?? []).sorted()
        let records = holders.map { record(of: $0) }
        let restoration = restoration
        guard let (identifier, down) = connections.linkDown(handle: handle, reason: reason, isAway: { restoration.manager(heldBy: $0).map { !$0.live } ?? false })
        else { return resumed }
        var outputs = (address.map { connectionEvents(.peerDisconnected, identifier: identifier, address: $0) } ?? [])
        outputs += subscribersGone(identifier)
        discoveredServices[identifier] = nil
        outputs += down.map(Output.connections)
        // Subscriptions end with the link, for a running app too (its library says so), whoever ended it: the peer
        // holds an unbonded client's descriptors for no longer than the link, so a manager that came back believing it
        // subscribed would hear nothing. A record that still lists some is one managerd resumed under a link that
        // stayed up (linkUp takes them as standing).
        // A running app's record loses the link (the book's) when the peer dropped it, an away manager's has it pending
        // again. A stack that failed changes nothing an app asked for: the running app's record keeps the link as
        // pending (`lostToStack`), so that a manager resumed after managerd went too asks for it again and relaunches
        // its app (the fault suite's kill -9 of hcid, attd, managerd and the app at once, managerd hearing hcid go
        // before its own end), and so does one whose session closes before it asks again.
        for (holder, before) in zip(holders, records) {
            _ = self.restoration.update(heldBy: holder) { manager in
                manager.notifying[identifier] = nil
                if stackFailed, manager.live, let address { manager.lostToStack[identifier] = address }
            }
            outputs += written(holder, since: before)
        }
        // What waited for the link's bearer fails after its holders heard the link go, as the app sees it on iOS.
        return outputs + [.advertisingChanged] + resumed
    }

    /// Who hears what attd's GATT client heard on a link: each manager holding the peripheral, once per holder.
    public func holders(ofLink handle: UInt16) -> (identifier: String, holders: Set<ManagerHolder>)? {
        guard let identifier = book.identifier(for: handle), let link = book.link(for: identifier) else { return nil }
        return (identifier, Set(link.holders.map(\.holder)))
    }

    /// Who hears pairing on a link: as central, the managers holding it; as peripheral, every manager with published
    /// services or advertising (the remote central pairs with the device, not with one app).
    public func pairingAudience(ofLink handle: UInt16) -> (identifier: String, holders: Set<ManagerHolder>)? {
        guard let (identifier, holders) = holders(ofLink: handle), let link = book.link(for: identifier) else { return nil }
        return (identifier, link.isCentral ? holders : router.publishers.union(advertisers.keys.map(\.holder)))
    }

    /// The watchers of a peripheral, or of a service it advertised or was found to have (Core Bluetooth matches both).
    func connectionEvents(_ change: LinkChange, identifier: String, address: DeviceAddress) -> [Output] {
        connectionInterests.listeners(identifier: identifier.uppercased(), services: servicesOffered(by: identifier, at: address))
            .map { .connectionEvent($0, change, identifier: identifier) }
    }

    /// The services a peripheral advertised or was found to have (Core Bluetooth matches a service filter on either).
    public func servicesOffered(by identifier: String, at address: DeviceAddress) -> Set<BluetoothUUID> {
        discoveredServices[identifier, default: []].union(heard.advertisements[address]?.serviceUUIDs ?? [])
    }

    // MARK: Records

    /// A record read back after managerd started: the manager's work resumes, held under its own id until its app
    /// returns. A link it had (or waited for) is asked for again and never times out; `address` finds a peripheral
    /// the peripheral store still knows.
    public mutating func resume(appID: String, restoreID: String, role: ManagerRole, from state: PreservedState,
                                address: (String) -> DeviceAddress?) -> PreservedManager {
        let preserved = restoration.resume(appID: appID, restoreID: restoreID, role: role, from: state) { address($0) != nil }
        let key = preserved.key
        if let central = state.central {
            if let scan = central.scan { scans.start(key, scan) }
            for link in central.links {
                guard let peer = address(link.identifier) else { continue }
                // The controller is asked once it is powered on (CentralConnections holds the request until then).
                _ = connections.connect(key, identifier: link.identifier, address: peer)
            }
        }
        if let peripheral = state.peripheral {
            pendingRepublish[key] = peripheral.services
            if let advertising = peripheral.advertising { advertisers[key] = Advertiser(advertising) }
        }
        return preserved
    }

    // MARK: Losing attd or the controller

    /// Keeps what a preserved manager has published as its record's, before it is cleared (see `unrepublished`).
    @discardableResult
    public mutating func stashPublications(of preserved: PreservedManager) -> PreservedManager {
        let specs = router.services(of: preserved.key).compactMap { serviceSpecs[$0.range.lowerBound] }
        return restoration.stash(heldBy: preserved.holder, services: specs, advertising: advertisers[preserved.key].map(PreservedState.Advertising.init))
            ?? preserved
    }

    /// attd's database went with it. Preserved managers whose apps are away have theirs published again when attd is
    /// back; a running app adds its own again when it hears poweredOn after resetting (as after bluetoothd restarts).
    public mutating func attdLost() -> [Output] {
        defer {
            // Its bearers went with it: a GATT request waits for the new attd's, and lengths are not its predecessor's MTU.
            attMTUs.removeAll()
            serviceSpecs.removeAll()
            subscribers.removeAll()
        }
        for preserved in restoration.managers {
            let stashed = stashPublications(of: preserved)
            if !stashed.live, let specs = stashed.unrepublished?.services, !specs.isEmpty { pendingRepublish[stashed.key] = specs }
        }
        router.attdLost()
        // What waited for a bearer of the old attd fails now rather than waiting for ever.
        return resumeEveryGatt()
    }

    /// Core Bluetooth's rule for a manager whose state drops below poweredOn: advertising has stopped and the local
    /// database is cleared, and the app adds its services again on poweredOn. Preserved managers of apps that are not
    /// running keep theirs: there is no one to add them again. `isRunning` says whether a holder's app runs.
    public mutating func controllerLost(isRunning: (ManagerHolder) -> Bool) -> [Output] {
        let running = router.publishers.union(advertisers.keys.map(\.holder)).filter(isRunning)
        guard !running.isEmpty else { return [] }
        for preserved in restoration.managers where running.contains(preserved.holder) { stashPublications(of: preserved) }
        var outputs: [Output] = []
        for service in router.removeAll(where: { running.contains($0.owner.holder) }) { outputs += unpublish(service.range.lowerBound) }
        advertisers = advertisers.filter { !running.contains($0.key.holder) }
        subscribers.removeAll { router.owner(of: $0.valueHandle) == nil }
        return outputs + running.sorted().flatMap(persisting)
    }
}

extension Advertiser {
    public init(_ advertising: PreservedState.Advertising) { self.init(localName: advertising.localName, serviceUUIDs: advertising.serviceUUIDs) }
}

extension PreservedState.Advertising {
    public init(_ advertiser: Advertiser) { self.init(localName: advertiser.localName, serviceUUIDs: advertiser.serviceUUIDs) }
}

extension ManagerCore.Output: Equatable where Event: Equatable {}
