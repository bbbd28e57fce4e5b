import BerylCore
import BerylGAP
import BerylHCI
import BerylIPC
import BerylManager
import BerylManagerWire
import BerylStore
import FoundationEssentials
import Glibc

extension ManagerDaemon {
    /// An app's manager request: the core answers its own commands (`.reply`, `.askController`); the rest need the
    /// peripheral store or attd.
    func handleCommand(_ asked: ManagerCommand, session: UInt64, _ incoming: IncomingRequest) throws(WireFailure) {
        switch asked {
        case .core(let command):
            nextReply += 1
            let token = nextReply
            awaitingReply[token] = incoming
            let directory: any DeviceDirectory = store ?? NoDevices()
            apply(core.command(command, from: session, reply: token, directory: directory))
            // The core answers every command at once; one it left unanswered would otherwise wait for the app's timeout.
            awaitingReply.removeValue(forKey: token)?.fail(.internal, "managerd's core did not answer this request")
        case .retrievePeripherals(let lookup):
            guard let store else { throw WireFailure(.notReady, "the peripheral store is not open") }
            let devices = switch lookup {
            case .addresses(let queries): try queries.map { query throws(WireFailure) in
                let known = AddressType.allCases.compactMap { store.device(at: DeviceAddress(query.address, type: $0)) }
                switch AddressResolution.resolve(query, known: known.map { ($0.address, $0.lastSeen > 0) }) {
                case .success(let address): return store.seen(address, at: 0)  // last seen 0: never heard, only named
                case .failure(let ambiguous): throw WireFailure(.invalidArgument, ambiguous.description, field: "addresses")
                }
            }
            case .identifiers(let identifiers): identifiers.compactMap { store.device($0) }
            case .everyKnown: store.all
            }
            // A listing of every device (`beryl peripherals`) hands no identifier to an app.
            incoming.respond(.with { $0.manager.peripherals.peripherals = devices.map { info(for: $0, handedToApp: lookup != .everyKnown) } })
        case .retrieveConnected(let wanted):
            let connected = core.connectedPeripherals(offering: wanted) { store?.device($0)?.address }.compactMap { store?.device($0) }
            incoming.respond(.with { $0.manager.peripherals.peripherals = connected.map { info(for: $0) } })
        case .gatt(let operation):
            try forwardGatt(operation, session: session, incoming)
        case .addService, .updateValue, .answerPairing:
            try handlePeripheral(asked, session: session, incoming)
        }
    }

    /// The core's answer to an app's command it took (`handleCommand`).
    func answer(_ token: UInt64, _ result: Result<CommandReply, CommandRefusal>) {
        guard let incoming = awaitingReply.removeValue(forKey: token) else { return }
        switch result {
        case .success(let reply): incoming.respond(Response(reply))
        case .failure(let refusal): incoming.fail(WireFailure(refusal))
        }
    }

    /// The controller's answer to what an app's command asked of it answers the app.
    func ask(_ ask: ControllerAsk, answering token: UInt64) {
        guard let incoming = awaitingReply.removeValue(forKey: token) else { return }
        command(ask.packet, named: ask.name, answering: incoming) { returned throws(WireFailure) in try Response(answering: ask, returned: returned) }
    }

    /// The link this session holds to a peripheral.
    func heldLink(_ identifier: String, session: UInt64) throws(WireFailure) -> ConnectionBook.Link {
        guard let link = core.link(to: identifier, heldBy: .session(session)) else { throw .notConnected(identifier) }
        return link
    }

    // MARK: Scanning

    func updateScanning() {
        let wanted = ControllerScan.wanted(appsScanning: core.scans.isScanning, appsAllInBackground: core.scanIsSlow, lab: lab.scan,
                                           poweredOn: state == .poweredOn, ownAddressType: ownAddressType)
        guard hcid != nil else { return }
        for command in ControllerScan.commands(from: controllerScan, to: wanted) { self.command(command) }
        controllerScan = wanted
    }

    func advertisementReceived(_ received: AdvertisingReport) {
        guard let store else { return }
        switch core.advertisingReceived(received, directory: store) {
        case .malformed(let error): host.logger.debug("malformed advertising data from \(received.address) dropped: \(error)")
        case .heard(let discoveries): discoveries.forEach(report)
        }
    }

    func report(_ discovery: Discovery) {
        guard let device = store?.device(discovery.identifier) else { return }
        send(.with { $0.discovered = .with { $0.manager = discovery.target.manager; $0.peripheral = info(for: device) } }, to: discovery.target.holder)
    }

    func info(for device: KnownDevice, handedToApp: Bool = true) -> Beryl_Ipc_V1_PeripheralInfo {
        if handedToApp { handedOut(device.identifier) }
        return .init(device, advertisement: core.heard.advertisements[device.address], rssi: core.heard.rssi[device.address],
                     connected: book.link(for: device.identifier) != nil)
    }

    // MARK: Connections

    func apply(_ outputs: [CentralConnections.Output]) {
        for output in outputs {
            switch output {
            case .event(.requestedAgain(let key, let identifier, let reason)):
                host.logger.info("\(core.restoration.manager(heldBy: key.holder)?.appID ?? "?")'s link to \(identifier) dropped (0x\(String(reason, radix: 16))); connection requested again for it")
            case .event(let event):
                if let wire = Beryl_Ipc_V1_ManagerEvent(event) { send(wire, to: event.key.holder) }
            case .controller(let action):
                var ownAddress = ownAddressType
                if case .connect(let address) = action, let labAddress = lab.ownAddress(connectingTo: address) { ownAddress = labAddress.rawValue }
                let packets = action.commands(ownAddressType: ownAddress)
                for packet in packets.dropLast() { command(packet) }
                guard let last = packets.last else { continue }
                command(last) { [unowned self] result in
                    guard case .success(let status) = result, core.connections.answered(action, status: status.first ?? 0xFF, at: host.loop.uptime) else { return }
                    host.logger.warning("connection attempt refused (0x\(String(status.first ?? 0xFF, radix: 16))); retrying")
                    armDeadline()
                }
            }
        }
    }

    /// Returns the identifier a link's peer was given if it was unknown until now.
    @discardableResult
    func linkEvent(_ event: LinkEvent, stackFailed: Bool = false) -> String? {
        switch event {
        case .connected(let handle, let central, let peer):
            guard let store else { return nil }
            let wasKnown = store.device(at: peer) != nil
            let device = store.seen(peer, at: Date().timeIntervalSince1970)
            host.logger.info("link 0x\(String(handle, radix: 16)) up with \(peer) as \(device.identifier)")
            apply(core.linkUp(handle: handle, identifier: device.identifier, address: peer, isCentral: central))
            return wasKnown ? nil : device.identifier
        case .connectionFailed(let status):
            host.logger.info("connection attempt ended (0x\(String(status, radix: 16))); trying again if anyone still waits")
            apply(core.connections.attemptEnded())
        case .disconnected(let handle, let reason):
            apply(core.linkDown(handle: handle, reason: reason, stackFailed: stackFailed))
            applyLab(lab.linkEnded(handle, book: book, at: host.loop.uptime))
        default:
            break
        }
        return nil
    }

    // MARK: GATT client through attd

    func forwardGatt(_ operation: Beryl_Ipc_V1_GattOperation, session: UInt64, _ incoming: IncomingRequest) throws(WireFailure) {
        let link = try heldLink(operation.peripheral, session: session)
        guard let request = Beryl_Ipc_V1_AttRequest(operation, connectionHandle: UInt32(link.handle), session: session) else {
            throw WireFailure(.invalidArgument, "no GATT operation named (discover, read, write, set_notify or reliable_write)", field: "kind")
        }
        guard let attd else { throw .attdUnreachable }
        let (ask, identifier) = (GattAsk(operation), operation.peripheral)
        switch core.gattAsked(ask, on: link.handle, identifier: identifier, by: .session(session)) {
        case .waitForBearer(let token):
            gattWaiting[token] = { [unowned self] in
                do throws(WireFailure) { try forwardGatt(operation, session: session, incoming) } catch { incoming.fail(error) }
            }
            return
        case .answered(let outputs):
            apply(outputs)
            incoming.respond(.with { $0.manager.gatt = .init() })
            return
        case .forward:
            break
        }
        if case .setNotify(let notify)? = operation.kind, notify.enable, let valueHandle = UInt16(exactly: notify.valueHandle) {
            refreshAudience(of: valueHandle, on: link.handle, adding: session)
        }
        attd.request(.with { $0.att = request }) { [unowned self] result in
            // An ordered write without response not sent is canSendWriteWithoutResponse false; attd sends this app's
            // GattWriteReady when the link has room.
            if operation.write.ordered, let answer = OrderedSendAnswer(result, ordered: true) {
                incoming.respond(.with { $0.manager.gatt.writeCommand = .init(answer) })
                return
            }
            if case .success(let response) = result, case .discover(let discover)? = operation.kind {
                let services = response.att.gattDatabase.services.compactMap { BluetoothUUID($0.uuid) }
                apply(core.discovered(discovery(response.att.gattDatabase, of: discover, on: identifier), services: services,
                                      everyService: discover.serviceUuids.isEmpty, on: identifier, by: .session(session)))
            }
            apply(core.gattAnswered(ask, succeeded: (try? result.get()) != nil, on: link.handle, identifier: identifier, by: .session(session)))
            if case .setNotify(let notify)? = operation.kind, let valueHandle = UInt16(exactly: notify.valueHandle) {
                refreshAudience(of: valueHandle, on: link.handle)
            }
            switch result {
            case .success(let response): incoming.respond(Response(gattAnswer: response.att))
            case .failure(let error): incoming.fail(relaying: error, from: "attd")
            }
        }
    }

    /// The last app subscribed to a peripheral's value let go while others keep the link: its descriptor is cleared.
    func clearSubscription(_ clearing: RemoteSubscriptions.Clearing) {
        guard let attd, core.attMTUs[clearing.value.link] != nil else { return }
        attd.request(.with { $0.att = .init(clearing: clearing) }) { [unowned self] result in
            if case .failure(let error) = result {
                host.logger.info("subscription to 0x\(String(clearing.value.valueHandle, radix: 16)) on link 0x\(String(clearing.value.link, radix: 16)) not cleared: \(error)")
            }
        }
    }

    /// What a discovery answered, as the record keeps it; nil when attd's answer does not read as one.
    private func discovery(_ answer: Beryl_Ipc_V1_GattDatabase, of discover: Beryl_Ipc_V1_DiscoverAttributes,
                           on identifier: String) -> RemoteDatabase.Discovery? {
        let (lower, upper) = (max(1, discover.startHandle), discover.endHandle == 0 ? 0xFFFF : discover.endHandle)
        guard lower <= upper, upper <= 0xFFFF else { return nil }
        do {
            return try RemoteDatabase.Discovery(wire: answer, depth: discover.depth, range: UInt16(lower)...UInt16(upper), sought: discover.serviceUuids)
        } catch {
            host.logger.error("what attd found on \(identifier) is not kept for restoration: \(error)")
            return nil
        }
    }

    /// What attd's GATT client heard on a link goes to every session holding that peripheral, once each (`only`: to
    /// that one, if it holds it).
    func forwardToHolders(_ event: Beryl_Ipc_V1_AttEvent.OneOf_Kind, connectionHandle: UInt32, only: ManagerHolder? = nil,
                          where wanted: (ManagerHolder) -> Bool = { _ in true }) {
        let link = UInt16(truncatingIfNeeded: connectionHandle)
        var audience = core.holders(ofLink: link)
        if case .gattNotification(let notification) = event, let valueHandle = UInt16(exactly: notification.handle) {
            audience = core.audience(ofNotification: valueHandle, onLink: link)
        }
        guard let (identifier, holders) = audience, let wire = Beryl_Ipc_V1_ManagerEvent(event, peripheral: identifier) else { return }
        for holder in holders.sorted() where (only == nil || holder == only) && wanted(holder) { send(wire, to: holder) }
    }
}

/// A directory with no devices, for a managerd whose peripheral store did not open: nothing is known.
private struct NoDevices: DeviceDirectory {
    func identifier(at address: DeviceAddress) -> String? { nil }
    func seen(_ address: DeviceAddress, name: String?) -> String { "" }
    func address(of identifier: String) -> DeviceAddress? { nil }
}
