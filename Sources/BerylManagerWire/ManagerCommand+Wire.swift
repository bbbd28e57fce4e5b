import BerylCore
import BerylManager
import BerylWire
import FoundationEssentials
import Glibc

/// An app's request of one of its managers, with its fields checked and typed: managerd acts on it without parsing
/// anything more, and a malformed field is refused here, by name, before any state changes. `.core` is what the core
/// answers itself; the rest need the peripheral store or attd, and what managerd only passes on to attd (a GATT
/// operation, a service, a value update) stays the app's message.
public enum ManagerCommand: Equatable, Sendable {
    case core(AppCommand)
    case retrievePeripherals(PeripheralLookup)
    case retrieveConnected(offering: [BluetoothUUID])
    case gatt(Beryl_Ipc_V1_GattOperation)
    case addService(ManagerKey, Beryl_Ipc_V1_ServiceSpec)
    case updateValue(ManagerKey, Beryl_Ipc_V1_Notify)
    case answerPairing(peer: String, accept: Bool, passkey: UInt32)

    /// Which peripherals a retrieve names: addresses (as `beryl peripherals` may), identifiers (as apps do), or none,
    /// which lists every device the stack knows and hands no identifier to an app.
    public enum PeripheralLookup: Equatable, Sendable {
        /// An address without its type is resolved against the devices heard (`AddressResolution`).
        case addresses([AddressQuery])
        case identifiers([String])
        case everyKnown
    }

    /// nil: not a manager's command (Hello, the lab, `beryl app`, alerts, idleness), which managerd handles apart.
    public init?(_ kind: Beryl_Ipc_V1_ManagerRequest.OneOf_Kind, session: UInt64) throws(WireFailure) {
        let key = { (manager: UInt32) in ManagerKey(session: session, manager: manager) }
        switch kind {
        case .startScan(let start):
            self = .core(.startScan(key(start.manager), ScanRequest(services: try BluetoothUUID.list(start.serviceUuids, field: "service_uuids"),
                                                              allowDuplicates: start.allowDuplicates,
                                                              solicited: try BluetoothUUID.list(start.solicitedServiceUuids, field: "solicited_service_uuids"))))
        case .stopScan(let stop): self = .core(.stopScan(key(stop.manager)))
        case .connect(let connect): self = .core(.connect(key(connect.manager), peripheral: connect.peripheral, .init(connect)))
        case .cancelConnection(let cancel): self = .core(.cancelConnection(key(cancel.manager), peripheral: cancel.peripheral))
        case .retrievePeripherals(let retrieve): self = .retrievePeripherals(try PeripheralLookup(retrieve))
        case .retrieveConnected(let retrieve):
            self = .retrieveConnected(offering: try BluetoothUUID.list(retrieve.serviceUuids, field: "service_uuids"))
        case .gatt(let operation):
            guard operation.kind != nil else {
                throw WireFailure(.invalidArgument, "no GATT operation named (discover, read, write, set_notify or reliable_write)", field: "kind")
            }
            self = .gatt(operation)
        case .readRssi(let read): self = .core(.readRSSI(peripheral: read.peripheral))
        case .maximumWriteLength(let ask): self = .core(.maximumWriteLength(peripheral: ask.peripheral, withoutResponse: ask.withoutResponse))
        case .addService(let add): self = .addService(key(add.manager), add.service)
        case .removeService(let remove): self = .core(.removeService(key(remove.manager), start: remove.startHandle))
        case .removeAllServices(let remove): self = .core(.removeAllServices(key(remove.manager)))
        case .startAdvertising(let start):
            self = .core(.startAdvertising(key(start.manager), Advertiser(localName: start.localName,
                                                                          serviceUUIDs: try BluetoothUUID.list(start.serviceUuids, field: "service_uuids"))))
        case .stopAdvertising(let stop): self = .core(.stopAdvertising(key(stop.manager)))
        case .respond(let answer): self = .core(.respond(id: answer.id, attError: answer.error, value: Array(answer.value)))
        case .updateValue(let update): self = .updateValue(key(update.manager), update)
        case .answerPairing(let answer): self = .answerPairing(peer: answer.peer, accept: answer.accept, passkey: answer.passkey)
        case .setConnectionLatency(let request):
            self = .core(.setConnectionLatency(central: request.central, try ConnectionLatency(wire: request.latency)))
        case .registerConnectionEvents(let request):
            let services = Set(try BluetoothUUID.list(request.serviceUuids, field: "service_uuids"))
            for text in request.peripheralUuids where UUID(uuidString: text) == nil {
                throw WireFailure(.invalidArgument, "'\(text)' is not a peripheral identifier", field: "peripheral_uuids")
            }
            self = .core(.registerConnectionEvents(key(request.manager), .init(peripherals: Set(request.peripheralUuids.map { $0.uppercased() }),
                                                                               services: services)))
        case .hello, .getCapabilities, .appIdle, .invalidate, .renewDataChannel, .subscribeAlerts, .listApps, .launchApp, .stopApp, .setAppState, .labOpen,
             .labAdvertise, .labStopAdvertising, .labScan, .labStopScan, .labConnect, .labCancelConnect, .labDisconnect, .labGetLinks,
             .labFactoryReset, .labGetInfo, .labSecure, .labPairingAnswer, .labListBonds, .labRemoveBond:
            return nil
        }
    }
}

extension ManagerCommand.PeripheralLookup {
    /// Addresses win over identifiers, as `beryl peripherals` names one or the other.
    public init(_ retrieve: Beryl_Ipc_V1_RetrievePeripherals) throws(WireFailure) {
        let addresses = try retrieve.addresses.map { text throws(WireFailure) in
            guard let address = AddressQuery(text) else {
                throw WireFailure(.invalidArgument, "'\(text)' is not an address like AA:BB:CC:DD:EE:FF[/random]", field: "addresses")
            }
            return address
        }
        self = !addresses.isEmpty ? .addresses(addresses) : retrieve.identifiers.isEmpty ? .everyKnown : .identifiers(retrieve.identifiers)
    }
}

extension WireFailure {
    /// As apps heard each refusal when managerd's shell made it.
    public init(_ refusal: CommandRefusal) {
        switch refusal {
        case .unknownPeripheral(let identifier): self = .unknownPeripheral(identifier)
        case .notConnected(let identifier): self = .notConnected(identifier)
        case .neitherHeldNorAwaited(let identifier):
            self.init(.notFound, "this manager neither holds nor awaits \(identifier)", field: "peripheral", detail: RemoteDetail(bluetoothError: .unknownDevice))
        case .noLinkWithCentral(let central):
            self.init(.notFound, "no link with central \(central) on which this stack is the peripheral", field: "central",
                      detail: RemoteDetail(bluetoothError: .notConnected))
        case .notPublished(let start):
            self.init(.notFound, "this manager published no service at handle \(start)", field: "start_handle", detail: RemoteDetail(managerReason: .notPublished))
        case .requestNotPending(let id):
            self.init(.notFound, "request \(id) is not waiting for this app's answer (answered already, or timed out)", field: "id",
                      detail: RemoteDetail(managerReason: .requestNotPending))
        case .notAnATTError(let code):
            self.init(.invalidArgument, "ATT error codes are one byte; \(code) is not one", field: "error", detail: RemoteDetail(bluetoothError: .invalidParameters))
        }
    }
}

extension Response {
    public init(_ reply: CommandReply) {
        self.init()
        switch reply {
        case .ack: ack = .init()
        case .maximumWriteLength(let length): manager.maximumWriteLength.length = length
        }
    }

    /// The app's answer from the controller's return parameters after the status.
    public init(answering ask: ControllerAsk, returned: ArraySlice<UInt8>) throws(WireFailure) {
        self.init()
        switch ask {
        case .readRSSI:
            // Return parameters: Connection_Handle, RSSI (Core Vol 4 Part E §7.5.4).
            guard returned.count >= 3 else { throw WireFailure(.internal, "Read RSSI returned \(returned.count) octets after its status") }
            manager.rssi.rssi = Int32(Int8(bitPattern: returned[returned.startIndex + 2]))
        case .connectionUpdate:
            ack = .init()
        }
    }
}
