import BerylWire
import Dispatch
import Foundation
import Synchronization

/// Core Bluetooth's CBPeripheralManagerDelegate. Called on the queue given to the manager (the main queue for nil;
/// see Confinement.swift). Every method has Core Bluetooth's exact signature; all but the state update are optional.
public protocol PeripheralManagerDelegate: AnyObject {
    func peripheralManagerDidUpdateState(_ peripheral: PeripheralManager)
    /// Before the first state update of a manager managerd kept while the app was not running; the dictionary has
    /// `PeripheralManagerRestoredStateServicesKey` and `…AdvertisementDataKey`.
    func peripheralManager(_ peripheral: PeripheralManager, willRestoreState dict: [String: Any])
    func peripheralManager(_ peripheral: PeripheralManager, didAdd service: Service, error: Error?)
    func peripheralManagerDidStartAdvertising(_ peripheral: PeripheralManager, error: Error?)
    func peripheralManager(_ peripheral: PeripheralManager, central: Central, didSubscribeTo characteristic: Characteristic)
    func peripheralManager(_ peripheral: PeripheralManager, central: Central, didUnsubscribeFrom characteristic: Characteristic)
    func peripheralManagerIsReady(toUpdateSubscribers peripheral: PeripheralManager)
    func peripheralManager(_ peripheral: PeripheralManager, didReceiveRead request: ATTRequest)
    func peripheralManager(_ peripheral: PeripheralManager, didReceiveWrite requests: [ATTRequest])
}

public extension PeripheralManagerDelegate {
    func peripheralManager(_ peripheral: PeripheralManager, willRestoreState dict: [String: Any]) {}
    func peripheralManager(_ peripheral: PeripheralManager, didAdd service: Service, error: Error?) {}
    func peripheralManagerDidStartAdvertising(_ peripheral: PeripheralManager, error: Error?) {}
    func peripheralManager(_ peripheral: PeripheralManager, central: Central, didSubscribeTo characteristic: Characteristic) {}
    func peripheralManager(_ peripheral: PeripheralManager, central: Central, didUnsubscribeFrom characteristic: Characteristic) {}
    func peripheralManagerIsReady(toUpdateSubscribers peripheral: PeripheralManager) {}
    func peripheralManager(_ peripheral: PeripheralManager, didReceiveRead request: ATTRequest) {}
    func peripheralManager(_ peripheral: PeripheralManager, didReceiveWrite requests: [ATTRequest]) {}
}

final class AnswerFlag: Sendable {
    let done = Mutex(false)
}

/// A read or write from a remote central, answered once with `respond(to:withResult:)`.
public final class ATTRequest: Sendable {
    public let central: Central
    /// The published `MutableCharacteristic` the request is for.
    public let characteristic: Characteristic
    public let offset: Int
    let id: UInt64
    private let stored: Mutex<Data?>
    private let answered: AnswerFlag

    init(central: Central, characteristic: Characteristic, offset: Int, value: Data?, id: UInt64, answered: AnswerFlag = AnswerFlag()) {
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

/// Typed advertisement data, beside Core Bluetooth's dictionary (whose only keys for advertising are the local name
/// and the service UUIDs, as on iOS).
public struct AdvertisingOptions: Sendable {
    public var localName: String?
    public var serviceUUIDs: [BluetoothUUID]
    public init(localName: String? = nil, serviceUUIDs: [BluetoothUUID] = []) {
        self.localName = localName
        self.serviceUUIDs = serviceUUIDs
    }

    public init(_ dictionary: [String: Any]) {
        self.init(localName: dictionary[AdvertisementDataLocalNameKey] as? String, serviceUUIDs: dictionary.uuids(AdvertisementDataServiceUUIDsKey))
    }

    public var dictionary: [String: Any] {
        var data: [String: Any] = [:]
        if let localName { data[AdvertisementDataLocalNameKey] = localName }
        if !serviceUUIDs.isEmpty { data[AdvertisementDataServiceUUIDsKey] = serviceUUIDs }
        return data
    }
}

/// Core Bluetooth's CBPeripheralManager: publishes services and advertises through managerd.
public final class PeripheralManager: Sendable, SessionBacked {
    let session: ManagerSession
    private struct State {
        var isAdvertising = false
        var services: [MutableService] = []
        var updates = UpdateQueue(limit: PeripheralManager.updateQueueLimit)
        /// Which way values leave: the two ways cannot reorder them.
        var updateWays = InFlightWays()
    }
    private let shared = Mutex(State())
    /// The values updateValue takes before it says false. They leave at once, without waiting for one another's answers,
    /// and keep their order (UpdateQueue).
    static let updateQueueLimit = 16

    /// Core Bluetooth's initialiser: never fails (see `CentralManager.init(delegate:queue:options:appID:socketPath:)`).
    /// `PeripheralManagerOptionRestoreIdentifierKey` opts into state preservation and restoration.
    public convenience init(delegate: PeripheralManagerDelegate?, queue: DispatchQueue?, options: [String: Any]? = nil,
                            appID: String? = nil, socketPath: String? = nil) {
        self.init(delegate: delegate, queue: queue, restoreIdentifier: options?[PeripheralManagerOptionRestoreIdentifierKey] as? String,
                  appID: appID, socketPath: socketPath)
    }

    /// The typed options, beside Core Bluetooth's dictionary.
    public convenience init(delegate: PeripheralManagerDelegate?, queue: DispatchQueue?, options: PeripheralManagerOptions,
                            appID: String? = nil, socketPath: String? = nil) {
        self.init(delegate: delegate, queue: queue, restoreIdentifier: options.restoreIdentifier, appID: appID, socketPath: socketPath)
    }

    public convenience init() {
        self.init(delegate: nil, queue: nil)
    }

    private init(delegate: PeripheralManagerDelegate?, queue: DispatchQueue?, restoreIdentifier: String?, appID: String?, socketPath: String?) {
        session = ManagerSession(label: "peripheral", delegate: delegate, queue: queue, appID: appID, socketPath: socketPath)
        session.start(restoreIdentifier: restoreIdentifier, role: .peripheral, events: { [weak self] in self?.handle($0) }) { [weak self] state, restored, again in
            guard let self else { return }
            if let again {
                // Adopted with its data channel: the manager kept everything, and managerd has it all again.
                guard !again.resumed else { return self.update(state) }
                // Core Bluetooth's rule after resetting: the database is cleared and advertising stopped; the app adds
                // its services again on poweredOn. What managerd kept for the manager goes, so nothing is there twice.
                self.removeAllServices()
                self.stopAdvertising()
                self.servicesGone()
                self.update(.resetting)
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
        let published = services.flatMap { $0.characteristics ?? [] }
        let byHandle = Dictionary(published.map { ($0.valueHandle, $0) }, uniquingKeysWith: { first, _ in first })
        for subscription in preserved.subscriptions {
            byHandle[subscription.valueHandle]?.subscription(central(subscription.central, Int(subscription.maximumUpdateLength)), on: true)
        }
        let dictionary = (RestoredPeripheralState(services: services, advertisementData: advertising).dictionary)
        notify { $0.peripheralManager(self, willRestoreState: dictionary) }
    }

    /// Ends the manager for good: what managerd preserved for its restore identifier is discarded, and its services
    /// and advertising go.
    public func invalidate() {
        channel.invalidate(manager: managerID)
    }

    /// Answers pairing prompts (passkeys, number comparison) for links this manager uses.
    public var pairingDelegate: PairingDelegate? {
        get { session.pairingSlot.object as? PairingDelegate }
        set { session.pairingSlot.set(newValue) }
    }

    public var delegate: PeripheralManagerDelegate? {
        get { session.delegateSlot.object as? PeripheralManagerDelegate }
        set { session.delegateSlot.set(newValue) }
    }
    public var state: ManagerState { session.reportedState }
    /// Beryl's: why the state is not poweredOn, when known.
    public var stateReason: String? { session.stateReason }
    public var isAdvertising: Bool { shared.withLock { $0.isAdvertising } }

    /// Receives API misuse that has no delegate callback (answering a request twice, updating a value of a
    /// characteristic not published); by default it is logged to standard error, as Core Bluetooth logs it.
    public var apiMisuseHandler: (@Sendable (BerylError) -> Void)? {
        get { misuse.current }
        set { misuse.current = newValue }
    }

    private func notify(_ body: sending @escaping (PeripheralManagerDelegate) -> Void) {
        session.notify(PeripheralManagerDelegate.self, body)
    }

    private func update(_ newState: ManagerState) {
        session.changeState(newState, PeripheralManagerDelegate.self) { $0.peripheralManagerDidUpdateState(self) }
    }

    // MARK: Services

    public func add(_ service: MutableService) {
        add(service) { [self] failure in
            let error = failure?.coreBluetoothError
            notify { $0.peripheralManager(self, didAdd: service, error: error) }
        }
    }

    public func add(_ service: MutableService) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            add(service) { error in
                if let error { continuation.resume(throwing: error.coreBluetoothError) } else { continuation.resume() }
            }
        }
    }

    private func add(_ service: MutableService, completion: @escaping @Sendable (BerylError?) -> Void) {
        // Core Bluetooth publishes what an app made: mutable characteristics with mutable descriptors.
        let given = service.characteristics ?? []
        guard service.origin == .app else {
            return delegateQueue.async { completion(.apiMisuse("a discovered service cannot be published; make a MutableService")) }
        }
        let characteristics = given.filter { $0.origin == .app }
        guard characteristics.count == given.count else {
            return delegateQueue.async { completion(.apiMisuse("a published service's characteristics must be MutableCharacteristic")) }
        }
        let included = service.includedServices ?? []
        guard included.allSatisfy({ $0.origin == .app }) else {
            return delegateQueue.async { completion(.apiMisuse("a published service includes only services the app made and added")) }
        }
        if let missing = included.first(where: { $0.startHandle == 0 }) {
            return delegateQueue.async { completion(.apiMisuse("the included service \(missing.uuid) has not been added yet")) }
        }
        var specs: [Beryl_Ipc_V1_CharacteristicSpec] = []
        for characteristic in characteristics {
            var descriptors: [Beryl_Ipc_V1_DescriptorSpec] = []
            for descriptor in characteristic.descriptors ?? [] {
                guard descriptor.origin == .app, let bytes = descriptor.typedValue.bytes else {
                    let uuid = descriptor.uuid
                    return delegateQueue.async { completion(.apiMisuse("descriptor \(uuid): a MutableDescriptor's value is a String, Data or NSNumber")) }
                }
                descriptors.append(.with { $0.uuid = descriptor.uuid.description; $0.value = bytes })
            }
            let value = characteristic.value
            specs.append(.with {
                $0.uuid = characteristic.uuid.description
                $0.properties = UInt32(characteristic.properties.rawValue)
                $0.permissions = UInt32(characteristic.permissions.rawValue)
                $0.cached = value != nil
                $0.value = value ?? Data()
                $0.descriptors = descriptors
            })
        }
        channel.request(.manager {
            $0.addService = .with {
                $0.manager = managerID
                $0.service = .with {
                    $0.uuid = service.uuid.description
                    $0.primary = service.isPrimary
                    $0.includedStartHandles = included.map(\.startHandle)
                    $0.characteristics = specs
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

    /// Core Bluetooth's: `AdvertisementDataLocalNameKey` and `AdvertisementDataServiceUUIDsKey` are advertised.
    public func startAdvertising(_ advertisementData: [String: Any]?) {
        startAdvertising(AdvertisingOptions(advertisementData ?? [:]))
    }

    /// The typed advertisement data, beside Core Bluetooth's dictionary.
    public func startAdvertising(_ options: AdvertisingOptions) {
        shared.withLock { $0.isAdvertising = true }
        channel.request(.manager {
            $0.startAdvertising = .with {
                $0.manager = managerID
                $0.localName = options.localName ?? ""
                $0.serviceUuids = options.serviceUUIDs.map(\.description)
            }
        }) { [self] result in
            if case .failure(let failure) = result {
                shared.withLock { $0.isAdvertising = false }
                let error = failure.coreBluetoothError
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
    public func respond(to request: ATTRequest, withResult result: ATTError.Code) {
        guard request.id != 0 else { return misuse.report(.apiMisuse("a write without response takes no answer")) }
        guard request.markAnswered() else { return misuse.report(.apiMisuse("request \(request.id) was answered already")) }
        if session.answerOnDataChannel(request.id, error: result.byte, value: result == .success ? request.value : nil) { return }
        channel.request(.manager {
            $0.respond = .with {
                $0.id = request.id
                $0.error = UInt32(result.byte)
                if result == .success, let value = request.value { $0.value = value }
            }
        }) { [misuse] outcome in
            if case .failure(let error) = outcome { misuse.report(error) }
        }
    }

    /// Sends a value to subscribed centrals: true when the value is taken, false when the transmit queue is full
    /// (peripheralManagerIsReady follows; send it again then). Decided here, without a round trip to managerd.
    @discardableResult
    public func updateValue(_ value: Data, for characteristic: MutableCharacteristic, onSubscribedCentrals centrals: [Central]?) -> Bool {
        guard characteristic.origin == .app else {
            misuse.report(.apiMisuse("updateValue needs a MutableCharacteristic this manager published, not a discovered one"))
            return false
        }
        // By identity: a value handle alone may name a service this manager had before and added again.
        guard shared.withLock({ $0.services }).contains(where: { ($0.characteristics ?? []).contains { $0 === characteristic } }) else {
            misuse.report(.apiMisuse("handle \(characteristic.valueHandle) is not a value of this manager's services"))
            return false
        }
        guard state == .poweredOn else {
            misuse.report(.notPoweredOn)
            return false
        }
        let update = PendingUpdate(valueHandle: characteristic.valueHandle, value: value, centrals: (centrals ?? []).map(\.identifier.uuidString),
                                        indicate: !characteristic.properties.contains(.notify) && characteristic.properties.contains(.indicate))
        guard shared.withLock({ $0.updates.offer(update) }) != nil else { return false }
        sendUpdates()
        return true
    }

    private func sendUpdates() {
        // Taken and sent under one lock: values the app's thread and the session's queue send must leave in the order
        // taken (a request's completion always runs later, on the session's queue, so this cannot re-enter).
        let data = session.liveDataChannel
        shared.withLock { state in
            guard let way = state.updateWays.next(live: data != nil) else { return }
            let sendings = state.updates.takeSendable()
            guard !sendings.isEmpty else { return }
            state.updateWays.sent(sendings.map(\.id), way)
            if let data, way == .dataChannel { data.wireRequests(sendings.map(dataRequest)) } else { channel.requests(sendings.map(request)) }
        }
    }

    /// One value's Notify to managerd, naming this manager, in a batch with the others that leave with it.
    private func request(_ sending: UpdateQueue.Sending) -> (request: Request, completion: Channel.Completion) {
        var notify = Self.notify(sending)
        notify.manager = managerID
        return (.manager { $0.updateValue = notify }, { [weak self] result in
            let answer = UpdateQueue.Answer(result, sent: \.manager.updateResult.sent, sendAgain: \.manager.updateResult.sendAgain)
            self?.updateAnswered(sending.id, answer, failure: result.failure)
        })
    }

    /// The same value as attd's Notify on the data channel: attd knows the app by its channel and the centrals by the
    /// identifiers managerd gave them.
    private func dataRequest(_ sending: UpdateQueue.Sending) -> (request: Request, completion: Channel.WireCompletion) {
        (.with { $0.att.notify = Self.notify(sending) }, { [weak self] result in
            guard let self else { return }
            let answer = DataChannelAnswer<PendingUpdate>(result)
            if answer.grantRefused { session.dataGrantRefused() }
            updateAnswered(sending.id, answer.queueAnswer, failure: answer.failure)
        })
    }

    /// A value as attd's Notify, ordered: the one message either way carries.
    private static func notify(_ sending: UpdateQueue.Sending) -> Beryl_Ipc_V1_Notify {
        .with {
            $0.valueHandle = sending.item.valueHandle
            $0.value = sending.item.value
            $0.centrals = sending.item.centrals
            $0.indicate = sending.item.indicate
            $0.ordered = true
            $0.readySeen = sending.readySeen
        }
    }

    private func updateAnswered(_ id: UInt64, _ answer: UpdateQueue.Answer, failure: BerylError?) {
        let known = shared.withLock { state in
            state.updateWays.answered(id)
            return state.updates.answered(id, answer)
        }
        guard known else { return }
        // Refused for good (the service was removed meanwhile): said as misuse, as Core Bluetooth logs it.
        if let failure {
            if case .unavailable = failure {} else { misuse.report(failure) }
        }
        sendUpdates()
        readyIfOwed()
    }

    private func readyIfOwed() {
        if shared.withLock({ $0.updates.takeOwedReady() }) { notify { $0.peripheralManagerIsReady(toUpdateSubscribers: self) } }
    }

    /// The stack dropped what this manager published (managerd clears a running manager's services and advertising
    /// when the controller leaves poweredOn, ManagerCore+State.swift; or managerd went): the library's list follows, so
    /// that a request or an update cannot find a service that is gone (the app adds its services again on poweredOn);
    /// values queued for them go too, and one on its way is no longer waited for.
    private func servicesGone() {
        shared.withLock { state in
            state.services.removeAll()
            state.isAdvertising = false
            state.updates.reset()
            state.updateWays.reset()
        }
    }

    private func characteristic(at handle: UInt32) -> MutableCharacteristic? {
        shared.withLock { $0.services }.lazy.flatMap { $0.characteristics ?? [] }.first { $0.valueHandle == handle }
    }

    private func handle(_ event: Event) {
        guard case .manager(let managed)? = event.kind else {
            // managerd is gone: unless the data channel keeps the app going, its services went with it, as after
            // bluetoothd resets.
            if event.kind == nil, !session.managerdLost() {
                servicesGone()
                update(.resetting)
            }
            return
        }
        if channel.deliverPairing(managed, to: session.pairingSlot, on: delegateQueue) { return }
        switch managed.kind {
        case .stateChanged(let newState)?:
            let reported = ManagerState(newState)
            // managerd drops a manager's services when the controller leaves poweredOn (ManagerCore+State.swift).
            if reported != .poweredOn { servicesGone() }
            update(reported)
            if reported == .poweredOn { readyIfOwed() }
        case .advertisingStarted(let started)?:
            let error: Error? = started.error.isEmpty ? nil : BluetoothError(.unknown, message: started.error)
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
            guard characteristic.subscription(who, on: on) else { return }
            notify { on ? $0.peripheralManager(self, central: who, didSubscribeTo: characteristic) : $0.peripheralManager(self, central: who, didUnsubscribeFrom: characteristic) }
        case .readyToUpdate(let ready)?:
            shared.withLock { $0.updates.readyToSend(count: ready.count) }
            sendUpdates()
            readyIfOwed()
        default:
            break
        }
    }

    /// A request for a handle this manager does not know (a service it no longer has) is answered Invalid Handle
    /// here: unanswered, the central would wait out managerd's deadline for an answer that cannot come.
    private func refuse(_ id: UInt64, handle: UInt32) {
        guard id != 0 else { return }
        misuse.report(.failed("request \(id) for handle \(handle), which no service of this manager has; answered Invalid Handle"))
        if session.answerOnDataChannel(id, error: ATTError.invalidHandle.byte, value: nil) { return }
        channel.request(.manager { $0.respond = .with { $0.id = id; $0.error = UInt32(ATTError.invalidHandle.byte) } }) { _ in }
    }

    private func central(_ identifier: String, _ maximum: Int) -> Central {
        Central(identifier: UUID(uuidString: identifier) ?? UUID(), maximumUpdateValueLength: maximum)
    }
}
