import BerylIPC
import Dispatch
import Foundation
import Synchronization

/// Core Bluetooth's CBPeripheralManagerDelegate.
public protocol PeripheralManagerDelegate: AnyObject, Sendable {
    func peripheralManagerDidUpdateState(_ peripheral: PeripheralManager)
    func peripheralManager(_ peripheral: PeripheralManager, didAdd service: MutableService, error: BerylError?)
    func peripheralManagerDidStartAdvertising(_ peripheral: PeripheralManager, error: BerylError?)
    func peripheralManager(_ peripheral: PeripheralManager, didReceiveRead request: ATTRequest)
    func peripheralManager(_ peripheral: PeripheralManager, didReceiveWrite requests: [ATTRequest])
    func peripheralManager(_ peripheral: PeripheralManager, central: Central, didSubscribeTo characteristic: MutableCharacteristic)
    func peripheralManager(_ peripheral: PeripheralManager, central: Central, didUnsubscribeFrom characteristic: MutableCharacteristic)
    func peripheralManagerIsReady(toUpdateSubscribers peripheral: PeripheralManager)
    /// Before the first state update of a manager managerd kept while the app was not running.
    func peripheralManager(_ peripheral: PeripheralManager, willRestoreState state: RestoredPeripheralState)
}

public extension PeripheralManagerDelegate {
    func peripheralManager(_ peripheral: PeripheralManager, willRestoreState state: RestoredPeripheralState) {}
    func peripheralManager(_ peripheral: PeripheralManager, didAdd service: MutableService, error: BerylError?) {}
    func peripheralManagerDidStartAdvertising(_ peripheral: PeripheralManager, error: BerylError?) {}
    func peripheralManager(_ peripheral: PeripheralManager, didReceiveRead request: ATTRequest) {}
    func peripheralManager(_ peripheral: PeripheralManager, didReceiveWrite requests: [ATTRequest]) {}
    func peripheralManager(_ peripheral: PeripheralManager, central: Central, didSubscribeTo characteristic: MutableCharacteristic) {}
    func peripheralManager(_ peripheral: PeripheralManager, central: Central, didUnsubscribeFrom characteristic: MutableCharacteristic) {}
    func peripheralManagerIsReady(toUpdateSubscribers peripheral: PeripheralManager) {}
}

/// A remote central, by the identifier the stack keeps for it.
public struct Central: Sendable, Hashable {
    public let identifier: UUID
    /// The most one notification to it carries (ATT_MTU - 3).
    public let maximumUpdateValueLength: Int
}

/// Core Bluetooth's CBMutableDescriptor: a fixed descriptor value, such as a Characteristic User Description (0x2901)
/// or a Presentation Format (0x2904). The stack adds the Client Characteristic Configuration itself.
public struct MutableDescriptor: Sendable {
    public let uuid: BluetoothUUID
    public let value: Data
    public init(type uuid: BluetoothUUID, value: Data) {
        self.uuid = uuid
        self.value = value
    }
}

public final class MutableCharacteristic: Sendable {
    public let uuid: BluetoothUUID
    public let properties: CharacteristicProperties
    public let permissions: AttributePermissions
    /// A value given at creation is cached (served by the stack, read-only); nil makes it dynamic (reads and writes come to the app).
    public let value: Data?
    private let state = Mutex<(handle: UInt32, subscribed: [Central], descriptors: [MutableDescriptor])>((0, [], []))

    public init(type uuid: BluetoothUUID, properties: CharacteristicProperties, value: Data?, permissions: AttributePermissions) {
        self.uuid = uuid
        self.properties = properties
        self.value = value
        self.permissions = permissions
    }

    public var descriptors: [MutableDescriptor]? {
        get { state.withLock { $0.descriptors } }
        set { state.withLock { $0.descriptors = newValue ?? [] } }
    }

    public var subscribedCentrals: [Central]? { state.withLock { $0.subscribed } }
    var valueHandle: UInt32 { state.withLock { $0.handle } }
    func setHandle(_ handle: UInt32) { state.withLock { $0.handle = handle } }
    func subscription(_ central: Central, on: Bool) {
        state.withLock { state in
            state.subscribed.removeAll { $0.identifier == central.identifier }
            if on { state.subscribed.append(central) }
        }
    }
}

public final class MutableService: Sendable {
    public let uuid: BluetoothUUID
    public let isPrimary: Bool
    private let state = Mutex<(characteristics: [MutableCharacteristic], start: UInt32)>(([], 0))

    public init(type uuid: BluetoothUUID, primary: Bool) {
        self.uuid = uuid
        isPrimary = primary
    }

    public var characteristics: [MutableCharacteristic]? {
        get { state.withLock { $0.characteristics } }
        set { state.withLock { $0.characteristics = newValue ?? [] } }
    }

    /// Services this one includes; each must have been added already (Core Bluetooth's rule).
    public var includedServices: [MutableService]? {
        get { included.withLock { $0 } }
        set { included.withLock { $0 = newValue ?? [] } }
    }
    private let included = Mutex<[MutableService]>([])
    var startHandle: UInt32 { state.withLock { $0.start } }
    func setStart(_ start: UInt32) { state.withLock { $0.start = start } }
}

final class AnswerFlag: Sendable {
    let done = Mutex(false)
}

/// A read or write from a remote central, answered once with `respond(to:withResult:)`.
public final class ATTRequest: Sendable {
    public let central: Central
    public let characteristic: MutableCharacteristic
    public let offset: Int
    let id: UInt64
    private let stored: Mutex<Data?>
    private let answered: AnswerFlag

    init(central: Central, characteristic: MutableCharacteristic, offset: Int, value: Data?, id: UInt64, answered: AnswerFlag = AnswerFlag()) {
        self.central = central
        self.characteristic = characteristic
        self.offset = offset
        self.id = id
        stored = Mutex(value)
        self.answered = answered
    }

    /// False for a write without response (a command): it takes no answer.
    public var expectsResponse: Bool { id != 0 }

    /// True the first time: a request (or a batch of writes, which share one answer) is answered once.
    func markAnswered() -> Bool {
        answered.done.withLock { done in
            defer { done = true }
            return !done
        }
    }

    /// For a write: what the central wrote. For a read: what the app sets before responding.
    public var value: Data? {
        get { stored.withLock { $0 } }
        set { stored.withLock { $0 = newValue } }
    }
}

public struct AdvertisingOptions: Sendable {
    public var localName: String?
    public var serviceUUIDs: [BluetoothUUID]
    public init(localName: String? = nil, serviceUUIDs: [BluetoothUUID] = []) {
        self.localName = localName
        self.serviceUUIDs = serviceUUIDs
    }
}

/// Core Bluetooth's CBPeripheralManager: publishes services and advertises through managerd.
public final class PeripheralManager: Sendable, SessionBacked {
    let session: ManagerSession
    private struct State {
        var isAdvertising = false
        var services: [MutableService] = []
    }
    private let shared = Mutex(State())

    public init(delegate: PeripheralManagerDelegate?, queue: DispatchQueue? = nil, options: PeripheralManagerOptions = PeripheralManagerOptions(),
                appID: String? = nil, socketPath: String? = nil) throws(BerylError) {
        session = try ManagerSession(label: "peripheral", delegate: delegate, queue: queue, appID: appID, socketPath: socketPath)
        session.start(restoreIdentifier: options.restoreIdentifier, role: .peripheral, events: { [weak self] in self?.handle($0) }) { [weak self] state, restored, again in
            guard let self else { return }
            if again {
                // Core Bluetooth's rule after resetting: the database is cleared and advertising stopped; the app adds
                // its services again on poweredOn. What managerd kept for the manager goes, so nothing is there twice.
                self.removeAllServices()
                self.stopAdvertising()
            } else if let restored {
                self.restore(restored.peripheral)
            }
            self.update(state)
        }
    }

    /// A restored manager takes back its services (with their handles), its advertising and its subscribed centrals.
    private func restore(_ preserved: Beryl_Ipc_V1_PreservedPeripheralRole) {
        let services = preserved.services.map(MutableService.restored)
        let advertising = preserved.advertising
            ? AdvertisingOptions(localName: preserved.localName.isEmpty ? nil : preserved.localName,
                                 serviceUUIDs: preserved.advertisedServiceUuids.compactMap(BluetoothUUID.init)) : nil
        shared.withLock { state in
            state.services = services
            state.isAdvertising = advertising != nil
        }
        let byHandle = Dictionary(services.flatMap { $0.characteristics ?? [] }.map { ($0.valueHandle, $0) }, uniquingKeysWith: { first, _ in first })
        for subscription in preserved.subscriptions {
            byHandle[subscription.valueHandle]?.subscription(central(subscription.central, Int(subscription.maximumUpdateLength)), on: true)
        }
        notify { $0.peripheralManager(self, willRestoreState: RestoredPeripheralState(services: services, advertisementData: advertising)) }
    }

    /// Ends the manager for good: what managerd preserved for its restore identifier is discarded, and its services
    /// and advertising go.
    public func invalidate() {
        channel.invalidate(manager: managerID)
    }

    /// Answers pairing prompts (passkeys, number comparison) for links this manager uses.
    public var pairingDelegate: PairingDelegate? {
        get { session.pairingDelegate }
        set { session.pairingDelegate = newValue }
    }

    public var delegate: PeripheralManagerDelegate? {
        get { session.delegate as? PeripheralManagerDelegate }
        set { session.delegate = newValue }
    }
    public var state: ManagerState { session.reportedState }
    public var isAdvertising: Bool { shared.withLock { $0.isAdvertising } }

    /// Receives API misuse that has no delegate callback (answering a request twice, updating a value of a
    /// characteristic not published); by default it is logged to standard error, as Core Bluetooth logs it.
    public var apiMisuseHandler: (@Sendable (BerylError) -> Void)? {
        get { misuse.current }
        set { misuse.current = newValue }
    }

    private func notify(_ body: @escaping @Sendable (PeripheralManagerDelegate) -> Void) {
        guard let delegate else { return }
        delegateQueue.async { body(delegate) }
    }

    private func update(_ newState: ManagerState) {
        session.changeState(newState) { ($0 as? PeripheralManagerDelegate)?.peripheralManagerDidUpdateState(self) }
    }

    // MARK: Services

    public func add(_ service: MutableService) {
        add(service) { [self] error in notify { $0.peripheralManager(self, didAdd: service, error: error) } }
    }

    public func add(_ service: MutableService) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            add(service) { error in
                if let error { continuation.resume(throwing: error) } else { continuation.resume() }
            }
        }
    }

    private func add(_ service: MutableService, completion: @escaping @Sendable (BerylError?) -> Void) {
        let characteristics = service.characteristics ?? []
        let included = service.includedServices ?? []
        if let missing = included.first(where: { $0.startHandle == 0 }) {
            return delegateQueue.async { completion(.apiMisuse("the included service \(missing.uuid) has not been added yet")) }
        }
        channel.request(.manager {
            $0.addService = .with {
                $0.manager = managerID
                $0.service = .with {
                    $0.uuid = service.uuid.description
                    $0.primary = service.isPrimary
                    $0.includedStartHandles = included.map(\.startHandle)
                    $0.characteristics = characteristics.map { characteristic in
                        .with {
                            $0.uuid = characteristic.uuid.description
                            $0.properties = UInt32(characteristic.properties.rawValue)
                            $0.permissions = UInt32(characteristic.permissions.rawValue)
                            $0.cached = characteristic.value != nil
                            $0.value = characteristic.value ?? Data()
                            $0.descriptors = (characteristic.descriptors ?? []).map { descriptor in .with { $0.uuid = descriptor.uuid.description; $0.value = descriptor.value } }
                        }
                    }
                }
            }
        }) { [self] result in
            switch result {
            case .success(let response):
                let published = response.manager.serviceAdded
                service.setStart(published.startHandle)
                for (characteristic, handle) in zip(characteristics, published.valueHandles) { characteristic.setHandle(handle) }
                shared.withLock { $0.services.append(service) }
                completion(nil)
            case .failure(let error):
                completion(error)
            }
        }
    }

    public func remove(_ service: MutableService) {
        shared.withLock { $0.services.removeAll { $0 === service } }
        channel.request(.manager { $0.removeService = .with { $0.manager = managerID; $0.startHandle = service.startHandle } }) { [misuse] result in
            if case .failure(let error) = result { misuse.report(error) }
        }
    }

    public func removeAllServices() {
        shared.withLock { $0.services.removeAll() }
        channel.request(.manager { $0.removeAllServices.manager = managerID })
    }

    // MARK: Advertising

    public func startAdvertising(_ options: AdvertisingOptions) {
        shared.withLock { $0.isAdvertising = true }
        channel.request(.manager {
            $0.startAdvertising = .with {
                $0.manager = managerID
                $0.localName = options.localName ?? ""
                $0.serviceUuids = options.serviceUUIDs.map(\.description)
            }
        }) { [self] result in
            if case .failure(let error) = result {
                shared.withLock { $0.isAdvertising = false }
                notify { $0.peripheralManagerDidStartAdvertising(self, error: error) }
            }
        }
    }

    public func stopAdvertising() {
        shared.withLock { $0.isAdvertising = false }
        channel.request(.manager { $0.stopAdvertising.manager = managerID })
    }

    // MARK: Requests and updates

    /// Answers a read or (the first of) a batch of writes; once per request. A second answer, or an answer to a
    /// write without response, is API misuse: reported to `apiMisuseHandler`, nothing sent.
    public func respond(to request: ATTRequest, withResult result: ATTError) {
        guard request.id != 0 else { return misuse.report(.apiMisuse("a write without response takes no answer")) }
        guard request.markAnswered() else { return misuse.report(.apiMisuse("request \(request.id) was answered already")) }
        channel.request(.manager {
            $0.respond = .with {
                $0.id = request.id
                $0.error = UInt32(result.rawValue)
                if result == .success, let value = request.value { $0.value = value }
            }
        }) { [misuse] outcome in
            if case .failure(let error) = outcome { misuse.report(error) }
        }
    }

    /// Sends a value to subscribed centrals; false when the transmit queue is full (peripheralManagerIsReady follows).
    /// Blocks until managerd answers, as Core Bluetooth's does; do not call it on the delegate queue if that is managerd's.
    @discardableResult
    public func updateValue(_ value: Data, for characteristic: MutableCharacteristic, onSubscribedCentrals centrals: [Central]?) -> Bool {
        let result = channel.call(.manager {
            $0.updateValue = .with {
                $0.manager = managerID
                $0.valueHandle = characteristic.valueHandle
                $0.value = value
                $0.centrals = (centrals ?? []).map(\.identifier.uuidString)
                $0.indicate = !characteristic.properties.contains(.notify) && characteristic.properties.contains(.indicate)
            }
        })
        switch result {
        case .success(let response): return response.manager.updateResult.sent
        case .failure(.unavailable): return false
        case .failure(let error):
            misuse.report(error)
            return false
        }
    }

    private func characteristic(at handle: UInt32) -> MutableCharacteristic? {
        shared.withLock { $0.services }.lazy.flatMap { $0.characteristics ?? [] }.first { $0.valueHandle == handle }
    }

    private func handle(_ event: Event) {
        guard case .manager(let managed)? = event.kind else {
            if event.kind == nil {
                // managerd is gone: without a restore identifier its services went with it, as after bluetoothd resets.
                update(.resetting)
                session.reconnect()
            }
            return
        }
        if channel.deliverPairing(managed, to: pairingDelegate, on: delegateQueue) { return }
        switch managed.kind {
        case .stateChanged(let newState)?:
            update(ManagerState(newState))
        case .advertisingStarted(let started)?:
            let error: BerylError? = started.error.isEmpty ? nil : .failed(started.error)
            if error != nil { shared.withLock { $0.isAdvertising = false } }
            notify { $0.peripheralManagerDidStartAdvertising(self, error: error) }
        case .readRequest(let read)?:
            guard let characteristic = characteristic(at: read.handle) else { return refuse(read.id, handle: read.handle) }
            let request = ATTRequest(central: central(read.central, Int(read.maximumUpdateLength)), characteristic: characteristic, offset: Int(read.offset),
                                     value: nil, id: read.id)
            notify { $0.peripheralManager(self, didReceiveRead: request) }
        case .writeRequest(let write)?:
            let batch = AnswerFlag()  // one answer for the whole batch
            let requests = write.writes.compactMap { part -> ATTRequest? in
                guard let characteristic = characteristic(at: part.handle) else { return nil }
                return ATTRequest(central: central(write.central, Int(write.maximumUpdateLength)), characteristic: characteristic, offset: Int(part.offset),
                                  value: part.value, id: write.id, answered: batch)
            }
            guard !requests.isEmpty else { return refuse(write.id, handle: write.writes.first?.handle ?? 0) }
            notify { $0.peripheralManager(self, didReceiveWrite: requests) }
        case .subscription(let change)?:
            guard let characteristic = characteristic(at: change.valueHandle) else { return }
            let who = central(change.central, Int(change.maximumUpdateLength))
            let on = change.notify || change.indicate
            characteristic.subscription(who, on: on)
            notify { on ? $0.peripheralManager(self, central: who, didSubscribeTo: characteristic) : $0.peripheralManager(self, central: who, didUnsubscribeFrom: characteristic) }
        case .readyToUpdate?:
            notify { $0.peripheralManagerIsReady(toUpdateSubscribers: self) }
        default:
            break
        }
    }

    /// A request for a handle this manager does not know (a service it no longer has) is answered Invalid Handle
    /// here: unanswered, the central would wait out managerd's deadline for an answer that cannot come.
    private func refuse(_ id: UInt64, handle: UInt32) {
        guard id != 0 else { return }
        misuse.report(.failed("request \(id) for handle \(handle), which no service of this manager has; answered Invalid Handle"))
        channel.request(.manager { $0.respond = .with { $0.id = id; $0.error = UInt32(ATTError.invalidHandle.rawValue) } }) { _ in }
    }

    private func central(_ identifier: String, _ maximum: Int) -> Central {
        Central(identifier: UUID(uuidString: identifier) ?? UUID(), maximumUpdateValueLength: maximum)
    }
}
