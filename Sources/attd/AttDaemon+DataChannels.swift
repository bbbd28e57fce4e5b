import BerylATT
import BerylAttWire
import BerylCore
import BerylCrypto
import BerylGATT
import BerylIPC
import BerylLink
import BerylWire
import FoundationEssentials
import Glibc

/// Apps' data channels: managerd asks for one per app session and passes it to the app; over it the app's values go to
/// the air and the app's notifications come back without crossing managerd. `grants` (BerylGATT's DataGrants) decides
/// what a channel may do and where an app's events go; this translates.
extension AttDaemon {
    /// managerd's requests that set up and scope channels.
    func handleGrantRequest(_ kind: Beryl_Ipc_V1_AttRequest.OneOf_Kind, from session: IPCSession, _ incoming: IncomingRequest) {
        switch kind {
        case .openDataChannel(let open):
            openDataChannel(for: UpdateSender(publisher: session.id, onBehalfOf: open.onBehalfOf), live: open.live, incoming)
        case .adoptDataChannel(let adopt):
            adoptDataChannel(adopt, by: session, incoming)
        case .setDataGrant(let grant):
            if let channel = grants.setLive(UpdateSender(publisher: session.id, onBehalfOf: grant.onBehalfOf), grant.live) {
                host.server?.sessions[channel]?.send(.event(.with { $0.att.dataGrantChanged.live = grant.live }))
            }
            incoming.respond(.with { $0.ack = .init() })
        case .nameLink(let name):
            guard let link = UInt16(exactly: name.connectionHandle), link <= 0x0EFF else {
                incoming.fail(.invalidArgument, "connection handle \(name.connectionHandle) is out of range (Core Vol 4 Part E §5.4.2)", field: "connection_handle")
                return
            }
            grants.name(link, links[link] == nil ? "" : name.identifier)
            incoming.respond(.with { $0.ack = .init() })
        case .setGrantLinks(let held):
            let links = Set(held.connectionHandles.compactMap { UInt16(exactly: $0) }.filter { self.links[$0] != nil })
            grants.setLinks(links, heldBy: UpdateSender(publisher: session.id, onBehalfOf: held.onBehalfOf))
            incoming.respond(.with { $0.ack = .init() })
        case .notificationAudience(let audience):
            guard let link = UInt16(exactly: audience.connectionHandle), let valueHandle = UInt16(exactly: audience.valueHandle), valueHandle > 0 else {
                incoming.fail(.invalidArgument, "a link and value handle of 16 bits, the value handle not 0", field: "value_handle")
                return
            }
            // A link that is gone (or not up yet) has no audience: managerd delivers what little might still come.
            if links[link] != nil {
                grants.setAudience(audience.apps, others: audience.others, of: valueHandle, on: link, peripheral: audience.peripheral, publisher: session.id)
            }
            incoming.respond(.with { $0.ack = .init() })
        default:
            incoming.fail(.unknownMessage, "not a grant request")
        }
    }

    private func openDataChannel(for app: UpdateSender, live: Bool, _ incoming: IncomingRequest) {
        guard let server = host.server else { return _ = incoming.fail(.notReady, "attd is not serving") }
        let pair: (kept: Int32, passed: Int32)
        do {
            pair = try SeqPacketSocket.pair()
        } catch {
            incoming.fail(.internal, "no data channel: \(error)")
            return
        }
        guard let channel = server.adopt(pair.kept) else {
            close(pair.passed)
            incoming.fail(.internal, "no data channel: its socket cannot be watched")
            return
        }
        let token = SecureRandom.bytes(16)
        if let replaced = grants.opened(channel.id, for: app, live: live, resumeToken: token) {
            server.sessions[replaced]?.close(reason: "replaced by data channel \(channel.id)")
        }
        host.logger.info("data channel \(channel.id) for app session \(app.onBehalfOf) of session \(app.publisher)\(live ? "" : " (revoked until live)")")
        incoming.respond(.with {
            $0.att.dataChannelOpened.channel = channel.id
            $0.att.dataChannelOpened.resumeToken = Data(token)
        }, passing: pair.passed)
    }

    // MARK: Orphans (managerd restarting)

    /// How long an orphaned channel waits for a restarted managerd to adopt it: its app reconnects within about a
    /// second of managerd being back (the library's backoff), and the supervisor restarts managerd at once.
    static let orphanGrace: Duration = .seconds(15)

    /// managerd went: its apps' channels carry on without it until its successor adopts them, or are closed.
    func channelsOrphaned(_ channels: [UInt64]) {
        let deadline = host.loop.uptime + Self.orphanGrace
        for channel in channels { orphanDeadlines[channel] = deadline }
        host.logger.info("data channel(s) \(channels.map(String.init).joined(separator: ", ")) outlive their managerd; "
                         + "kept \(Self.orphanGrace) for its successor")
        _ = try? host.loop.after(Self.orphanGrace) { [unowned self] in closeExpiredOrphans() }
        orphansChanged()
    }

    private func closeExpiredOrphans() {
        let now = host.loop.uptime
        for (channel, deadline) in orphanDeadlines.sorted(by: { $0.key < $1.key }) where deadline <= now && grants.isOrphaned(channel) {
            host.server?.sessions[channel]?.close(reason: "no restarted managerd adopted it within \(Self.orphanGrace)")
        }
    }

    /// An orphan closed (not adopted in time, or its app went): what was published for its app goes with it.
    func orphanGone(_ channel: UInt64, app: UpdateSender) {
        orphanDeadlines[channel] = nil
        pacer.senderGone(app)
        withdraw(router.appGone(app), "with app session \(app.onBehalfOf)'s orphaned data channel")
        orphansChanged()
    }

    /// managerd hears how many orphans are left: it publishes its preserved managers' services again once none are.
    private func orphansChanged() {
        orphanDeadlines = orphanDeadlines.filter { grants.isOrphaned($0.key) }
        broadcastToClients(.with { $0.att.dataChannelOrphans.count = UInt32(grants.orphanCount) })
    }

    /// A restarted managerd takes over the channel whose token the app presented in its Hello: the app's values,
    /// services, owed answers, held links and audiences go by its new session from now on.
    private func adoptDataChannel(_ adopt: Beryl_Ipc_V1_AdoptDataChannel, by session: IPCSession, _ incoming: IncomingRequest) {
        let app = UpdateSender(publisher: session.id, onBehalfOf: adopt.onBehalfOf)
        guard let adoption = grants.adopt(token: Array(adopt.resumeToken), as: app, live: adopt.live) else {
            incoming.fail(.notFound, "no orphaned data channel has that token (closed, or attd restarted)", field: "resume_token")
            return
        }
        pacer.rebind(adoption.was, to: app)
        router.rebind(adoption.was, to: app)
        dataPlane.adoptedChannels += 1
        let ranges = router.ranges(of: app)
        host.logger.info("data channel \(adoption.channel) of app session \(adoption.was.onBehalfOf) adopted by session \(session.id) "
                         + "as app session \(app.onBehalfOf), with \(ranges.count) service(s)")
        incoming.respond(.with {
            $0.att.dataChannelAdopted = .with { adopted in
                adopted.channel = adoption.channel
                adopted.services = ranges.compactMap { range in
                    serviceSpecs[range.lowerBound].map { spec in .with { $0.spec = spec; $0.published = .init(range, in: database) } }
                }
                adopted.heldLinks = adoption.heldLinks.map(UInt32.init)
                adopted.heard = adoption.hears.map { heard in .with { $0.connectionHandle = UInt32(heard.link); $0.valueHandle = UInt32(heard.valueHandle) } }
                adopted.lostLinks = adoption.lost.map { lost in .with { $0.peripheral = lost.peripheral; $0.reason = UInt32(lost.reason ?? 0) } }
            }
        })
        // The remote centrals subscribed to its values, as the publisher hears of any subscription.
        for link in links.values.sorted(by: { $0.handle < $1.handle }) {
            for range in ranges {
                for (valueHandle, value) in link.server.subscriptions(in: range) {
                    session.send(.event(Event(subscriptionChanged: valueHandle, link: link.handle, notify: value & 0b01 != 0, indicate: value & 0b10 != 0)))
                }
            }
        }
        if let channel = host.server?.sessions[adoption.channel] {
            channel.send(.event(.with { $0.att.dataGrantChanged.live = adopt.live }))
        }
        orphansChanged()
    }

    /// A request on a data channel: only what the grant allows, for the channel's own app.
    func handleDataRequest(_ kind: Beryl_Ipc_V1_AttRequest.OneOf_Kind?, on channel: IPCSession, _ incoming: IncomingRequest) {
        // An answer the app owes a remote central is taken whether or not its grant is still live: the request was its.
        if let owner = grants.app(of: channel.id) {
            switch kind {
            case .answerRead(let answer)?:
                dataPlane.answersOnChannels += 1
                let read: Result<[UInt8], ATTError> = answer.error == 0 ? .success(Array(answer.value)) : .failure(ATTError(rawValue: UInt8(truncatingIfNeeded: answer.error)))
                return answerOwed(answer.id, isRead: true, by: owner, incoming) { complete($0, read: read, writeError: nil, valueStartsAtOffset: answer.startsAtOffset) }
            case .answerWrite(let answer)?:
                dataPlane.answersOnChannels += 1
                let error = answer.error == 0 ? nil : ATTError(rawValue: UInt8(truncatingIfNeeded: answer.error))
                return answerOwed(answer.id, isRead: false, by: owner, incoming) { complete($0, read: .failure(.unlikelyError), writeError: error) }
            default:
                break
            }
        }
        let app: UpdateSender
        switch (kind, grants.admit(channel.id)) {
        case (.notify?, .success(let admitted)), (.gattRead?, .success(let admitted)), (.gattWrite?, .success(let admitted)):
            app = admitted
        case (.notify?, .failure(let refusal)), (.gattRead?, .failure(let refusal)), (.gattWrite?, .failure(let refusal)):
            return fail(incoming, refusal)
        default:
            return fail(incoming, .notADataOperation)
        }
        switch kind {
        case .gattRead(var read)?:
            switch grants.link(to: read.peripheral, heldBy: app) {
            case .success(let link): read.connectionHandle = UInt32(link)
            case .failure(let refusal): return fail(incoming, refusal, field: "peripheral")
            }
            dataPlane.channelReads += 1
            _ = handleClientRequest(.gattRead(read), incoming)
        case .gattWrite(var write)?:
            switch grants.link(to: write.peripheral, heldBy: app) {
            case .success(let link): write.connectionHandle = UInt32(link)
            case .failure(let refusal): return fail(incoming, refusal, field: "peripheral")
            }
            write.onBehalfOf = app.onBehalfOf
            if write.withoutResponse { dataPlane.channelWriteCommands += 1 } else { dataPlane.channelWrites += 1 }
            _ = handleClientRequest(.gattWrite(write), publisher: app.publisher, incoming)
        case .notify(let notify)?:
            notifyFromChannel(notify, app: app, incoming)
        default:
            fail(incoming, .notADataOperation)
        }
    }

    private func notifyFromChannel(_ notify: Beryl_Ipc_V1_Notify, app: UpdateSender, _ incoming: IncomingRequest) {
        var notify = notify
        guard let valueHandle = UInt16(exactly: notify.valueHandle), router.owns(valueHandle, for: app) else {
            return fail(incoming, .outsideGrant("handle \(notify.valueHandle) is not a value of this app's services"), field: "value_handle")
        }
        guard notify.connectionHandles.isEmpty else {
            return fail(incoming, .outsideGrant("a data channel names centrals by identifier, not by link"), field: "connection_handles")
        }
        notify.onBehalfOf = app.onBehalfOf
        if !notify.centrals.isEmpty {
            let named = grants.links(named: notify.centrals)
            // None of the centrals named is connected: the value goes nowhere, as Core Bluetooth's does.
            guard !named.isEmpty else { return _ = incoming.respond(.with { $0.att.notified.peers = 0 }) }
            notify.connectionHandles = named.map(UInt32.init)
        }
        dataPlane.channelValues += 1
        send(notify, from: app.publisher, owns: { router.owns($0, for: app) }, incoming)
    }

    private func fail(_ incoming: IncomingRequest, _ refusal: DataGrants.Refusal, field: String = "") {
        let (reason, message): (Beryl_Ipc_V1_GrantReason, String)
        switch refusal {
        case .revoked:
            dataPlane.refusedRevoked += 1
            (reason, message) = (.revoked, "this app's grant is revoked (it is not in the foreground); its data goes through managerd")
        case .outsideGrant(let what):
            dataPlane.refusedOutsideGrant += 1
            (reason, message) = (.outsideGrant, what)
        case .notADataOperation:
            dataPlane.refusedNotData += 1
            (reason, message) = (.notADataOperation, "a data channel carries an app's values only")
        }
        incoming.fail(.permissionDenied, message, field: field, detail: RemoteDetail(grantReason: reason))
    }

    /// A remote central's read or write of an app's values: to the app's live channel, naming the central as managerd
    /// does, or to the publisher (managerd), which holds, wakes or refuses as the app's lifecycle says.
    func deliverRequest(_ event: Event, for owner: UpdateSender, on link: LinkSession) {
        let sessions = host.server?.sessions ?? [:]
        guard owner.onBehalfOf != 0, let channel = grants.liveChannel(of: owner), let central = grants.name(of: link.handle) else {
            sessions[owner.publisher]?.send(.event(event))
            return
        }
        var direct = event
        let maximumUpdateLength = UInt32(link.server.mtu) - 3
        switch direct.att.kind {
        case .readRequested(var read)?:
            (read.central, read.maximumUpdateLength) = (central, maximumUpdateLength)
            direct.att.readRequested = read
        case .writeRequested(var write)?:
            (write.central, write.maximumUpdateLength) = (central, maximumUpdateLength)
            direct.att.writeRequested = write
        default:
            break
        }
        dataPlane.requestsOnChannels += 1
        sessions[channel]?.send(.event(direct))
    }

    /// Where ReadyToUpdate for a sender goes: its app's live channel, else the publisher that sent for it.
    func session(for sender: UpdateSender) -> IPCSession? {
        let sessions = host.server?.sessions ?? [:]
        if let channel = grants.liveChannel(of: sender), let session = sessions[channel] { return session }
        return sessions[sender.publisher]
    }

    /// A peripheral's notification on a link: to the live channels of the apps managerd said hear it, to managerd for
    /// the rest of them, and as before to every other client (the CLI, tests) that is not a data channel.
    func deliverNotification(_ handle: UInt16, value: [UInt8], indication: Bool, on link: UInt16) {
        var event = Event(notification: handle, value: value, indication: indication, link: link)
        guard let route = grants.route(notificationOf: handle, on: link) else { return broadcastToClients(event) }
        let sessions = host.server?.sessions ?? [:]
        if !route.channels.isEmpty {
            var direct = event
            direct.att.gattNotification.peripheral = route.peripheral
            let bytes = Envelope.event(direct).encoded()
            for channel in route.channels { sessions[channel]?.send(encoded: bytes) }
            dataPlane.notificationsOnChannels += UInt64(route.channels.count)
        }
        broadcastToClients(event) { $0 != route.publisher }
        guard route.publisherDelivers else { return }
        dataPlane.notificationsToPublisher += 1
        event.att.gattNotification.delivered = route.delivered
        sessions[route.publisher]?.send(.event(event))
    }

    /// An event for every client that is not a data channel (those hear only what is addressed to their app).
    func broadcastToClients(_ event: Event, where wanted: (UInt64) -> Bool = { _ in true }) {
        host.server?.broadcast(event) { !grants.isChannel($0.id) && wanted($0.id) }
    }
}
