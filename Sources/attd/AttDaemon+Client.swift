import BerylATT
import BerylCore
import BerylGATT
import BerylIPC
import Foundation

/// The GATT client (central role): procedures run as state machines over each link's ATT client.
extension AttDaemon {
    typealias Waiter = (Result<ATTPDU, ATTError>) -> Void

    /// Runs one procedure to its end, one request at a time, and reports its result.
    func runProcedure<R>(on link: LinkSession, _ step: GATTStep<R>, _ next: @escaping (ATTPDU) -> GATTStep<R>,
                         completion: @escaping (Result<R, ATTError>) -> Void) {
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
                case .success(let response): self.runProcedure(on: link, next(response), next, completion: completion)
                case .failure(let error): completion(.failure(error))
                }
            }
            apply(link.clientOutputs(outputs), on: link)
        }
    }

    func clientEvent(_ output: ATTClientOutput, on link: LinkSession) {
        switch output {
        case .response(let id, let pdu):
            waiters.removeValue(forKey: WaiterKey(link: link.handle, id: id))?(.success(pdu))
        case .timedOut(let id):
            host.logger.warning("link 0x\(String(link.handle, radix: 16)): ATT transaction timed out; the bearer is unusable")
            waiters.removeValue(forKey: WaiterKey(link: link.handle, id: id))?(.failure(.unlikelyError))
        case .notification(let handle, let value), .indication(let handle, let value):
            var event = Event()
            event.att.gattNotification = .with {
                $0.connectionHandle = UInt32(link.handle)
                $0.handle = UInt32(handle)
                $0.value = Data(value)
                if case .indication = output { $0.indication = true }
            }
            host.server?.broadcast(event)
        case .log(let message):
            host.logger.debug(message)
        case .send:
            break
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
        func failATT(_ error: ATTError) { incoming.fail(.invalidArgument, "ATT error 0x\(String(error.rawValue, radix: 16)) (\(error))", field: "att_error") }
        switch request {
        case .gattDiscover(let discover):
            guard let link = link(discover.connectionHandle) else { return true }
            discoverAll(on: link) { result in
                switch result {
                case .success(let database): incoming.respond(.with { $0.att.gattDatabase = database })
                case .failure(let error): failATT(error)
                }
            }
        case .gattRead(let read):
            guard let link = link(read.connectionHandle) else { return true }
            var procedure = ReadLongValue(handle: UInt16(truncatingIfNeeded: read.handle), mtu: link.client.mtu)
            runProcedure(on: link, procedure.start(), { procedure.handle($0) }) { result in
                switch result {
                case .success(let value): incoming.respond(.with { $0.att.gattValue.value = Data(value) })
                case .failure(let error): failATT(error)
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
                apply(link.clientOutputs(link.client.submit(.writeCommand(handle: handle, value: value), at: host.loop.uptime).outputs), on: link)
                incoming.respond(.with { $0.ack = .init() })
            } else if value.count <= Int(link.client.mtu) - 3 {
                runProcedure(on: link, GATTStep<Bool>.request(.writeRequest(handle: handle, value: value)), { response -> GATTStep<Bool> in
                    if case .errorResponse(_, _, let error) = response { return .failed(error) }
                    return .done(true)
                }) { result in
                    if case .failure(let error) = result { failATT(error) } else { incoming.respond(.with { $0.ack = .init() }) }
                }
            } else {
                var procedure = WriteLongValue(handle: handle, value: value, mtu: link.client.mtu)
                runProcedure(on: link, procedure.start(), { procedure.handle($0) }) { result in
                    if case .failure(let error) = result { failATT(error) } else { incoming.respond(.with { $0.ack = .init() }) }
                }
            }
        case .gattSubscribe(let subscribe):
            guard let link = link(subscribe.connectionHandle) else { return true }
            let bits: UInt8 = subscribe.enable ? (subscribe.indicate ? 0x02 : 0x01) : 0x00
            let cccd = subscribe.cccdHandle != 0 ? subscribe.cccdHandle : subscribe.valueHandle + 1
            runProcedure(on: link, GATTStep<Bool>.request(.writeRequest(handle: UInt16(truncatingIfNeeded: cccd), value: [bits, 0])), { response -> GATTStep<Bool> in
                if case .errorResponse(_, _, let error) = response { return .failed(error) }
                return .done(true)
            }) { result in
                if case .failure(let error) = result { failATT(error) } else { incoming.respond(.with { $0.ack = .init() }) }
            }
        default:
            return false
        }
        return true
    }

    /// Services, then each one's characteristics, then each characteristic's descriptors.
    private func discoverAll(on link: LinkSession, completion: @escaping (Result<Beryl_Ipc_V1_GattDatabase, ATTError>) -> Void) {
        var services = DiscoverPrimaryServices()
        runProcedure(on: link, services.start(), { services.handle($0) }) { [unowned self] result in
            switch result {
            case .failure(let error): completion(.failure(error))
            case .success(let found):
                self.describe(found, index: 0, on: link, into: Beryl_Ipc_V1_GattDatabase()) { completion($0) }
            }
        }
    }

    private func describe(_ services: [DiscoveredService], index: Int, on link: LinkSession, into database: Beryl_Ipc_V1_GattDatabase,
                          completion: @escaping (Result<Beryl_Ipc_V1_GattDatabase, ATTError>) -> Void) {
        guard index < services.count else { return completion(.success(database)) }
        let service = services[index]
        var characteristics = DiscoverCharacteristics(in: service.start...service.end)
        runProcedure(on: link, characteristics.start(), { characteristics.handle($0) }) { [unowned self] result in
            guard case .success(let found) = result else {
                if case .failure(let error) = result { completion(.failure(error)) }
                return
            }
            self.describeDescriptors(found, index: 0, serviceEnd: service.end, on: link, collected: []) { described in
                var next = database
                next.services.append(.with {
                    $0.uuid = service.uuid.description
                    $0.startHandle = UInt32(service.start)
                    $0.endHandle = UInt32(service.end)
                    $0.characteristics = described
                })
                self.describe(services, index: index + 1, on: link, into: next, completion: completion)
            }
        }
    }

    private func describeDescriptors(_ characteristics: [DiscoveredCharacteristic], index: Int, serviceEnd: UInt16, on link: LinkSession,
                                     collected: [Beryl_Ipc_V1_GattCharacteristicInfo], completion: @escaping ([Beryl_Ipc_V1_GattCharacteristicInfo]) -> Void) {
        guard index < characteristics.count else { return completion(collected) }
        let characteristic = characteristics[index]
        let end = index + 1 < characteristics.count ? characteristics[index + 1].declaration - 1 : serviceEnd
        var info = Beryl_Ipc_V1_GattCharacteristicInfo.with {
            $0.uuid = characteristic.uuid.description
            $0.properties = UInt32(characteristic.properties.rawValue)
            $0.valueHandle = UInt32(characteristic.valueHandle)
        }
        guard characteristic.valueHandle < end else {
            return describeDescriptors(characteristics, index: index + 1, serviceEnd: serviceEnd, on: link, collected: collected + [info], completion: completion)
        }
        var descriptors = DiscoverDescriptors(in: (characteristic.valueHandle + 1)...end)
        runProcedure(on: link, descriptors.start(), { descriptors.handle($0) }) { [unowned self] result in
            if case .success(let found) = result {
                info.descriptors = found.map { descriptor in .with { $0.uuid = descriptor.uuid.description; $0.handle = UInt32(descriptor.handle) } }
            }
            self.describeDescriptors(characteristics, index: index + 1, serviceEnd: serviceEnd, on: link, collected: collected + [info], completion: completion)
        }
    }
}

struct WaiterKey: Hashable {
    var link: UInt16
    var id: UInt64
}
