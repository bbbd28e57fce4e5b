import BerylATT
import BerylAttWire
import BerylCore
import BerylGATT
import BerylHCI
import BerylIPC
import BerylLink
import BerylSMP
import FoundationEssentials
import Glibc

/// The shell around the SecurityManager core: its outputs become HCI commands, SMP PDUs, ATT server settings and
/// events; its waiters are the callers' completions.
extension AttDaemon {
    typealias SecurityCompletion = (Result<SecuritySummary, SecurityFailure>) -> Void

    // MARK: Inputs

    func secure(_ link: LinkSession, completion: @escaping SecurityCompletion) {
        let waiter = SecurityWaiter(nextSecurityWaiter)
        nextSecurityWaiter += 1
        securityWaiters[waiter] = completion
        applySecurity(security.secure(link.handle, for: waiter, at: host.loop.uptime))
    }

    /// A signed write to this link's bonded peer, its SignCounter spent first (Core Vol 3 Part C §10.4.1).
    func signedWritePDU(on link: LinkSession, handle: UInt16, value: [UInt8]) -> Result<ATTPDU, SigningRefusal> {
        security.takeSigningKey(for: link.handle).flatMap { key in
            guard let command = try? SignedWrite.command(handle: handle, value: value, csrk: key.csrk, counter: key.counter) else { return .failure(.noKey) }
            return .success(command)
        }
    }

    /// A service published while bonded peers are connected takes back their stored subscriptions to it, and its
    /// publisher hears of them as of any subscription.
    func adoptStoredSubscriptions(in range: ClosedRange<UInt16>) {
        for link in links.values {
            guard let configurations = security.storedConfigurations(on: link.handle) else { continue }
            announceStoredSubscriptions(link.server.adoptStored(clientConfigurations: configurations, in: range), on: link.handle)
        }
    }

    /// A bonded client's stored configurations took effect: the values' owners hear it subscribe (they heard it
    /// unsubscribe when it left).
    private func announceStoredSubscriptions(_ subscriptions: [(valueHandle: UInt16, value: UInt16)], on handle: UInt16) {
        for (valueHandle, value) in subscriptions {
            host.logger.info("bonded \(security.bondIdentity(of: handle).map(\.description) ?? "?") is subscribed again to 0x\(String(valueHandle, radix: 16))")
            owner(of: valueHandle)?.send(.event(Event(subscriptionChanged: valueHandle, link: handle, notify: value & 0b01 != 0, indicate: value & 0b10 != 0)))
        }
    }

    func persistClientState(of link: LinkSession) {
        applySecurity(security.clientStateChanged(on: link.handle, configurations: link.server.clientConfigurations, features: link.server.clientFeatures))
    }

    func tickSecurity() { applySecurity(security.tick(at: host.loop.uptime)) }

    func sendCommand(_ command: HCICommandPacket) {
        var request = Request()
        request.hci.sendCommand.opcode = UInt32(command.opcode)
        request.hci.sendCommand.parameters = Data(command.parameters)
        requestHcid(request) { [unowned self] result in
            if case .failure(let error) = result { self.host.logger.warning("HCI command 0x\(String(command.opcode, radix: 16)) failed: \(error)") }
        }
    }

    // MARK: Outputs

    func applySecurity(_ outputs: [SecurityOutput]) {
        for output in outputs {
            switch output {
            case .sendSMP(let handle, let pdu):
                guard let link = links[handle] else { continue }
                apply([.send(link.smpPDU(pdu))], on: link)
            case .enableEncryption(let handle, let rand, let ediv, let ltk):
                sendCommand(HCICommands.leEnableEncryption(handle: handle, rand: rand, ediv: ediv, ltk: ltk))
            case .longTermKeyReply(let handle, let ltk):
                sendCommand(HCICommands.leLongTermKeyReply(handle: handle, ltk: ltk))
            case .levelChanged(let handle, let level):
                links[handle]?.server.security = level
            case .encryptionChanged(let handle, let level, let status):
                broadcastToClients(Event(securityChanged: level, link: handle, status: status))
            case .peerSigning(let handle, let key):
                links[handle]?.server.peerSigning = key
            case .restoreClientState(let handle, let configurations, let features):
                guard let link = links[handle] else { continue }
                announceStoredSubscriptions(link.server.restore(clientConfigurations: configurations, clientFeatures: features), on: handle)
            case .peerServiceChanged(let handle, let valueHandle):
                links[handle]?.gatt.rememberServiceChanged(valueHandle)
            case .indicateServiceChanged(let handle, let range):
                guard let link = links[handle] else { continue }
                apply(wrap(link.server.indicateServiceChanged(range).outputs, for: link), on: link)
            case .prompt(let handle, let peer, let prompt):
                broadcastToClients(.with { $0.att.pairingPrompt = Beryl_Ipc_V1_PairingPrompt(link: handle, peer: peer, prompt) })
            case .pairingFinished(let handle, let peer, let result):
                broadcastToClients(.with { $0.att.pairingFinished = Beryl_Ipc_V1_PairingFinished(link: handle, peer: peer, result) })
            case .secured(let waiters, let result, let afterKeysDelivered):
                let completions = waiters.compactMap { securityWaiters.removeValue(forKey: $0) }
                guard afterKeysDelivered, hcid != nil else {
                    for completion in completions { completion(result) }
                    continue
                }
                // Requests on one hcid connection are handled in order: once this is answered, our keys went before it.
                var barrier = Request()
                barrier.hci.getControllerInfo = .init()
                requestHcid(barrier) { _ in for completion in completions { completion(result) } }
            case .log(let level, let message):
                host.logger.log(level, message)
            }
        }
    }

    // MARK: IPC

    func handleSecurityRequest(_ request: Beryl_Ipc_V1_AttRequest.OneOf_Kind, _ incoming: IncomingRequest) -> Bool {
        switch request {
        case .pair(let pair):
            let handle = UInt16(truncatingIfNeeded: pair.connectionHandle)
            guard let link = links[handle] else { incoming.fail(WireFailure(.noLink, link: pair.connectionHandle)); return true }
            if security.level(of: handle)?.encrypted == true, !security.isPairing(handle) {
                incoming.respond(.with { $0.att.paired = Beryl_Ipc_V1_Paired(security.summary(of: handle)) })
                return true
            }
            secure(link) { result in
                switch result {
                case .success(let summary): incoming.respond(.with { $0.att.paired = Beryl_Ipc_V1_Paired(summary) })
                case .failure(let failure): incoming.fail(.securityFailed, failure.message, detail: RemoteDetail(failure))
                }
            }
        case .pairingAnswer(let answer):
            do {
                applySecurity(try security.answerPrompt(UInt16(truncatingIfNeeded: answer.connectionHandle), accept: answer.accept, passkey: answer.passkey,
                                                        at: host.loop.uptime))
                incoming.respond(.with { $0.ack = .init() })
            } catch {
                incoming.fail(WireFailure(error, link: answer.connectionHandle))
            }
        case .setLinkPairing(let wire):
            do throws(WireFailure) {
                let asked = try LinkPairingOptions(wire: wire)
                if wire.forNextLink {
                    security.setNextLinkPairing(central: wire.central, peer: asked.peer, consent: wire.justWorksConsent, localAddress: asked.localAddress,
                                                clear: wire.clear)
                } else {
                    do {
                        try security.setLinkPairing(UInt16(truncatingIfNeeded: wire.connectionHandle), localAddress: asked.localAddress,
                                                    consent: wire.justWorksConsent)
                    } catch { throw WireFailure(error, link: wire.connectionHandle) }
                }
                incoming.respond(.with { $0.ack = .init() })
            } catch {
                incoming.fail(error)
            }
        case .getPrivateAddress:
            do {
                let address = try security.makePrivateAddress()
                incoming.respond(.with { $0.att.privateAddress.address = address.description })
            } catch {
                incoming.fail(WireFailure(error))
            }
        case .listBonds:
            incoming.respond(.with {
                $0.att.bonds.bonds = security.bonds.sorted { $0.identity.description < $1.identity.description }.map { bond in
                    Beryl_Ipc_V1_BondInfo(bond, subscriptions: security.subscriptionCount(of: bond.identity), keyEncryptions: security.keyEncryptions[bond.identity])
                }
            })
        case .removeBond(let remove):
            guard let identity = DeviceAddress(remove.identity) else {
                incoming.fail(.invalidArgument, "'\(remove.identity)' is not an address (AA:BB:CC:DD:EE:FF or AA:BB:CC:DD:EE:FF/random)", field: "identity")
                return true
            }
            do {
                applySecurity(try security.removeBond(identity))
                incoming.respond(.with { $0.ack = .init() })
            } catch {
                incoming.fail(WireFailure(error, identity: remove.identity))
            }
        default:
            return false
        }
        return true
    }
}
