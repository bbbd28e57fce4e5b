import BerylCore
import BerylManager
import BerylWire
import Foundation

/// An app's request of one of its managers, with its fields checked and typed: managerd acts on it without parsing
/// anything more, and a malformed field is refused here, by name, before any state changes. What managerd only passes
/// on to attd (a GATT operation, a service, a value update) stays the app's message.
public enum ManagerCommand: Equatable, Sendable {
    case startScan(ManagerKey, ScanRequest)
    case stopScan(ManagerKey)
    case connect(ManagerKey, peripheral: String, PreservedState.ConnectOptions)
    case cancelConnection(ManagerKey, peripheral: String)
    case retrievePeripherals(PeripheralLookup)
    case retrieveConnected(offering: [BluetoothUUID])
    case gatt(Beryl_Ipc_V1_GattOperation)
    case readRSSI(peripheral: String)
    case maximumWriteLength(peripheral: String, withoutResponse: Bool)
    case addService(ManagerKey, Beryl_Ipc_V1_ServiceSpec)
    case removeService(ManagerKey, start: UInt32)
    case removeAllServices(ManagerKey)
    case startAdvertising(ManagerKey, Advertiser)
    case stopAdvertising(ManagerKey)
    /// `error` is as the app sent it: the router refuses one that is not an ATT error after it knows the request.
    case respond(id: UInt64, error: UInt32, value: [UInt8])
    case updateValue(ManagerKey, Beryl_Ipc_V1_UpdateValue)
    case answerPairing(peer: String, accept: Bool, passkey: UInt32)
    case setConnectionLatency(central: String, ConnectionLatency)
    case registerConnectionEvents(ManagerKey, ConnectionEventInterests.Interest)

    /// Which peripherals a retrieve names: addresses (as `beryl peripherals` may), identifiers (as apps do), or none,
    /// which lists every device the stack knows and hands no identifier to an app.
    public enum PeripheralLookup: Equatable, Sendable {
        case addresses([DeviceAddress])
        case identifiers([String])
        case everyKnown
    }

    /// nil: not a manager's command (Hello, the lab, `beryl app`, alerts, idleness), which managerd handles apart.
    public init?(_ kind: Beryl_Ipc_V1_ManagerRequest.OneOf_Kind, session: UInt64) throws(WireFailure) {
        let key = { (manager: UInt32) in ManagerKey(session: session, manager: manager) }
        switch kind {
        case .startScan(let start):
            self = .startScan(key(start.manager), ScanRequest(services: try BluetoothUUID.list(start.serviceUuids, field: "service_uuids"),
                                                              allowDuplicates: start.allowDuplicates,
                                                              solicited: try BluetoothUUID.list(start.solicitedServiceUuids, field: "solicited_service_uuids")))
        case .stopScan(let stop): self = .stopScan(key(stop.manager))
        case .connect(let connect): self = .connect(key(connect.manager), peripheral: connect.peripheral, .init(connect))
        case .cancelConnection(let cancel): self = .cancelConnection(key(cancel.manager), peripheral: cancel.peripheral)
        case .retrievePeripherals(let retrieve): self = .retrievePeripherals(try PeripheralLookup(retrieve))
        case .retrieveConnected(let retrieve):
            self = .retrieveConnected(offering: try BluetoothUUID.list(retrieve.serviceUuids, field: "service_uuids"))
        case .gatt(let operation):
            guard operation.kind != nil else {
                throw WireFailure(.invalidArgument, "no GATT operation named (discover, read, write, set_notify or reliable_write)", field: "kind")
            }
            self = .gatt(operation)
        case .readRssi(let read): self = .readRSSI(peripheral: read.peripheral)
        case .maximumWriteLength(let ask): self = .maximumWriteLength(peripheral: ask.peripheral, withoutResponse: ask.withoutResponse)
        case .addService(let add): self = .addService(key(add.manager), add.service)
        case .removeService(let remove): self = .removeService(key(remove.manager), start: remove.startHandle)
        case .removeAllServices(let remove): self = .removeAllServices(key(remove.manager))
        case .startAdvertising(let start):
            self = .startAdvertising(key(start.manager), Advertiser(localName: start.localName,
                                                                    serviceUUIDs: try BluetoothUUID.list(start.serviceUuids, field: "service_uuids")))
        case .stopAdvertising(let stop): self = .stopAdvertising(key(stop.manager))
        case .respond(let answer): self = .respond(id: answer.id, error: answer.error, value: Array(answer.value))
        case .updateValue(let update): self = .updateValue(key(update.manager), update)
        case .answerPairing(let answer): self = .answerPairing(peer: answer.peer, accept: answer.accept, passkey: answer.passkey)
        case .setConnectionLatency(let request):
            self = .setConnectionLatency(central: request.central, try ConnectionLatency(wire: request.latency))
        case .registerConnectionEvents(let request):
            let services = Set(try BluetoothUUID.list(request.serviceUuids, field: "service_uuids"))
            for text in request.peripheralUuids where UUID(uuidString: text) == nil {
                throw WireFailure(.invalidArgument, "'\(text)' is not a peripheral identifier", field: "peripheral_uuids")
            }
            self = .registerConnectionEvents(key(request.manager), .init(peripherals: Set(request.peripheralUuids.map { $0.uppercased() }),
                                                                         services: services))
        case .hello, .getCapabilities, .appIdle, .invalidate, .subscribeAlerts, .listApps, .launchApp, .stopApp, .setAppState, .labOpen,
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
            guard let address = DeviceAddress(text) else {
                throw WireFailure(.invalidArgument, "'\(text)' is not an address like AA:BB:CC:DD:EE:FF[/random]", field: "addresses")
            }
            return address
        }
        self = !addresses.isEmpty ? .addresses(addresses) : retrieve.identifiers.isEmpty ? .everyKnown : .identifiers(retrieve.identifiers)
    }
}
