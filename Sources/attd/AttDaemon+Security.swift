import BerylATT
import BerylCore
import BerylGATT
import BerylHCI
import BerylIPC
import BerylSMP
import BerylStore
import Foundation

/// What attd knows about one link's security beyond the SMP session.
struct LinkSecurityState {
    var peer: DeviceAddress
    /// The bond this peer matched (by identity or a resolved private address), if any.
    var bond: DeviceAddress?
    var encrypted = false
    var authenticated = false
    /// Callers waiting for the link to become secure (IPC Pair requests, ATT requests to retry).
    var waiters: [(Result<Beryl_Ipc_V1_Paired, SecurityFailure>) -> Void] = []
    /// Whether the encryption under way uses a stored key (a failure then means the peer lost its bond).
    var reEncrypting = false
}

/// Pairing options announced for a link before it exists (SetLinkPairing.for_next_link).
struct PendingLinkPairing {
    var central: Bool
    var peer: DeviceAddress?
    var consent: Bool
    var localAddress: DeviceAddress?
}

enum SigningRefusal: Error {
    /// No bond with this peer, or its pairing did not distribute our CSRK.
    case noKey
    case counterExhausted
}

enum SecurityFailure: Error {
    case pairing(SMPFailure)
    case encryption(status: UInt8)
    case linkClosed
}

extension AttDaemon {
    // MARK: Links

    func securityLinkOpened(_ link: LinkSession, peer: DeviceAddress) {
        var state = LinkSecurityState(peer: peer)
        if let local = localIdentity {
            // As peripheral we advertised from the private address we handed out, if any: pairing hashes the addresses in use.
            makeSMP(for: link, peer: peer, localAddress: !link.isCentral ? privateAddress.map { DeviceAddress($0, type: .random) } ?? local.address : local.address)
            if let index = pendingLinkPairing.firstIndex(where: { $0.central == link.isCentral && ($0.peer == nil || $0.peer == peer) }) {
                let options = pendingLinkPairing.remove(at: index)
                if let address = options.localAddress { makeSMP(for: link, peer: peer, localAddress: address) }
                link.smp?.asksJustWorksConsent = options.consent
            }
        } else {
            host.logger.warning("link 0x\(String(link.handle, radix: 16)): controller address unknown; pairing is refused on it")
        }
        if let bond = bonds.first(where: { $0.matches(peer) }) {
            state.bond = bond.identity
            link.server.security.bonded = true
            armSigning(link, with: bond)
            restoreClientState(of: bond.identity, on: link)
        }
        linkSecurity[link.handle] = state
    }

    /// The bonded peer's signed writes are verified with the CSRK it distributed, against the last SignCounter kept.
    func armSigning(_ link: LinkSession, with bond: Bond) {
        guard let csrk = bond.csrk else {
            link.server.peerSigning = nil
            return
        }
        let last = (try? bondStore?.peerSignCounter(bond.identity)) ?? nil
        link.server.peerSigning = PeerSigning(csrk: csrk, lastCounter: last, authenticated: bond.authenticated)
    }

    /// A Signed Write Command for a write without response to a bonded peer that has not encrypted the link
    /// (Core Vol 3 Part C §10.4.1): the next SignCounter is taken from the bond store before the PDU is made.
    func signedWritePDU(on link: LinkSession, handle: UInt16, value: [UInt8]) -> Result<ATTPDU, SigningRefusal> {
        guard let identity = linkSecurity[link.handle]?.bond, let bond = bonds.first(where: { $0.identity == identity }), let csrk = bond.localCSRK else {
            return .failure(.noKey)
        }
        guard let counter = (try? bondStore?.takeLocalSignCounter(identity)) ?? nil else { return .failure(.counterExhausted) }
        guard let command = try? SignedWrite.command(handle: handle, value: value, csrk: csrk, counter: counter) else { return .failure(.noKey) }
        return .success(command)
    }

    /// The link's Security Manager, for the addresses the link uses on the air.
    func makeSMP(for link: LinkSession, peer: DeviceAddress? = nil, localAddress: DeviceAddress) {
        guard let local = localIdentity, let peer = peer ?? linkSecurity[link.handle]?.peer else { return }
        let smp = SMPSession(isInitiator: link.isCentral, configuration: securityConfiguration, identity: local,
                             localAddress: localAddress, peerAddress: peer)
        smp.pairingAllowed = { [unowned self] in self.attempts.allows(peer.address, at: self.host.loop.uptime) }
        link.smp = smp
    }

    func securityLinkClosed(_ handle: UInt16) {
        guard let state = linkSecurity.removeValue(forKey: handle) else { return }
        for waiter in state.waiters { waiter(.failure(.linkClosed)) }
    }

    /// A bonded peer's subscriptions come back as they were (Core Vol 3 Part G §3.3.3.3), and a change to the database
    /// made while it was away is indicated now (§7.1).
    private func restoreClientState(of identity: DeviceAddress, on link: LinkSession) {
        guard let store = bondStore else { return }
        do {
            let (configurations, features) = try store.clientState(identity)
            link.server.restore(clientConfigurations: configurations, clientFeatures: features)
            if !configurations.isEmpty { host.logger.info("restored \(configurations.count) subscription(s) of bonded \(identity)") }
            if let range = try store.takePendingServiceChange(identity) {
                apply(wrap(link.server.indicateServiceChanged(range).outputs, for: link), on: link)
            }
        } catch {
            host.logger.error("bond store: cannot restore \(identity)'s GATT state: \(error)")
        }
    }

    /// A service published while bonded peers are connected takes back their stored subscriptions to it, and its
    /// publisher hears of them as of any subscription.
    func adoptStoredSubscriptions(in range: ClosedRange<UInt16>) {
        guard let store = bondStore else { return }
        for link in links.values {
            guard let identity = linkSecurity[link.handle]?.bond, let (configurations, _) = try? store.clientState(identity) else { continue }
            for (valueHandle, value) in link.server.adoptStored(clientConfigurations: configurations, in: range) {
                host.logger.info("bonded \(identity) is subscribed again to 0x\(String(valueHandle, radix: 16))")
                var event = Event()
                event.att.subscriptionChanged = .with {
                    $0.connectionHandle = UInt32(link.handle)
                    $0.valueHandle = UInt32(valueHandle)
                    $0.notify = value & 0b01 != 0
                    $0.indicate = value & 0b10 != 0
                }
                owner(of: valueHandle)?.send(.event(event))
            }
        }
    }

    /// Keeps a bonded peer's CCCDs and client features after each change.
    func persistClientState(of link: LinkSession) {
        guard let identity = linkSecurity[link.handle]?.bond, let store = bondStore else { return }
        do {
            try store.saveClientState(identity, configurations: link.server.clientConfigurations, features: link.server.clientFeatures)
        } catch {
            host.logger.error("bond store: cannot save \(identity)'s subscriptions: \(error)")
        }
    }

    /// Bonded peers that are not connected hear about a database change when they come back.
    func rememberServiceChangeForAbsentBonds(_ range: ClosedRange<UInt16>) {
        guard let store = bondStore, let changed = database.serviceChangedHandle else { return }
        let present = Set(linkSecurity.values.compactMap(\.bond))
        for bond in bonds where !present.contains(bond.identity) {
            guard let state = try? store.clientState(bond.identity), (state.configurations[changed + 1] ?? 0) & 2 != 0 else { continue }
            do { try store.addPendingServiceChange(bond.identity, range) } catch { host.logger.error("bond store: \(error)") }
        }
    }

    // MARK: Controller events

    func encryptionChanged(_ handle: UInt16, status: UInt8, enabled: Bool) {
        guard let link = links[handle], var state = linkSecurity[handle] else { return }
        let wasReEncrypting = state.reEncrypting
        state.reEncrypting = false
        state.encrypted = enabled
        if enabled, let identity = state.bond, let bond = bonds.first(where: { $0.identity == identity }), !(link.smp?.isPairing ?? false) {
            state.authenticated = bond.authenticated
        }
        linkSecurity[handle] = state
        link.server.security.encrypted = enabled
        link.server.security.authenticated = state.authenticated
        host.logger.info("link 0x\(String(handle, radix: 16)): encryption \(enabled ? "on" : "off") (status 0x\(String(status, radix: 16)))")
        var event = Event()
        event.att.securityChanged = .with {
            $0.connectionHandle = UInt32(handle)
            $0.encrypted = enabled
            $0.authenticated = state.authenticated
            $0.bonded = state.bond != nil
            $0.status = UInt32(status)
        }
        host.server?.broadcast(event)
        if let smp = link.smp, smp.isPairing {
            apply(link.smpOutputs(smp.encryptionChanged(enabled: enabled, at: host.loop.uptime)), on: link)
            return
        }
        if enabled {
            finishSecurity(handle, .success(summary(of: handle)))
        } else if wasReEncrypting, link.isCentral, status == HCIStatus.pinOrKeyMissing.rawValue {
            // The peer no longer has our keys: pair afresh, as iOS does after "Peer removed pairing information".
            host.logger.warning("link 0x\(String(handle, radix: 16)): the peer refused our stored key; pairing again")
            startPairing(on: link)
        } else {
            finishSecurity(handle, .failure(.encryption(status: status)))
        }
    }

    func longTermKeyRequested(_ handle: UInt16, rand: [UInt8], ediv: UInt16) {
        guard let link = links[handle] else { return }
        var key = link.smp?.keyForEncryption(ediv: ediv, rand: rand)
        if key == nil, let identity = linkSecurity[handle]?.bond, let bond = bonds.first(where: { $0.identity == identity }) {
            key = bond.localKey(ediv: ediv, rand: rand)
            linkSecurity[handle]?.reEncrypting = key != nil
        }
        if key == nil { host.logger.info("link 0x\(String(handle, radix: 16)): no key for the central's LTK request; refused") }
        sendCommand(HCICommands.leLongTermKeyReply(handle: handle, ltk: key))
    }

    func sendCommand(_ command: HCICommandPacket) {
        var request = Request()
        request.hci.sendCommand.opcode = UInt32(command.opcode)
        request.hci.sendCommand.parameters = Data(command.parameters)
        hcid?.request(request) { [unowned self] result in
            if case .failure(let error) = result { self.host.logger.warning("HCI command 0x\(String(command.opcode, radix: 16)) failed: \(error)") }
        }
    }

    // MARK: SMP outputs

    func smpEvent(_ output: SMPOutput, on link: LinkSession) {
        let handle = link.handle
        let peer = linkSecurity[handle]?.peer.description ?? "?"
        switch output {
        case .send:
            break
        case .startEncryption(let ltk, let ediv, let rand):
            sendCommand(HCICommands.leEnableEncryption(handle: handle, rand: rand, ediv: ediv, ltk: ltk))
        case .prompt(let prompt):
            var event = Event()
            event.att.pairingPrompt = .with {
                $0.connectionHandle = UInt32(handle)
                $0.peer = peer
                switch prompt {
                case .displayPasskey(let number): $0.kind = .displayPasskey; $0.number = number
                case .enterPasskey: $0.kind = .enterPasskey
                case .confirmNumber(let number): $0.kind = .confirmNumber; $0.number = number
                case .confirmPairing: $0.kind = .confirmPairing
                }
            }
            host.logger.info("link 0x\(String(handle, radix: 16)): pairing prompt \(prompt)")
            host.server?.broadcast(event)
            if autoAccept, prompt == .confirmPairing || smpPromptIsNumber(prompt), let smp = link.smp {
                apply(link.smpOutputs(smp.numberConfirmed(true, at: host.loop.uptime)), on: link)
            }
        case .securityRequested:
            host.logger.info("link 0x\(String(handle, radix: 16)): the peripheral asks for security")
            secure(link) { _ in }
        case .completed(let result):
            pairingCompleted(result, on: link)
        case .failed(let failure):
            if case .local(.repeatedAttempts) = failure {} else if let address = linkSecurity[handle]?.peer.address {
                attempts.failed(address, at: host.loop.uptime)
            }
            host.logger.warning("link 0x\(String(handle, radix: 16)): pairing failed: \(failure)")
            var event = Event()
            event.att.pairingFinished = .with {
                $0.connectionHandle = UInt32(handle)
                $0.peer = peer
                switch failure {
                case .local(let reason): $0.reason = UInt32(reason.rawValue)
                case .remote(let reason): $0.reason = UInt32(reason.rawValue); $0.remote = true
                case .timeout: $0.reason = 0xFF
                }
            }
            host.server?.broadcast(event)
            finishSecurity(handle, .failure(.pairing(failure)))
        case .log(let message):
            host.logger.info("link 0x\(String(handle, radix: 16)): \(message)")
        }
    }

    private func pairingCompleted(_ result: PairingResult, on link: LinkSession) {
        let handle = link.handle
        guard var state = linkSecurity[handle] else { return }
        attempts.succeeded(state.peer.address)
        state.authenticated = result.authenticated
        if result.bonded, securityConfiguration.bondable {
            let identity = result.peerIdentity ?? state.peer
            let bond = Bond(identity: identity, irk: result.peerIRK, peerLTK: result.peerLTK, peerEDIV: result.peerEDIV, peerRand: result.peerRand,
                            localLTK: result.localLTK, localEDIV: result.localEDIV, localRand: result.localRand, csrk: result.peerCSRK,
                            localCSRK: result.localCSRK,
                            authenticated: result.authenticated, secureConnections: result.secureConnections, keySize: result.keySize,
                            pairedFrom: state.peer != identity && state.peer.address.randomKind != .resolvablePrivate ? state.peer : nil)
            do {
                try bondStore?.save(bond)
                bonds.removeAll { $0.identity == identity }
                bonds.append(bond)
                state.bond = identity
                link.server.security.bonded = true
                armSigning(link, with: bond)
            } catch {
                host.logger.error("bond store: cannot save the bond with \(identity): \(error)")
            }
        }
        linkSecurity[handle] = state
        link.server.security.authenticated = result.authenticated
        // Subscriptions made before pairing belong to the bond from now on.
        persistClientState(of: link)
        host.logger.info("link 0x\(String(handle, radix: 16)): paired with \(state.peer) (\(result.secureConnections ? "LE Secure Connections" : "legacy"), "
                         + "\(result.authenticated ? "authenticated" : "unauthenticated"), \(state.bond != nil ? "bonded" : "not bonded"))")
        var event = Event()
        event.att.pairingFinished = .with {
            $0.connectionHandle = UInt32(handle)
            $0.success = true
            $0.peer = state.peer.description
            $0.result = summary(of: handle, secureConnections: result.secureConnections, keySize: result.keySize)
        }
        host.server?.broadcast(event)
        // Our last keys went to hcid just before this: answer once hcid has taken them, so a caller that disconnects
        // straight away cannot overtake them (requests on one connection are handled in order).
        let paired = summary(of: handle, secureConnections: result.secureConnections, keySize: result.keySize)
        var barrier = Request()
        barrier.hci.getControllerInfo = .init()
        guard let hcid else { return finishSecurity(handle, .success(paired)) }
        hcid.request(barrier) { [unowned self] _ in self.finishSecurity(handle, .success(paired)) }
    }

    private func summary(of handle: UInt16, secureConnections: Bool? = nil, keySize: UInt8? = nil) -> Beryl_Ipc_V1_Paired {
        let state = linkSecurity[handle]
        let bond = state?.bond.flatMap { identity in bonds.first { $0.identity == identity } }
        return .with {
            $0.encrypted = state?.encrypted ?? false
            $0.authenticated = state?.authenticated ?? false
            $0.bonded = bond != nil
            $0.secureConnections = secureConnections ?? bond?.secureConnections ?? false
            $0.keySize = UInt32(keySize ?? bond?.keySize ?? 16)
            $0.identity = bond?.identity.description ?? state?.peer.description ?? ""
        }
    }

    private func finishSecurity(_ handle: UInt16, _ result: Result<Beryl_Ipc_V1_Paired, SecurityFailure>) {
        guard let waiters = linkSecurity[handle]?.waiters, !waiters.isEmpty else { return }
        linkSecurity[handle]?.waiters = []
        for waiter in waiters { waiter(result) }
    }

    // MARK: Securing a link

    /// Makes the link encrypted: with the stored key of a bonded peer, else by pairing (central), or by asking the
    /// central to (peripheral, Security Request).
    func secure(_ link: LinkSession, completion: @escaping (Result<Beryl_Ipc_V1_Paired, SecurityFailure>) -> Void) {
        guard var state = linkSecurity[link.handle] else { return completion(.failure(.linkClosed)) }
        state.waiters.append(completion)
        let alreadyUnderWay = state.waiters.count > 1 || (link.smp?.isPairing ?? false) || state.reEncrypting
        linkSecurity[link.handle] = state
        guard !alreadyUnderWay else { return }
        if link.isCentral, let identity = state.bond, let bond = bonds.first(where: { $0.identity == identity }), let key = bond.peerLTK {
            linkSecurity[link.handle]?.reEncrypting = true
            host.logger.info("link 0x\(String(link.handle, radix: 16)): encrypting with the key bonded \(identity) gave us")
            sendCommand(HCICommands.leEnableEncryption(handle: link.handle, rand: bond.peerRand, ediv: bond.peerEDIV, ltk: key))
        } else if link.isCentral {
            startPairing(on: link)
        } else if let smp = link.smp {
            apply(link.smpOutputs(smp.requestSecurity()), on: link)
        } else {
            finishSecurity(link.handle, .failure(.pairing(.local(.pairingNotSupported))))
        }
    }

    private func startPairing(on link: LinkSession) {
        guard let smp = link.smp else { return finishSecurity(link.handle, .failure(.pairing(.local(.pairingNotSupported)))) }
        apply(link.smpOutputs(smp.startPairing(at: host.loop.uptime)), on: link)
    }

    func tickSecurity() {
        for link in links.values {
            guard let smp = link.smp else { continue }
            apply(link.smpOutputs(smp.tick(at: host.loop.uptime)), on: link)
        }
    }

    // MARK: IPC

    func handleSecurityRequest(_ request: Beryl_Ipc_V1_AttRequest.OneOf_Kind, _ incoming: IncomingRequest) -> Bool {
        switch request {
        case .pair(let pair):
            guard let link = links[UInt16(truncatingIfNeeded: pair.connectionHandle)] else {
                incoming.fail(.notFound, "no link with handle 0x\(String(pair.connectionHandle, radix: 16))", field: "connection_handle")
                return true
            }
            if linkSecurity[link.handle]?.encrypted == true, !(link.smp?.isPairing ?? false) {
                incoming.respond(.with { $0.att.paired = summary(of: link.handle) })
                return true
            }
            secure(link) { result in
                switch result {
                case .success(let paired): incoming.respond(.with { $0.att.paired = paired })
                case .failure(let failure): incoming.fail(.securityFailed, Self.describe(failure))
                }
            }
        case .pairingAnswer(let answer):
            guard let link = links[UInt16(truncatingIfNeeded: answer.connectionHandle)], let smp = link.smp, smp.isPairing else {
                incoming.fail(.notFound, "no pairing is under way on link 0x\(String(answer.connectionHandle, radix: 16))", field: "connection_handle")
                return true
            }
            let now = host.loop.uptime
            let outputs = smp.wantsNumberConfirmation ? smp.numberConfirmed(answer.accept, at: now)
                : smp.passkeyEntered(answer.accept ? answer.passkey : nil, at: now)
            apply(link.smpOutputs(outputs), on: link)
            incoming.respond(.with { $0.ack = .init() })
        case .setLinkPairing(let options) where options.forNextLink:
            let peer = options.peer.isEmpty ? nil : DeviceAddress(options.peer)
            let local = options.localAddress.isEmpty ? nil : DeviceAddress(options.localAddress)
            guard options.peer.isEmpty || peer != nil, options.localAddress.isEmpty || local != nil else {
                incoming.fail(.invalidArgument, "an address is not AA:BB:CC:DD:EE:FF[/random]", field: peer == nil ? "peer" : "local_address")
                return true
            }
            pendingLinkPairing.removeAll { $0.central == options.central && $0.peer == peer }
            if !options.clear {
                pendingLinkPairing.append(PendingLinkPairing(central: options.central, peer: peer, consent: options.justWorksConsent, localAddress: local))
            }
            incoming.respond(.with { $0.ack = .init() })
        case .setLinkPairing(let options):
            guard let link = links[UInt16(truncatingIfNeeded: options.connectionHandle)], link.smp != nil else {
                incoming.fail(.notFound, "no link with handle 0x\(String(options.connectionHandle, radix: 16))", field: "connection_handle")
                return true
            }
            if !options.localAddress.isEmpty {
                guard let address = DeviceAddress(options.localAddress) else {
                    incoming.fail(.invalidArgument, "'\(options.localAddress)' is not an address", field: "local_address")
                    return true
                }
                if link.smp?.localAddress != address {
                    guard !(link.smp?.isPairing ?? false) else {
                        incoming.fail(.busy, "pairing is under way on link 0x\(String(link.handle, radix: 16))", field: "local_address")
                        return true
                    }
                    makeSMP(for: link, localAddress: address)
                }
            }
            link.smp?.asksJustWorksConsent = options.justWorksConsent
            incoming.respond(.with { $0.ack = .init() })
        case .getPrivateAddress:
            guard let irk = localIdentity?.irk else {
                incoming.fail(.notReady, "the controller's identity is not known yet")
                return true
            }
            do {
                let address = try AddressResolution.make(irk: irk)
                privateAddress = address
                incoming.respond(.with { $0.att.privateAddress.address = address.description })
            } catch {
                incoming.fail(.internal, "cannot make a private address: \(error)")
            }
        case .listBonds:
            incoming.respond(.with {
                $0.att.bonds.bonds = bonds.sorted { $0.identity.description < $1.identity.description }.map { bond in
                    .with {
                        $0.identity = bond.identity.description
                        $0.authenticated = bond.authenticated
                        $0.secureConnections = bond.secureConnections
                        $0.keySize = UInt32(bond.keySize)
                        $0.irkKnown = bond.irk != nil
                        $0.csrkKnown = bond.csrk != nil
                        $0.subscriptions = UInt32((try? bondStore?.clientState(bond.identity).configurations.count) ?? 0)
                    }
                }
            })
        case .removeBond(let remove):
            guard let identity = DeviceAddress(remove.identity) else {
                incoming.fail(.invalidArgument, "'\(remove.identity)' is not an address (AA:BB:CC:DD:EE:FF or AA:BB:CC:DD:EE:FF/random)", field: "identity")
                return true
            }
            guard bonds.contains(where: { $0.identity == identity }) else {
                incoming.fail(.notFound, "no bond with \(identity)", field: "identity")
                return true
            }
            do {
                try bondStore?.remove(identity)
            } catch {
                incoming.fail(.internal, "bond store: \(error)")
                return true
            }
            bonds.removeAll { $0.identity == identity }
            for (handle, state) in linkSecurity where state.bond == identity {
                linkSecurity[handle]?.bond = nil
                links[handle]?.server.security.bonded = false
                links[handle]?.server.peerSigning = nil
            }
            host.logger.info("bond with \(identity) removed")
            incoming.respond(.with { $0.ack = .init() })
        default:
            return false
        }
        return true
    }

    private func smpPromptIsNumber(_ prompt: PairingPrompt) -> Bool {
        if case .confirmNumber = prompt { return true }
        return false
    }

    static func describe(_ failure: SecurityFailure) -> String {
        switch failure {
        case .pairing(.local(let reason)): "pairing failed: we sent Pairing Failed, \(reason) (0x\(String(reason.rawValue, radix: 16)))"
        case .pairing(.remote(let reason)): "pairing failed: the peer sent Pairing Failed, \(reason) (0x\(String(reason.rawValue, radix: 16)))"
        case .pairing(.timeout): "pairing timed out (30 s without the next step)"
        case .encryption(let status): "encryption failed with HCI status 0x\(String(status, radix: 16))"
        case .linkClosed: "the link closed"
        }
    }
}
