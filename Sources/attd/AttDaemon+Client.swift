import BerylATT
import BerylAttWire
import BerylCore
import BerylGATT
import BerylHCI
import BerylIPC
import Foundation

/// The GATT client (central role): procedures run as state machines over each link's ATT client.
extension AttDaemon {
    typealias Waiter = (Result<ATTPDU, ATTError>) -> Void

    /// Runs one procedure to its end, one request at a time, and reports its result.
    func runProcedure<R>(on link: LinkSession, _ step: GATTStep<R>, _ next: @escaping (ATTPDU) -> GATTStep<R>,
                         retried: Bool = false, completion: @escaping (Result<R, ATTError>) -> Void) {
        switch step {
        case .done(let result):
            completion(.success(result))
        case .failed(let error):
            completion(.failure(error))
        case .request(let pdu):
            link.now = host.loop.uptime
            let (id, outputs) = link.client.submit(pdu, at: host.loop.uptime)
            waiters[WaiterKey(link: link.handle, id: id)] = { [unowned self] result in
                switch result {
                case .success(.errorResponse(_, _, let error)) where !retried && self.needsSecurity(error, on: link):
                    // As iOS does: secure the link (stored key, else pairing), then send the same request again once.
                    self.host.logger.info("link 0x\(String(link.handle, radix: 16)): \(error) from the server; securing the link and retrying")
                    self.secure(link) { [unowned self] secured in
                        switch secured {
                        case .success: self.runProcedure(on: link, step, next, retried: true, completion: completion)
                        case .failure(let failure):
                            self.host.logger.warning("link 0x\(String(link.handle, radix: 16)): could not secure the link: \(Self.describe(failure))")
                            completion(.failure(error))
                        }
                    }
                case .success(let response): self.runProcedure(on: link, next(response), next, retried: retried, completion: completion)
                case .failure(let error): completion(.failure(error))
                }
            }
            apply(link.clientOutputs(outputs), on: link)
        }
    }

    /// An ATT error that encryption (or pairing) on this link would cure (Core Vol 3 Part C §10.3.2).
    private func needsSecurity(_ error: ATTError, on link: LinkSession) -> Bool {
        guard let level = security.level(of: link.handle), security.canSecure(link.handle) else { return false }
        switch error {
        case .insufficientEncryption, .insufficientEncryptionKeySize: return !level.encrypted
        case .insufficientAuthentication: return !level.encrypted || !level.authenticated
        default: return false
        }
    }

    func clientEvent(_ output: ATTClientOutput, on link: LinkSession) {
        switch output {
        case .response(let id, let pdu):
            waiters.removeValue(forKey: WaiterKey(link: link.handle, id: id))?(.success(pdu))
        case .timedOut(let id):
            // No further ATT on this bearer (Core Vol 3 Part F §3.3.3): only a new link brings ATT back, so end this one
            // rather than leave the apps on it stuck; they hear of the disconnection and connect again.
            host.logger.warning("link 0x\(String(link.handle, radix: 16)): ATT transaction timed out; the bearer is unusable, disconnecting")
            waiters.removeValue(forKey: WaiterKey(link: link.handle, id: id))?(.failure(.unlikelyError))
            sendCommand(HCICommands.disconnect(handle: link.handle))
        case .indication(let handle, let value):
            switch clientRoles[link.handle, default: GATTClientRole()].indicated(handle: handle, value: value) {
            case .rediscover(let range): rediscover(range, on: link)
            case .merged: break
            case .deliver: broadcastNotification(handle, value, indication: true, on: link)
            }
        case .notification(let handle, let value):
            broadcastNotification(handle, value, indication: false, on: link)
        case .log(let message):
            host.logger.debug(message)
        case .send:
            break
        }
    }

    private func broadcastNotification(_ handle: UInt16, _ value: [UInt8], indication: Bool, on link: LinkSession) {
        var event = Event()
        event.att.gattNotification = .with {
            $0.connectionHandle = UInt32(link.handle)
            $0.handle = UInt32(handle)
            $0.value = Data(value)
            $0.indication = indication
        }
        host.server?.broadcast(event)
    }

    /// Re-discovers a range the peer says changed and tells the clients; the link's role says what comes next.
    private func rediscover(_ range: ClosedRange<UInt16>, on link: LinkSession) {
        host.logger.info("link 0x\(String(link.handle, radix: 16)): peer's services changed in \(range); re-discovering")
        discover(DiscoveryScope(range: range), on: link) { [unowned self] result in
            var event = Event()
            event.att.gattServiceChanged = .with {
                $0.connectionHandle = UInt32(link.handle)
                $0.startHandle = UInt32(range.lowerBound)
                $0.endHandle = UInt32(range.upperBound)
                if case .success(let database) = result { $0.database = database }
            }
            self.host.server?.broadcast(event)
            guard self.links[link.handle] === link, let next = self.clientRoles[link.handle]?.rediscoveryFinished() else { return }
            self.rediscover(next, on: link)
        }
    }

    func failWaiters(of handle: UInt16) {
        for key in waiters.keys where key.link == handle { waiters.removeValue(forKey: key)?(.failure(.unlikelyError)) }
    }

    func tickClients() {
        for link in links.values {
            link.now = host.loop.uptime
            apply(link.clientOutputs(link.client.tick(at: host.loop.uptime)), on: link)
        }
    }

    func handleClientRequest(_ request: Beryl_Ipc_V1_AttRequest.OneOf_Kind, _ incoming: IncomingRequest) -> Bool {
        func link(_ handle: UInt32) -> LinkSession? {
            guard let link = links[UInt16(truncatingIfNeeded: handle)] else {
                incoming.fail(.notFound, "no link with handle 0x\(String(handle, radix: 16))", field: "connection_handle")
                return nil
            }
            guard link.client.isUsable else {
                incoming.fail(.notReady, "the link's ATT bearer timed out and is unusable until it reconnects")
                return nil
            }
            return link
        }
        func failATT(_ error: ATTError, on link: LinkSession) {
            // Waiters fail when their link closes or its bearer times out; what the app hears is that, not the stand-in code.
            if links[link.handle] !== link {
                incoming.fail(.notFound, "the link went down", field: "connection_handle", detail: RemoteDetail(bluetoothError: .peripheralDisconnected))
            } else if !link.client.isUsable {
                incoming.fail(.timeout, "the ATT transaction timed out (Core Vol 3 Part F §3.3.3)", detail: RemoteDetail(bluetoothError: .connectionTimeout))
            } else {
                incoming.fail(.invalidArgument, "ATT error 0x\(String(error.rawValue, radix: 16)) (\(error))", field: "att_error",
                              detail: RemoteDetail(attError: error.rawValue))
            }
        }
        switch request {
        case .gattDiscover(let request):
            guard let link = link(request.connectionHandle) else { return true }
            let first = UInt16(clamping: max(1, request.startHandle)), last = UInt16(clamping: request.endHandle == 0 ? 0xFFFF : request.endHandle)
            guard first <= last else {
                incoming.fail(.invalidArgument, "start_handle is past end_handle", field: "start_handle")
                return true
            }
            var scope = DiscoveryScope(range: first...last)
            for (field, strings) in [("service_uuids", request.serviceUuids), ("characteristic_uuids", request.characteristicUuids)] {
                let parsed = strings.compactMap(BluetoothUUID.init)
                guard parsed.count == strings.count else {
                    incoming.fail(.invalidArgument, "not a UUID in \(strings)", field: field)
                    return true
                }
                guard !parsed.isEmpty else { continue }
                if field == "service_uuids" { scope.services = parsed } else { scope.characteristics = parsed }
            }
            let answer: (Result<Beryl_Ipc_V1_GattDatabase, ATTError>) -> Void = { result in
                switch result {
                case .success(let database): incoming.respond(.with { $0.att.gattDatabase = database })
                case .failure(let error): failATT(error, on: link)
                }
            }
            switch request.depth {
            case .whole, .UNRECOGNIZED: discover(scope, on: link, completion: answer)
            case .services: discoverServicesOnly(scope, on: link, completion: answer)
            case .included: discoverIncluded(in: scope.range, on: link, completion: answer)
            case .characteristics: discoverCharacteristicsOnly(scope, on: link, completion: answer)
            case .descriptors: discoverDescriptorsOnly(in: scope.range, on: link, completion: answer)
            }
        case .gattRead(let read):
            guard let link = link(read.connectionHandle) else { return true }
            var procedure = ReadLongValue(handle: UInt16(truncatingIfNeeded: read.handle), mtu: link.client.mtu)
            runProcedure(on: link, procedure.start(), { procedure.handle($0) }) { result in
                switch result {
                case .success(let value): incoming.respond(.with { $0.att.gattValue.value = Data(value) })
                case .failure(let error): failATT(error, on: link)
                }
            }
        case .gattWrite(let write):
            guard let link = link(write.connectionHandle) else { return true }
            let handle = UInt16(truncatingIfNeeded: write.handle)
            let value = Array(write.value)
            if write.withoutResponse {
                guard value.count <= Int(link.client.mtu) - 3 else {
                    incoming.fail(.invalidArgument, "a write without response carries at most ATT_MTU-3 = \(link.client.mtu - 3) bytes", field: "value")
                    return true
                }
                // Write Without Response has no answer to pace it, so the link's unsent ones are capped; the app hears when
                // there is room again (Core Bluetooth's canSendWriteWithoutResponse and peripheralIsReady(toSendWriteWithoutResponse:)).
                guard pacer.hasRoom(on: link.handle) else {
                    pacer.refuseWrite(on: link.handle)
                    incoming.fail(.busy, "the link's transmit queue is full; wait for GattWriteReady")
                    return true
                }
                var command = ATTPDU.writeCommand(handle: handle, value: value)
                if write.signed, security.level(of: link.handle)?.encrypted != true {
                    guard value.count <= Int(link.client.mtu) - 15 else {
                        incoming.fail(.invalidArgument, "a signed write carries at most ATT_MTU-15 = \(Int(link.client.mtu) - 15) bytes", field: "value")
                        return true
                    }
                    switch signedWritePDU(on: link, handle: handle, value: value) {
                    case .success(let signed): command = signed
                    case .failure(let refusal):
                        // As a peer would answer an unauthenticated client: pair (and bond) first.
                        incoming.fail(.securityFailed, refusal == .noKey ? "a signed write needs a bond with this peer whose pairing distributed our CSRK"
                                      : "this bond's SignCounter is spent; pair again", detail: RemoteDetail(attError: 0x05))
                        return true
                    }
                }
                for case .send(let pdu) in link.clientOutputs(link.client.submit(command, at: host.loop.uptime).outputs) {
                    enqueuePaced(pdu, on: link.handle)
                }
                incoming.respond(.with { $0.ack = .init() })
            } else if value.count <= Int(link.client.mtu) - 3 {
                runProcedure(on: link, GATTStep<Bool>.request(.writeRequest(handle: handle, value: value)), { response -> GATTStep<Bool> in
                    if case .errorResponse(_, _, let error) = response { return .failed(error) }
                    return .done(true)
                }) { result in
                    if case .failure(let error) = result { failATT(error, on: link) } else { incoming.respond(.with { $0.ack = .init() }) }
                }
            } else {
                var procedure = WriteLongValue(handle: handle, value: value, mtu: link.client.mtu)
                runProcedure(on: link, procedure.start(), { procedure.handle($0) }) { result in
                    if case .failure(let error) = result { failATT(error, on: link) } else { incoming.respond(.with { $0.ack = .init() }) }
                }
            }
        case .gattSubscribe(let subscribe):
            guard let link = link(subscribe.connectionHandle) else { return true }
            let bits: UInt8 = subscribe.enable ? (subscribe.indicate ? 0x02 : 0x01) : 0x00
            // The CCCD named, else the attribute after a value of 1...0xFFFE (where a CCCD that was not discovered sits).
            let (cccd, field) = subscribe.cccdHandle != 0
                ? (UInt16(exactly: subscribe.cccdHandle), "cccd_handle")
                : ((1..<0xFFFF).contains(subscribe.valueHandle) ? UInt16(subscribe.valueHandle + 1) : nil, "value_handle")
            guard let cccd else {
                incoming.fail(.invalidArgument, "\(field) names no attribute whose CCCD could be written", field: field)
                return true
            }
            runProcedure(on: link, GATTStep<Bool>.request(.writeRequest(handle: cccd, value: [bits, 0])), { response -> GATTStep<Bool> in
                if case .errorResponse(_, _, let error) = response { return .failed(error) }
                return .done(true)
            }) { result in
                if case .failure(let error) = result { failATT(error, on: link) } else { incoming.respond(.with { $0.ack = .init() }) }
            }
        case .gattReadMultiple(let read):
            guard let link = link(read.connectionHandle) else { return true }
            let procedure = ReadMultipleValues(handles: read.handles.map { UInt16(truncatingIfNeeded: $0) })
            guard read.handles.count >= 2 else {
                incoming.fail(.invalidArgument, "Read Multiple takes two or more handles", field: "handles")
                return true
            }
            runProcedure(on: link, procedure.start(), { procedure.handle($0) }) { result in
                switch result {
                case .success(let value): incoming.respond(.with { $0.att.gattValue.value = Data(value) })
                case .failure(let error): failATT(error, on: link)
                }
            }
        case .gattReadByType(let read):
            guard let link = link(read.connectionHandle) else { return true }
            guard let uuid = BluetoothUUID(read.uuid) else {
                incoming.fail(.invalidArgument, "'\(read.uuid)' is not a UUID", field: "uuid")
                return true
            }
            let end = read.endHandle == 0 ? 0xFFFF : UInt16(clamping: read.endHandle)
            let start = UInt16(clamping: max(1, read.startHandle))
            guard start <= end else {
                incoming.fail(.invalidArgument, "start_handle is past end_handle", field: "start_handle")
                return true
            }
            var procedure = ReadByCharacteristicUUID(uuid: uuid, in: start...end)
            runProcedure(on: link, procedure.start(), { procedure.handle($0) }) { result in
                switch result {
                case .success(let values):
                    incoming.respond(.with {
                        $0.att.gattValues.values = values.map { found in .with { $0.handle = UInt32(found.handle); $0.value = Data(found.value) } }
                    })
                case .failure(let error): failATT(error, on: link)
                }
            }
        case .gattReliableWrite(let write):
            guard let link = link(write.connectionHandle) else { return true }
            guard !write.writes.isEmpty, write.writes.allSatisfy({ $0.offset == 0 && $0.value.count <= ATTServer.maxValueLength && $0.handle > 0 && $0.handle <= 0xFFFF }) else {
                incoming.fail(.invalidArgument, "a reliable write takes one or more values (offset 0, at most 512 bytes) for valid handles", field: "writes")
                return true
            }
            let parts = write.writes.map { (handle: UInt16($0.handle), value: Array($0.value)) }
            var procedure = WriteLongValue(writes: parts, mtu: link.client.mtu)
            runProcedure(on: link, procedure.start(), { procedure.handle($0) }) { result in
                switch result {
                case .success(true): incoming.respond(.with { $0.ack = .init() })
                // An echo that came back different: the server's queue was cancelled, nothing was written.
                case .success(false): incoming.fail(.invalidArgument, "the server echoed a part differently; the reliable write was cancelled", field: "att_error",
                                                     detail: RemoteDetail(bluetoothError: .unknown))
                case .failure(let error): failATT(error, on: link)
                }
            }
        default:
            return false
        }
        return true
    }

    /// Services, then each one's included services, characteristics and descriptors; the peer's Service Changed is
    /// learned on the way and subscribed to, as iOS does (Core Vol 3 Part G §7.1).
    func discover(_ scope: DiscoveryScope, on link: LinkSession, completion: @escaping (Result<Beryl_Ipc_V1_GattDatabase, ATTError>) -> Void) {
        var discovery = DatabaseDiscovery(scope: scope, looksForServiceChanged: clientRoles[link.handle, default: GATTClientRole()].discoveryLooksForServiceChanged)
        runProcedure(on: link, discovery.start(), { [unowned self] response in
            let step = discovery.handle(response)
            if self.links[link.handle] === link, let cccd = self.clientRoles[link.handle, default: GATTClientRole()].learn(from: discovery) {
                self.subscribeToServiceChanged(cccd: cccd, on: link)
            }
            return step
        }) { result in
            completion(result.map(Beryl_Ipc_V1_GattDatabase.init))
        }
    }

    /// Primary service discovery alone (Core Vol 3 Part G §4.4), as `discoverServices` asks. Like iOS, a client
    /// that has not yet found the peer's Service Changed looks for it too, out of the app's sight (§7.1).
    func discoverServicesOnly(_ scope: DiscoveryScope, on link: LinkSession, completion: @escaping (Result<Beryl_Ipc_V1_GattDatabase, ATTError>) -> Void) {
        var discovery = DatabaseDiscovery(scope: scope, looksForServiceChanged: false, servicesOnly: true)
        runProcedure(on: link, discovery.start(), { discovery.handle($0) }) { [unowned self] result in
            switch result {
            case .failure(let error): completion(.failure(error))
            case .success(let found):
                completion(.success(Beryl_Ipc_V1_GattDatabase(found)))
                guard links[link.handle] === link, clientRoles[link.handle, default: GATTClientRole()].shouldLookForServiceChanged() else { return }
                discover(GATTClientRole.serviceChangedScope, on: link) { _ in }
            }
        }
    }

    /// Find Included Services over one service's range (§4.5.1).
    func discoverIncluded(in range: ClosedRange<UInt16>, on link: LinkSession, completion: @escaping (Result<Beryl_Ipc_V1_GattDatabase, ATTError>) -> Void) {
        var includes = FindIncludedServices(in: range)
        runProcedure(on: link, includes.start(), { includes.handle($0) }) { result in
            completion(result.map { Beryl_Ipc_V1_GattDatabase(included: $0, in: range) })
        }
    }

    /// Discover All Characteristics of a Service (§4.6.1), filtered afterwards as Core Bluetooth filters, no descriptors.
    func discoverCharacteristicsOnly(_ scope: DiscoveryScope, on link: LinkSession, completion: @escaping (Result<Beryl_Ipc_V1_GattDatabase, ATTError>) -> Void) {
        var characteristics = DiscoverCharacteristics(in: scope.range)
        runProcedure(on: link, characteristics.start(), { characteristics.handle($0) }) { result in
            completion(result.map { found in
                Beryl_Ipc_V1_GattDatabase(characteristics: found.filter { scope.characteristics?.contains($0.uuid) ?? true }, in: scope.range)
            })
        }
    }

    /// Discover All Characteristic Descriptors (§4.7.1) in one characteristic's range.
    func discoverDescriptorsOnly(in range: ClosedRange<UInt16>, on link: LinkSession, completion: @escaping (Result<Beryl_Ipc_V1_GattDatabase, ATTError>) -> Void) {
        var descriptors = DiscoverDescriptors(in: range)
        runProcedure(on: link, descriptors.start(), { descriptors.handle($0) }) { result in
            completion(result.map { Beryl_Ipc_V1_GattDatabase(descriptors: DiscoverDescriptors.ofOneCharacteristic($0)) })
        }
    }
}

extension AttDaemon {
    /// Like iOS, a client that found the peer's Service Changed characteristic asks for its indications (Core Vol 3 Part G §7.1).
    func subscribeToServiceChanged(cccd: UInt16, on link: LinkSession) {
        runProcedure(on: link, GATTStep<Bool>.request(.writeRequest(handle: cccd, value: [0x02, 0x00])), { response -> GATTStep<Bool> in
            if case .errorResponse(_, _, let error) = response { return .failed(error) }
            return .done(true)
        }) { [unowned self] result in
            if case .failure(let error) = result {
                self.host.logger.info("link 0x\(String(link.handle, radix: 16)): Service Changed indications refused (\(error))")
            }
        }
    }
}

struct WaiterKey: Hashable {
    var link: UInt16
    var id: UInt64
}
