import BerylATT
import BerylCore
import BerylGATT
import BerylIPC
import Foundation

extension AttDaemon {
    func handle(_ incoming: IncomingRequest) -> Bool {
        guard case .att(let request)? = incoming.request.kind, let session = incoming.session else { return false }
        switch request.kind {
        case .getBearers?:
            var response = Response()
            response.att.bearers.bearers = links.values.sorted { $0.handle < $1.handle }.map { link in
                .with {
                    $0.connectionHandle = UInt32(link.handle)
                    $0.attMtu = UInt32(link.server.mtu)
                    $0.central = link.isCentral
                    $0.peerAddress = security.peer(of: link.handle)?.description ?? ""
                }
            }
            incoming.respond(response)
        case .publishService(let publish)?:
            publishService(publish.service, for: session, incoming)
        case .unpublishService(let unpublish)?:
            guard unpublish.startHandle <= 0xFFFF, let range = router.unpublish(startingAt: UInt16(unpublish.startHandle), by: session.id) else {
                incoming.fail(.notFound, "this session published no service at handle \(unpublish.startHandle)", field: "start_handle")
                return true
            }
            _ = database.removeService(at: range.lowerBound)
            incoming.respond(.with { $0.ack = .init() })
            announceDatabaseChange(range)
        case .notify(let notify)?:
            guard notify.valueHandle > 0, notify.valueHandle < 0xFFFF,
                  router.owns(session.id, UInt16(notify.valueHandle)) else {
                incoming.fail(.notFound, "handle \(notify.valueHandle) is not a value of this session's services", field: "value_handle")
                return true
            }
            guard notify.value.count <= ATTServer.maxValueLength else {
                incoming.fail(.invalidArgument, "values are at most 512 bytes", field: "value")
                return true
            }
            // Notifications are paced per link; when any subscribed link is full the update is refused whole, as
            // Core Bluetooth's updateValue returns false, and ReadyToUpdate follows.
            let valueHandle = UInt16(notify.valueHandle)
            if !notify.indicate, links.values.contains(where: { !pacer.hasRoom(on: $0.handle) && $0.server.notification(valueHandle: valueHandle, value: []) != nil }) {
                pacer.refuseNotification(from: session.id)
                incoming.fail(.busy, "the transmit queue is full; wait for ReadyToUpdate")
                return true
            }
            var peers: UInt32 = 0
            for link in links.values {
                if notify.indicate {
                    let (subscribed, outputs) = link.server.indicate(valueHandle: UInt16(notify.valueHandle), value: Array(notify.value))
                    if subscribed { peers += 1 }
                    apply(wrap(outputs, for: link), on: link)
                } else if let pdu = link.server.notification(valueHandle: valueHandle, value: Array(notify.value)) {
                    peers += 1
                    enqueuePaced(link.attPDU(pdu), on: link.handle)
                }
            }
            incoming.respond(.with { $0.att.notified.peers = peers })
        case .answerRead(let answer)?:
            guard let owed = try? router.answer(answer.id, isRead: true) else {
                incoming.fail(.notFound, "no read \(answer.id) is waiting for an answer (answered already, or timed out)", field: "id")
                return true
            }
            let result: Result<[UInt8], ATTError> = answer.error == 0 ? .success(Array(answer.value))
                : .failure(ATTError(rawValue: UInt8(truncatingIfNeeded: answer.error)))
            complete(owed, read: result, writeError: nil, valueStartsAtOffset: answer.startsAtOffset)
            armDeadline()
            incoming.respond(.with { $0.ack = .init() })
        case .answerWrite(let answer)?:
            guard let owed = try? router.answer(answer.id, isRead: false) else {
                incoming.fail(.notFound, "no write \(answer.id) is waiting for an answer (answered already, or timed out)", field: "id")
                return true
            }
            let error = answer.error == 0 ? nil : ATTError(rawValue: UInt8(truncatingIfNeeded: answer.error))
            complete(owed, read: .failure(.unlikelyError), writeError: error)
            armDeadline()
            incoming.respond(.with { $0.ack = .init() })
        case .gattDiscover?, .gattRead?, .gattWrite?, .gattSubscribe?, .gattReadMultiple?, .gattReadByType?, .gattReliableWrite?:
            return handleClientRequest(request.kind!, incoming)
        case .pair?, .pairingAnswer?, .listBonds?, .removeBond?, .getPrivateAddress?, .setLinkPairing?:
            return handleSecurityRequest(request.kind!, incoming)
        case nil:
            incoming.fail(.unknownMessage, "empty ATT request")
        }
        return true
    }

    private func publishService(_ spec: Beryl_Ipc_V1_ServiceSpec, for session: IPCSession, _ incoming: IncomingRequest) {
        guard let uuid = BluetoothUUID(spec.uuid) else {
            incoming.fail(.invalidArgument, "'\(spec.uuid)' is not a UUID", field: "service.uuid")
            return
        }
        var characteristics: [CharacteristicDefinition] = []
        for (index, characteristic) in spec.characteristics.enumerated() {
            guard let characteristicUUID = BluetoothUUID(characteristic.uuid) else {
                incoming.fail(.invalidArgument, "'\(characteristic.uuid)' is not a UUID", field: "service.characteristics[\(index)].uuid")
                return
            }
            guard !GATTType.declarations.contains(characteristicUUID) else {
                incoming.fail(.invalidArgument, "\(characteristicUUID) is a GATT declaration type, not a characteristic's", field: "service.characteristics[\(index)].uuid")
                return
            }
            guard characteristic.properties <= 0x3FF, characteristic.permissions <= 0x3F else {
                incoming.fail(.invalidArgument, "unknown property or permission bits", field: "service.characteristics[\(index)]")
                return
            }
            guard characteristic.value.count <= ATTServer.maxValueLength else {
                incoming.fail(.invalidArgument, "values are at most 512 bytes", field: "service.characteristics[\(index)].value")
                return
            }
            var descriptors: [DescriptorDefinition] = []
            for (position, descriptor) in characteristic.descriptors.enumerated() {
                guard let descriptorUUID = BluetoothUUID(descriptor.uuid), descriptorUUID != GATTType.clientConfiguration,
                      !GATTType.declarations.contains(descriptorUUID) else {
                    incoming.fail(.invalidArgument, "'\(descriptor.uuid)' is not a UUID, or is the CCCD attd adds itself, or a declaration type",
                                  field: "service.characteristics[\(index)].descriptors[\(position)].uuid")
                    return
                }
                guard descriptor.value.count <= ATTServer.maxValueLength else {
                    incoming.fail(.invalidArgument, "values are at most 512 bytes", field: "service.characteristics[\(index)].descriptors[\(position)].value")
                    return
                }
                descriptors.append(DescriptorDefinition(uuid: descriptorUUID, value: Array(descriptor.value)))
            }
            characteristics.append(CharacteristicDefinition(
                uuid: characteristicUUID, properties: CharacteristicProperties(rawValue: UInt16(truncatingIfNeeded: characteristic.properties)),
                permissions: AttributePermissions(rawValue: UInt8(characteristic.permissions)),
                value: characteristic.cached ? Array(characteristic.value) : nil, descriptors: descriptors))
        }
        let start: UInt16
        do {
            guard spec.includedStartHandles.allSatisfy({ $0 > 0 && $0 < 0xFFFF }) else {
                incoming.fail(.invalidArgument, "an included service's start handle is out of range", field: "service.included_start_handles")
                return
            }
            start = try database.add(ServiceDefinition(uuid: uuid, isPrimary: spec.primary, includes: spec.includedStartHandles.map { UInt16($0) },
                                                       characteristics: characteristics))
        } catch {
            incoming.fail(.invalidArgument, "the database refused the service: \(error)", field: "service")
            return
        }
        let end = database.attribute(at: start)?.groupEnd ?? start
        router.published(start...end, by: session.id)
        let valueHandles = database.attributes(in: start...end).filter { $0.type == GATTType.characteristic }.map { $0.handle + 1 }
        host.logger.info("service \(uuid) published at \(start)–\(end) by session \(session.id)")
        incoming.respond(.with {
            $0.att.servicePublished.startHandle = UInt32(start)
            $0.att.servicePublished.endHandle = UInt32(end)
            $0.att.servicePublished.valueHandles = valueHandles.map(UInt32.init)
        })
        announceDatabaseChange(start...end)
        adoptStoredSubscriptions(in: start...end)
    }
}
