import BerylCore
import BerylIPC
import BerylManager
import BerylManagerWire
import FoundationEssentials
import Glibc

/// The data plane, from managerd's side: it has attd open a data channel for each app session that asks for one,
/// passes it in the Welcome, and scopes it — live while the app is in the foreground (elsewhere managerd's lifecycle
/// holds and wakes, so the app's data comes through here), links named by the identifiers the app knows, and the
/// apps that hear each peripheral value. attd enforces what this grants.
extension ManagerDaemon {
    /// Whether the session's app takes its data directly now: only in the foreground.
    func grantIsLive(_ session: UInt64) -> Bool {
        guard let app = core.sessions[session], app.saidHello else { return false }
        return core.lifecycle(of: app.appID) == .foreground
    }

    /// Asks attd for the app's channel; `then` gets the descriptor to pass (nil: none, and the app's data goes through
    /// managerd, as a C client's does).
    func openDataChannel(for session: UInt64, then: @escaping (Int32?, Data) -> Void) {
        guard let attd else { return then(nil, Data()) }
        let live = grantIsLive(session)
        attd.request(.with { $0.att.openDataChannel = .with { $0.onBehalfOf = session; $0.live = live } }) { [unowned self] result in
            let descriptor = attd.takePassedDescriptor()
            guard case .success(let response) = result, let descriptor, self.session(session) != nil else {
                if let descriptor { close(descriptor) }
                if case .failure(let error) = result { host.logger.warning("no data channel for session \(session): \(error)") }
                return then(nil, Data())
            }
            dataGrants[session] = live
            // A session renewing its channel (or restored with links) holds links and hears values already: attd
            // hears of them now, not at the app's next request.
            syncHeldLinks()
            refreshAudiences()
            then(descriptor, response.att.dataChannelOpened.resumeToken)
        }
    }

    // MARK: Channels that outlived a managerd before this one

    /// Whether a Hello that presents a kept channel can be answered now: attd's links are taken back (the app's
    /// links are known) and the stack is on (the app's services can be its own again).
    var readyToAdopt: Bool { attd != nil && attdLinksTakenBack && state == .poweredOn }

    /// Runs `body` once adoption can go ahead (true), or after 5 s without (false: the app gets a new channel).
    func whenReadyToAdopt(_ body: @escaping (Bool) -> Void) {
        guard !readyToAdopt else { return body(true) }
        adoptionsWaiting.append(body)
        _ = try? host.loop.after(.seconds(5)) { [unowned self] in
            let waiting = adoptionsWaiting
            adoptionsWaiting.removeAll()
            for body in waiting { body(readyToAdopt) }
        }
    }

    func adoptWaitingChannels() {
        guard readyToAdopt, !adoptionsWaiting.isEmpty else { return }
        let waiting = adoptionsWaiting
        adoptionsWaiting.removeAll()
        for body in waiting { body(true) }
    }

    /// Has attd hand over the channel whose token the app presented: the app's services, the links it held and the
    /// values it heard become its new session's (`ManagerCore.adopted`), and attd hears the grants under the new id.
    /// `then` gets the links the app held that ended meanwhile (nil: not adopted).
    func adoptDataChannel(_ token: Data, for session: UInt64, then: @escaping ([Beryl_Ipc_V1_LostLink]?) -> Void) {
        guard let attd else { return then(nil) }
        let live = grantIsLive(session)
        attd.request(.with { $0.att.adoptDataChannel = .with { $0.resumeToken = token; $0.onBehalfOf = session; $0.live = live } }) { [unowned self] result in
            let adopted: Beryl_Ipc_V1_DataChannelAdopted
            switch result {
            case .success(let response): adopted = response.att.dataChannelAdopted
            case .failure(let error):
                host.logger.info("session \(session)'s kept data channel was not adopted: \(error)")
                return then(nil)
            }
            guard self.session(session) != nil else { return then(nil) }
            var services: [PreservedState.PublishedService] = []
            for service in adopted.services {
                do {
                    services.append(try PreservedState.PublishedService(wire: .with { $0.spec = service.spec; $0.published = service.published }))
                } catch {
                    host.logger.error("a kept service \(service.spec.uuid) is unreadable: \(error)")
                }
            }
            let heard = adopted.heard.compactMap { value -> RemoteSubscriptions.Value? in
                guard let link = UInt16(exactly: value.connectionHandle), let handle = UInt16(exactly: value.valueHandle) else { return nil }
                return RemoteSubscriptions.Value(link: link, valueHandle: handle)
            }
            let (held, outputs) = core.adopted(session, manager: 1, services: services,
                                               heldLinks: adopted.heldLinks.compactMap { UInt16(exactly: $0) }, heard: heard)
            apply(outputs)
            host.logger.info("session \(session) kept its data channel \(adopted.channel) through managerd's restart: "
                             + "\(services.count) service(s), \(held.count) link(s), \(heard.count) value(s) heard")
            dataGrants[session] = live
            syncHeldLinks()
            for value in heard { refreshAudience(of: value.valueHandle, on: value.link) }
            then(adopted.lostLinks)
        }
    }

    /// attd said how many channels of an earlier managerd are left; none left lets a waiting republication go.
    func attdOrphansChanged(_ count: UInt32) {
        attdOrphans = count
        if count == 0, republishWaitsForOrphans {
            republishWaitsForOrphans = false
            republishPreserved()
        }
    }

    func republishWhenNoOrphans() {
        guard attdOrphans == 0 else { return republishWaitsForOrphans = true }
        republishPreserved()
    }

    /// attd hears when an app's grant turns live or is revoked, as its lifecycle changed.
    func syncGrants() {
        guard let attd else { return }
        for (session, told) in dataGrants.sorted(by: { $0.key < $1.key }) {
            let live = grantIsLive(session)
            guard live != told else { continue }
            dataGrants[session] = live
            attd.request(.with { $0.att.setDataGrant = .with { $0.onBehalfOf = session; $0.live = live } })
        }
    }

    /// attd closes the channel when it hears the session's sender is gone (ForgetSender).
    func dataChannelSessionClosed(_ session: UInt64) {
        dataGrants[session] = nil
        heldLinksTold[session] = nil
        refreshAudiences()
        syncHeldLinks()
    }

    /// attd hears which links each app with a channel holds as central, on which its reads and writes may go.
    func syncHeldLinks() {
        guard let attd else { return }
        for session in dataGrants.keys.sorted() {
            let held = Set(book.links.values.filter { $0.isCentral && $0.holders.contains { $0.holder == .session(session) } }.map(\.handle))
            guard heldLinksTold[session, default: []] != held else { continue }
            heldLinksTold[session] = held
            attd.request(.with { $0.att.setGrantLinks = .with { $0.onBehalfOf = session; $0.connectionHandles = held.sorted().map(UInt32.init) } })
        }
    }

    /// attd went: its channels went with it, and what it was told; apps renew their channels when it is back, and each
    /// renewal tells the new attd the audiences again (until then managerd delivers every notification).
    func dataChannelsLost() {
        dataGrants.removeAll()
        audiencesToTellAgain.formUnion(audiencesTold.keys)
        audiencesTold.removeAll()
        heldLinksTold.removeAll()
    }

    /// The values whose audience attd was told at some time, still on a link: told again when channels are back.
    private var audienceKeys: [AudienceKey] {
        Set(audiencesTold.keys).union(audiencesToTellAgain).sorted { ($0.link, $0.valueHandle) < ($1.link, $1.valueHandle) }
    }

    /// Tells attd the identifier of a link's peer, which apps name centrals by; asked when managerd learns the link and
    /// when attd's bearer opens, since the two arrive in either order and attd keeps names of links it has only.
    func nameLink(_ handle: UInt16) {
        guard let attd, let identifier = book.identifier(for: handle) else { return }
        attd.request(.with { $0.att.nameLink = .with { $0.connectionHandle = UInt32(handle); $0.identifier = identifier } })
    }

    func nameEveryLink() {
        for link in book.links.values.sorted(by: { $0.handle < $1.handle }) { nameLink(link.handle) }
    }

    /// Which apps hear a peripheral's value: attd sends it straight to those with a live channel and to managerd for
    /// the rest. Told for the values apps subscribed to, and again whenever that audience may have changed.
    /// `adding`: a session whose subscription is being written, told before its descriptor is, so that no notification
    /// of it goes the longer way through managerd and lands behind the direct ones.
    func refreshAudience(of valueHandle: UInt16, on link: UInt16, adding: UInt64? = nil) {
        guard let attd else { return }
        let key = AudienceKey(link: link, valueHandle: valueHandle)
        var told = Beryl_Ipc_V1_NotificationAudience.with {
            $0.connectionHandle = UInt32(link)
            $0.valueHandle = UInt32(valueHandle)
        }
        if case (let identifier, var holders)? = core.audience(ofNotification: valueHandle, onLink: link) {
            if let adding { holders.insert(.session(adding)) }
            told.peripheral = identifier
            told.apps = holders.compactMap(\.sessionID).filter { dataGrants[$0] != nil }.sorted()
            told.others = holders.contains { $0.sessionID.map { dataGrants[$0] == nil } ?? true }
        }
        guard audiencesTold[key] != told, audiencesTold[key] != nil || !told.apps.isEmpty else { return }
        audiencesToTellAgain.remove(key)
        audiencesTold[key] = told.apps.isEmpty ? nil : told
        attd.request(.with { $0.att.notificationAudience = told })
    }

    func refreshAudiences() {
        for key in audienceKeys { refreshAudience(of: key.valueHandle, on: key.link) }
    }

    func linkGoneForAudiences(_ link: UInt16) {
        audiencesTold = audiencesTold.filter { $0.key.link != link }
        audiencesToTellAgain = audiencesToTellAgain.filter { $0.link != link }
    }

    /// A notification attd sent on: to the audience's apps that no channel carried it to (all of them when attd set no
    /// audience for it).
    func deliverNotification(_ notification: Beryl_Ipc_V1_GattNotification) {
        let delivered = Set(notification.delivered)
        forwardToHolders(.gattNotification(notification), connectionHandle: notification.connectionHandle) { holder in
            holder.sessionID.map { !delivered.contains($0) } ?? true
        }
    }
}

/// A peripheral's value on a link, whose audience managerd told attd.
struct AudienceKey: Hashable {
    var link: UInt16
    var valueHandle: UInt16
}
