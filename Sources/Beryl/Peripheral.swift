import BerylWire
import Dispatch
import Foundation
import Synchronization

/// Core Bluetooth's CBPeripheralDelegate. Called on the manager's queue (see Confinement.swift); every method but
/// none is optional, and each has Core Bluetooth's exact signature, so a method written from the guide is the one
/// called.
public protocol PeripheralDelegate: AnyObject {
    func peripheralDidUpdateName(_ peripheral: Peripheral)
    func peripheral(_ peripheral: Peripheral, didModifyServices invalidatedServices: [Service])
    func peripheral(_ peripheral: Peripheral, didReadRSSI RSSI: NSNumber, error: Error?)
    func peripheral(_ peripheral: Peripheral, didDiscoverServices error: Error?)
    func peripheral(_ peripheral: Peripheral, didDiscoverIncludedServicesFor service: Service, error: Error?)
    func peripheral(_ peripheral: Peripheral, didDiscoverCharacteristicsFor service: Service, error: Error?)
    func peripheral(_ peripheral: Peripheral, didUpdateValueFor characteristic: Characteristic, error: Error?)
    func peripheral(_ peripheral: Peripheral, didWriteValueFor characteristic: Characteristic, error: Error?)
    func peripheral(_ peripheral: Peripheral, didUpdateNotificationStateFor characteristic: Characteristic, error: Error?)
    func peripheral(_ peripheral: Peripheral, didDiscoverDescriptorsFor characteristic: Characteristic, error: Error?)
    func peripheral(_ peripheral: Peripheral, didUpdateValueFor descriptor: Descriptor, error: Error?)
    func peripheral(_ peripheral: Peripheral, didWriteValueFor descriptor: Descriptor, error: Error?)
    func peripheralIsReady(toSendWriteWithoutResponse peripheral: Peripheral)
}

public extension PeripheralDelegate {
    func peripheralDidUpdateName(_ peripheral: Peripheral) {}
    func peripheral(_ peripheral: Peripheral, didModifyServices invalidatedServices: [Service]) {}
    func peripheral(_ peripheral: Peripheral, didReadRSSI RSSI: NSNumber, error: Error?) {}
    func peripheral(_ peripheral: Peripheral, didDiscoverServices error: Error?) {}
    func peripheral(_ peripheral: Peripheral, didDiscoverIncludedServicesFor service: Service, error: Error?) {}
    func peripheral(_ peripheral: Peripheral, didDiscoverCharacteristicsFor service: Service, error: Error?) {}
    func peripheral(_ peripheral: Peripheral, didUpdateValueFor characteristic: Characteristic, error: Error?) {}
    func peripheral(_ peripheral: Peripheral, didWriteValueFor characteristic: Characteristic, error: Error?) {}
    func peripheral(_ peripheral: Peripheral, didUpdateNotificationStateFor characteristic: Characteristic, error: Error?) {}
    func peripheral(_ peripheral: Peripheral, didDiscoverDescriptorsFor characteristic: Characteristic, error: Error?) {}
    func peripheral(_ peripheral: Peripheral, didUpdateValueFor descriptor: Descriptor, error: Error?) {}
    func peripheral(_ peripheral: Peripheral, didWriteValueFor descriptor: Descriptor, error: Error?) {}
    func peripheralIsReady(toSendWriteWithoutResponse peripheral: Peripheral) {}
}

/// Core Bluetooth's CBPeripheralState, with Apple's raw values.
public enum PeripheralState: Int, Sendable {
    case disconnected = 0, connecting = 1, connected = 2, disconnecting = 3
}

/// Core Bluetooth's CBPeripheral: a remote peripheral, named by the identifier the stack keeps for it. It holds its
/// manager weakly: one that outlives its manager answers every request as misuse instead of crashing.
public final class Peripheral: CustomStringConvertible, Sendable {
    public let identifier: UUID
    let identifierString: String
    private let manager: WeakBox<CentralManager>
    private let queue: DelegateQueue
    private struct State {
        var name: String?
        var state: PeripheralState = .disconnected
        var services: [Service]?
        var writes = WriteQueue(limit: Peripheral.writeQueueLimit, fullOwesReady: true)
        var writeCompletions: [UInt64: @Sendable (Result<Void, BerylError>) -> Void] = [:]
        /// Which way writes without response leave.
        var writeWays = InFlightWays()
        /// Which way each GATT request goes (the data channel or managerd), never both at once.
        var paths = GattPaths<GattRequest>()
        var subscribing = SubscriptionGate<Data>()
    }

    /// One GATT operation of the app's and who hears its answer.
    struct GattRequest: Sendable {
        let operation: Beryl_Ipc_V1_GattOperation
        let completion: @Sendable (Result<Beryl_Ipc_V1_GattResult, BerylError>) -> Void

        /// The data channel carries reads and writes with response (a signed write is one without response).
        var dataCapable: Bool {
            switch operation.kind {
            case .read?: true
            case .write(let write)?: !write.withoutResponse
            default: false
            }
        }

        /// attd's request for it on the data channel, naming the peripheral by its identifier.
        var onDataChannel: Request {
            .with {
                switch operation.kind {
                case .read(var read)?:
                    read.peripheral = operation.peripheral
                    $0.att.gattRead = read
                case .write(var write)?:
                    write.peripheral = operation.peripheral
                    $0.att.gattWrite = write
                default:
                    break
                }
            }
        }
    }
    /// The writes without response taken before canSendWriteWithoutResponse says false. They leave at once, without
    /// waiting for one another's answers, and keep their order (OrderedSendQueue).
    static let writeQueueLimit = 16
    private let shared: Mutex<State>
    private let delegateSlot = DelegateSlot(nil)

    init(identifier: String, name: String?, central: CentralManager) {
        identifierString = identifier
        self.identifier = UUID(uuidString: identifier) ?? UUID()
        manager = WeakBox(value: central)
        queue = central.session.delegateQueue
        shared = Mutex(State(name: name))
    }

    public var name: String? { shared.withLock { $0.name } }
    public var state: PeripheralState { shared.withLock { $0.state } }
    public var services: [Service]? { shared.withLock { $0.services } }
    /// Decided here, without a round trip: false while this peripheral's queue of writes without response is full.
    public var canSendWriteWithoutResponse: Bool { shared.withLock { $0.writes.hasRoom } }
    public var delegate: PeripheralDelegate? {
        get { delegateSlot.object as? PeripheralDelegate }
        set { delegateSlot.set(newValue) }
    }

    public var description: String { "<Peripheral \(identifier) \(name.map { "'\($0)' " } ?? "")\(state)>" }

    /// A new name heard (a scan response, a GAP read): the delegate hears of a change.
    func setName(_ name: String) {
        let changed = shared.withLock { state in
            defer { state.name = name }
            return state.name != nil && state.name != name
        }
        if changed { notify { $0.peripheralDidUpdateName(self) } }
    }

    func setState(_ state: PeripheralState) { shared.withLock { $0.state = state } }
    func disconnected() {
        shared.withLock {
            $0.state = .disconnected
            $0.subscribing.reset()
        }
        writesGone()
        for service in services ?? [] { for characteristic in service.characteristics ?? [] { characteristic.setNotifying(false) } }
    }

    /// To the manager's misuse handler (or its log); nothing when the manager is gone.
    func reportMisuse(_ message: String) { manager.value?.session.misuse.report(.apiMisuse(message)) }

    private func notify(_ body: sending @escaping (PeripheralDelegate) -> Void) {
        delegateSlot.call(PeripheralDelegate.self, on: queue, body)
    }

    /// didUpdateValueFor with `value` in `characteristic.value` for that call: set on the delegate queue just before it
    /// (with or without a delegate), as Core Bluetooth's, so that values arriving faster than the delegate takes them
    /// are each seen in their own call rather than the latest in all of them.
    private func deliver(_ value: Data, of characteristic: Characteristic, error: Error?) {
        delegateSlot.call(PeripheralDelegate.self, on: queue, first: { characteristic.setValue(value) }) {
            $0.peripheral(self, didUpdateValueFor: characteristic, error: error)
        }
    }

    /// An answer that needs no request: after what is queued on the delegate queue, as an answer would come.
    private func later(_ body: @escaping @Sendable () -> Void) { queue.async(body) }

    private func managerGone() -> BerylError {
        let error = BerylError.apiMisuse("peripheral \(identifier) is used after its central manager was released")
        try? FileHandle.standardError.write(contentsOf: Data("Beryl: \(error)\n".utf8))
        return error
    }

    /// One GATT operation through managerd, answered on the session's queue.
    private func gatt(_ build: (inout Beryl_Ipc_V1_GattOperation) -> Void, completion: @escaping @Sendable (Result<Beryl_Ipc_V1_GattResult, BerylError>) -> Void) {
        guard let central = manager.value else {
            let error = managerGone()
            return later { completion(.failure(error)) }
        }
        var operation = Beryl_Ipc_V1_GattOperation()
        operation.peripheral = identifierString
        build(&operation)
        let request = GattRequest(operation: operation, completion: completion)
        let live = central.session.liveDataChannel != nil
        // Chosen and sent under one lock, as the writes are: requests leave in the order the paths let them.
        shared.withLock { state in
            guard let way = state.paths.send(request, dataCapable: request.dataCapable, live: live) else { return }
            send([(request, way)], central: central)
        }
    }

    /// Sends requests the way GattPaths chose (call under `shared`'s lock; answers come later, on the session's queue).
    private func send(_ going: [(request: GattRequest, way: GattPaths<GattRequest>.Way)], central: CentralManager) {
        for (request, way) in going {
            switch way {
            case .managerd:
                central.channel.request(.manager { $0.gatt = request.operation }) { [weak self] result in
                    self?.gattAnswered(request, on: .managerd, result.map { $0.manager.gatt }, refused: false)
                }
            case .dataChannel:
                guard let data = central.session.currentDataChannel else {
                    // The channel went (attd restarted): the request goes again through managerd, in its turn.
                    central.channel.queue.async { [weak self] in self?.gattAnswered(request, on: .dataChannel, nil, refused: true) }
                    continue
                }
                data.wireRequests([(request.onDataChannel, { @Sendable [weak self] result in
                    // Refused by the grant (or the channel went): it goes again through managerd. Outside the grant is
                    // this request's alone (a link managerd had not granted yet when the app heard of it); revoked is
                    // the app's, until attd says the grant is live again.
                    let refused: Bool = switch result {
                    case .failure(.remote(_, _, _, let detail)): detail.grantReason == .revoked || detail.grantReason == .outsideGrant
                    case .failure(.closed): true
                    default: false
                    }
                    if case .failure(.remote(_, _, _, let detail)) = result, detail.grantReason == .revoked { central.session.dataGrantRefused() }
                    let answer = result.map { response in Beryl_Ipc_V1_GattResult.with { $0.value = response.att.gattValue.value } }
                    self?.gattAnswered(request, on: .dataChannel, answer.mapError(BerylError.init), refused: refused)
                })])
            }
        }
    }

    private func gattAnswered(_ request: GattRequest, on way: GattPaths<GattRequest>.Way, _ result: Result<Beryl_Ipc_V1_GattResult, BerylError>?,
                              refused: Bool) {
        if !refused, let result { request.completion(result) }
        guard let central = manager.value else { return }
        let live = central.session.liveDataChannel != nil
        shared.withLock { state in
            send(state.paths.answered(on: way, refused: refused ? request : nil, live: live), central: central)
        }
    }

    // MARK: Discovery

    /// Primary service discovery (by UUID when given), as Core Bluetooth runs it: what is found is added to
    /// `services` (a service found before keeps its object), and the delegate hears once.
    public func discoverServices(_ serviceUUIDs: [BluetoothUUID]?) {
        gatt({ $0.discover = .with { $0.depth = .services; $0.serviceUuids = (serviceUUIDs ?? []).map(\.description) } }) { [self] result in
            var error: Error?
            switch result {
            case .failure(let failure): error = failure.coreBluetoothError
            case .success(let response): mergeServices(response.database, lookingFor: serviceUUIDs)
            }
            notify { $0.peripheral(self, didDiscoverServices: error) }
        }
    }

    private func mergeServices(_ database: Beryl_Ipc_V1_GattDatabase, lookingFor uuids: [BluetoothUUID]?) {
        let found = database.services.map { info in
            Service(uuid: BluetoothUUID(info.uuid) ?? BluetoothUUID(0), isPrimary: true,
                    range: info.startHandle...max(info.startHandle, info.endHandle), peripheral: self)
        }
        shared.withLock { state in state.services = Self.merged(state.services ?? [], found: found, lookingFor: uuids) }
    }

    /// What a primary service discovery leaves known: a service found before keeps its object; one the discovery
    /// looked for and did not find is gone. Discovery runs over the whole database (Core Vol 3 Part G §4.4.1,
    /// §4.4.2), so for the UUIDs it looked for (all, with none given) it is the truth, even when a Service Changed that
    /// removed a service was lost or crossed the discovery (a stale copy kept beside the new one took the app's
    /// subscription to handles that no longer exist). Secondary services, which primary discovery does not find, stay.
    static func merged(_ known: [Service], found: [Service], lookingFor uuids: [BluetoothUUID]?) -> [Service] {
        let sought = uuids.flatMap { $0.isEmpty ? nil : Set($0) }  // nil: every service
        let starts = Set(found.map(\.range.lowerBound))
        let gone = { (service: Service) in
            service.isPrimary && (sought.map { $0.contains(service.uuid) } ?? true) && !starts.contains(service.range.lowerBound)
        }
        var services = known.filter { !gone($0) }
        for service in found where !services.contains(where: { $0.range.lowerBound == service.range.lowerBound }) { services.append(service) }
        return services.sorted { $0.range.lowerBound < $1.range.lowerBound }
    }

    /// The async face of discoverServices (named apart so that delegate-style code in async contexts keeps its
    /// meaning): the services with their characteristics, descriptors and included services.
    public func services(discovering uuids: [BluetoothUUID]?) async throws -> [Service] {
        try await withCheckedThrowingContinuation { continuation in
            discoverAll(uuids) { continuation.resume(with: $0.mapError { $0.coreBluetoothError }) }
        }
    }

    /// Service objects for a discovered database (also how a restored peripheral gets back what the app had found).
    @discardableResult
    func adopt(_ database: Beryl_Ipc_V1_GattDatabase) -> [Service] {
        let services = database.services.map { info -> Service in
            let service = Service(uuid: BluetoothUUID(info.uuid) ?? BluetoothUUID(0), isPrimary: true,
                                  range: info.startHandle...max(info.startHandle, info.endHandle), peripheral: self)
            let characteristics = info.characteristics.map { item -> Characteristic in
                let characteristic = Characteristic(uuid: BluetoothUUID(item.uuid) ?? BluetoothUUID(0),
                                                    properties: CharacteristicProperties(rawValue: UInt16(truncatingIfNeeded: item.properties)),
                                                    value: nil, valueHandle: item.valueHandle, service: service)
                characteristic.setDescriptors(item.descriptors.map {
                    Descriptor(uuid: BluetoothUUID($0.uuid) ?? BluetoothUUID(0), value: .none, handle: $0.handle, characteristic: characteristic)
                })
                return characteristic
            }
            service.with { $0.characteristics = characteristics; $0.included = [] }
            return service
        }
        // An included service is the discovered one at its handles, or a secondary service (primary discovery
        // does not find those), known by its type and range (Core Vol 3 Part G §4.5.1).
        for (service, info) in zip(services, database.services) {
            let included = info.included.map { entry -> Service in
                services.first { $0.range.lowerBound == entry.startHandle }
                    ?? Service(uuid: BluetoothUUID(entry.uuid) ?? BluetoothUUID(0), isPrimary: false,
                               range: entry.startHandle...max(entry.startHandle, entry.endHandle), peripheral: self)
            }
            service.with { $0.included = included }
        }
        shared.withLock { $0.services = services }
        return services
    }

    private func discoverAll(_ uuids: [BluetoothUUID]?, completion: @escaping @Sendable (Result<[Service], BerylError>) -> Void) {
        gatt({ $0.discover.serviceUuids = (uuids ?? []).map(\.description) }) { [self] result in
            switch result {
            case .failure(let error): completion(.failure(error))
            case .success(let response): completion(.success(self.adopt(response.database)))
            }
        }
    }

    /// Discovers the service's characteristics (Core Vol 3 Part G §4.6.1), keeping those asked for; they are added to
    /// what was found before.
    public func discoverCharacteristics(_ characteristicUUIDs: [BluetoothUUID]?, for service: Service) {
        let range = service.range
        gatt({ $0.discover = .with {
            $0.depth = .characteristics
            $0.startHandle = range.lowerBound
            $0.endHandle = range.upperBound
            $0.characteristicUuids = (characteristicUUIDs ?? []).map(\.description)
        } }) { [self] result in
            var error: Error?
            switch result {
            case .failure(let failure): error = failure.coreBluetoothError
            case .success(let response):
                let found = (response.database.services.first?.characteristics ?? []).map { item in
                    Characteristic(uuid: BluetoothUUID(item.uuid) ?? BluetoothUUID(0),
                                   properties: CharacteristicProperties(rawValue: UInt16(truncatingIfNeeded: item.properties)),
                                   value: nil, valueHandle: item.valueHandle, service: service)
                }
                service.with { state in
                    var characteristics = state.characteristics ?? []
                    for characteristic in found where !characteristics.contains(where: { $0.valueHandle == characteristic.valueHandle }) {
                        characteristics.append(characteristic)
                    }
                    state.characteristics = characteristics.sorted { $0.valueHandle < $1.valueHandle }
                }
            }
            notify { $0.peripheral(self, didDiscoverCharacteristicsFor: service, error: error) }
        }
    }

    /// Discovers the characteristic's descriptors (§4.7.1): the handles after its value, up to the next
    /// characteristic's declaration (attd stops at one it meets when the next is not known here).
    public func discoverDescriptors(for characteristic: Characteristic) {
        guard let service = characteristic.service else {
            return notify { $0.peripheral(self, didDiscoverDescriptorsFor: characteristic, error: BluetoothError(.invalidHandle, message: "the characteristic's service is gone")) }
        }
        let valueHandle = characteristic.valueHandle
        let next = (service.characteristics ?? []).map(\.valueHandle).filter { $0 > valueHandle }.min()
        let end = next.map { $0 - 2 } ?? service.range.upperBound
        guard valueHandle < end else {
            characteristic.setDescriptors([])
            return notify { $0.peripheral(self, didDiscoverDescriptorsFor: characteristic, error: nil) }
        }
        gatt({ $0.discover = .with { $0.depth = .descriptors; $0.startHandle = valueHandle + 1; $0.endHandle = end } }) { [self] result in
            var error: Error?
            switch result {
            case .failure(let failure): error = failure.coreBluetoothError
            case .success(let response):
                let known = characteristic.descriptors ?? []
                let found = (response.database.services.first?.characteristics.first?.descriptors ?? []).map { info in
                    known.first { $0.handle == info.handle }
                        ?? Descriptor(uuid: BluetoothUUID(info.uuid) ?? BluetoothUUID(0), value: .none, handle: info.handle, characteristic: characteristic)
                }
                characteristic.setDescriptors(found)
            }
            notify { $0.peripheral(self, didDiscoverDescriptorsFor: characteristic, error: error) }
        }
    }

    /// Find Included Services (§4.5.1) over the service; an included service is the discovered object at its
    /// handles, or a secondary service (which primary discovery does not find).
    public func discoverIncludedServices(_ includedServiceUUIDs: [BluetoothUUID]?, for service: Service) {
        let range = service.range
        let filter = includedServiceUUIDs
        gatt({ $0.discover = .with { $0.depth = .included; $0.startHandle = range.lowerBound; $0.endHandle = range.upperBound } }) { [self] result in
            var error: Error?
            switch result {
            case .failure(let failure): error = failure.coreBluetoothError
            case .success(let response):
                // Found before (as included here, or as a primary service): the same object.
                let known = (service.includedServices ?? []) + (services ?? [])
                let found = (response.database.services.first?.included ?? [])
                    .filter { entry in filter.map { $0.contains(BluetoothUUID(entry.uuid) ?? BluetoothUUID(0)) } ?? true }
                    .map { entry in
                        known.first { $0.range.lowerBound == entry.startHandle }
                            ?? Service(uuid: BluetoothUUID(entry.uuid) ?? BluetoothUUID(0), isPrimary: false,
                                       range: entry.startHandle...max(entry.startHandle, entry.endHandle), peripheral: self)
                    }
                service.with { state in
                    var included = state.included ?? []
                    for entry in found where !included.contains(where: { $0.range.lowerBound == entry.range.lowerBound }) { included.append(entry) }
                    state.included = included
                }
            }
            notify { $0.peripheral(self, didDiscoverIncludedServicesFor: service, error: error) }
        }
    }

    // MARK: Values

    public func readValue(for characteristic: Characteristic) {
        readValue(characteristic) { [self] result in
            switch result {
            case .success(let value): deliver(value, of: characteristic, error: nil)
            case .failure(let failure): notify { $0.peripheral(self, didUpdateValueFor: characteristic, error: failure.coreBluetoothError) }
            }
        }
    }

    private func readValue(_ characteristic: Characteristic, completion: @escaping @Sendable (Result<Data, BerylError>) -> Void) {
        // Core Bluetooth's API misuse: reading what does not say it can be read.
        guard characteristic.properties.contains(.read) else {
            return later { completion(.failure(.att(code: 0x02, message: "the characteristic has no read property"))) }
        }
        gatt({ $0.read.handle = characteristic.valueHandle }) { result in
            switch result {
            case .success(let response):
                completion(.success(response.value))
            case .failure(let error):
                completion(.failure(error))
            }
        }
    }

    public func readValue(for characteristic: Characteristic) async throws -> Data {
        try await withCheckedThrowingContinuation { continuation in
            readValue(characteristic) { result in
                if case .success(let value) = result { characteristic.setValue(value) }
                continuation.resume(with: result.mapError { $0.coreBluetoothError })
            }
        }
    }

    public func writeValue(_ data: Data, for characteristic: Characteristic, type: CharacteristicWriteType) {
        writeValue(data, characteristic, type) { [self] result in
            guard type == .withResponse else { return }
            let error: Error? = if case .failure(let failure) = result { failure.coreBluetoothError } else { nil }
            notify { $0.peripheral(self, didWriteValueFor: characteristic, error: error) }
        }
    }

    private func writeValue(_ data: Data, _ characteristic: Characteristic, _ type: CharacteristicWriteType,
                            completion: @escaping @Sendable (Result<Void, BerylError>) -> Void) {
        // Core Bluetooth signs a write without response to a characteristic that takes only signed writes.
        let signed = type == .withoutResponse && !characteristic.properties.contains(.writeWithoutResponse)
            && characteristic.properties.contains(.authenticatedSignedWrites)
        let allowed = type == .withResponse ? characteristic.properties.contains(.write) : characteristic.properties.contains(.writeWithoutResponse) || signed
        guard allowed else {
            return later {
                completion(.failure(.att(code: 0x03, message: "the characteristic has no \(type == .withResponse ? "write" : "writeWithoutResponse") property")))
            }
        }
        guard type == .withResponse else {
            return writeWithoutResponse(PendingWrite(valueHandle: characteristic.valueHandle, value: data, signed: signed), completion: completion)
        }
        gatt({ $0.write = .with {
            $0.handle = characteristic.valueHandle
            $0.value = data
        } }) { result in completion(result.map { _ in () }) }
    }

    /// Taken into the write queue, or dropped while it is full (Core Bluetooth drops a write made while
    /// canSendWriteWithoutResponse is false); peripheralIsReady(toSendWriteWithoutResponse:) follows once there is room.
    private func writeWithoutResponse(_ write: PendingWrite, completion: @escaping @Sendable (Result<Void, BerylError>) -> Void) {
        guard manager.value != nil else {
            let error = managerGone()
            return later { completion(.failure(error)) }
        }
        let taken = shared.withLock { state -> Bool in
            guard let id = state.writes.offer(write) else { return false }
            state.writeCompletions[id] = completion
            return true
        }
        guard taken else {
            return later { completion(.failure(.busy("the queue of writes without response is full; wait for peripheralIsReady(toSendWriteWithoutResponse:)"))) }
        }
        sendWrites()
    }

    private func sendWrites() {
        guard let central = manager.value else { return }
        // Taken and sent under one lock, as PeripheralManager.sendUpdates: writes leave in the order taken, on the data
        // channel while the grant is live and through managerd otherwise.
        let data = central.session.liveDataChannel
        shared.withLock { state in
            guard let way = state.writeWays.next(live: data != nil) else { return }
            let sendings = state.writes.takeSendable()
            guard !sendings.isEmpty else { return }
            state.writeWays.sent(sendings.map(\.id), way)
            if let data, way == .dataChannel { data.wireRequests(sendings.map(dataRequest)) } else { central.channel.requests(sendings.map(request)) }
        }
    }

    /// The same write as attd's GattWrite on the data channel, naming the peripheral by its identifier.
    private func dataRequest(_ sending: WriteQueue.Sending) -> (request: Request, completion: Channel.WireCompletion) {
        (.with {
            $0.att.gattWrite = .with {
                $0.peripheral = identifierString
                $0.handle = sending.item.valueHandle
                $0.value = sending.item.value
                $0.withoutResponse = true
                $0.signed = sending.item.signed
                $0.ordered = true
                $0.readySeen = sending.readySeen
            }
        }, { [weak self] result in
            guard let self else { return }
            let answer = DataChannelAnswer<PendingWrite>(result)
            if answer.grantRefused { manager.value?.session.dataGrantRefused() }
            writeAnswered(sending.id, answer.queueAnswer, failure: answer.failure)
        })
    }

    private func request(_ sending: WriteQueue.Sending) -> (request: Request, completion: Channel.Completion) {
        (.manager {
            $0.gatt = .with {
                $0.peripheral = identifierString
                $0.write = .with {
                    $0.handle = sending.item.valueHandle
                    $0.value = sending.item.value
                    $0.withoutResponse = true
                    $0.signed = sending.item.signed
                    $0.ordered = true
                    $0.readySeen = sending.readySeen
                }
            }
        }, { [weak self] result in
            let answer = WriteQueue.Answer(result, sent: \.manager.gatt.writeCommand.sent, sendAgain: \.manager.gatt.writeCommand.sendAgain)
            self?.writeAnswered(sending.id, answer, failure: result.failure)
        })
    }

    private func writeAnswered(_ id: UInt64, _ answer: WriteQueue.Answer, failure: BerylError?) {
        let completion = shared.withLock { state -> (@Sendable (Result<Void, BerylError>) -> Void)? in
            state.writeWays.answered(id)
            guard state.writes.answered(id, answer), answer == .sent || answer == .failed else { return nil }
            return state.writeCompletions.removeValue(forKey: id)
        }
        if let failure { completion?(.failure(failure)) } else { completion?(.success(())) }
        sendWrites()
        readyToWriteIfOwed()
    }

    /// Also on a new link: an app told false before the last one went may wait for the callback before writing.
    func readyToWriteIfOwed() {
        if shared.withLock({ $0.writes.takeOwedReady() }) { notify { $0.peripheralIsReady(toSendWriteWithoutResponse: self) } }
    }

    /// The link (or managerd) went: queued writes go with it, and one on its way is no longer waited for.
    func writesGone() {
        let dropped = shared.withLock { state in
            state.writes.reset()
            state.writeWays.reset()
            defer { state.writeCompletions.removeAll() }
            return Array(state.writeCompletions.values)
        }
        // A ready owed stays owed: told after the next write's answer, not on a link that is gone.
        for completion in dropped { completion(.failure(.unavailable("the link went before the write without response was sent"))) }
    }

    public func writeValue(_ data: Data, for characteristic: Characteristic, type: CharacteristicWriteType = .withResponse) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            writeValue(data, characteristic, type) { continuation.resume(with: $0.mapError { $0.coreBluetoothError }) }
        }
    }

    /// Beryl's addition: a reliable write (Core Vol 3 Part G §4.9.5). Every value is prepared, echoed back and
    /// checked, then executed as one; a mismatch or a refusal cancels all of them.
    public func writeValuesReliably(_ writes: [(Characteristic, Data)]) async throws {
        guard !writes.isEmpty else { return }
        if let refused = writes.first(where: { !$0.0.properties.contains(.write) }) {
            throw ATTError(.writeNotPermitted, message: "\(refused.0.uuid) has no write property")
        }
        let parts = writes.map { characteristic, value in Beryl_Ipc_V1_AttWrite.with { $0.handle = characteristic.valueHandle; $0.value = value } }
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            gatt({ $0.reliableWrite.writes = parts }) { result in
                continuation.resume(with: result.map { _ in () }.mapError { $0.coreBluetoothError })
            }
        }
    }

    /// A descriptor's value, read from the peer (the Client Characteristic Configuration included).
    public func readValue(for descriptor: Descriptor) {
        readValue(descriptor) { [self] result in
            let error: Error? = if case .failure(let failure) = result { failure.coreBluetoothError } else { nil }
            notify { $0.peripheral(self, didUpdateValueFor: descriptor, error: error) }
        }
    }

    public func readValue(for descriptor: Descriptor) async throws -> Data {
        try await withCheckedThrowingContinuation { continuation in
            readValue(descriptor) { continuation.resume(with: $0.mapError { $0.coreBluetoothError }) }
        }
    }

    private func readValue(_ descriptor: Descriptor, completion: @escaping @Sendable (Result<Data, BerylError>) -> Void) {
        gatt({ $0.read.handle = descriptor.handle }) { result in
            if case .success(let response) = result { descriptor.setValue(bytes: response.value) }
            completion(result.map(\.value))
        }
    }

    /// Writes a descriptor. As in Core Bluetooth, the Client Characteristic Configuration is set with
    /// `setNotifyValue(_:for:)`, not written.
    public func writeValue(_ data: Data, for descriptor: Descriptor) {
        writeValue(data, descriptor) { [self] result in
            let error: Error? = if case .failure(let failure) = result { failure.coreBluetoothError } else { nil }
            notify { $0.peripheral(self, didWriteValueFor: descriptor, error: error) }
        }
    }

    public func writeValue(_ data: Data, for descriptor: Descriptor) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            writeValue(data, descriptor) { continuation.resume(with: $0.mapError { $0.coreBluetoothError }) }
        }
    }

    private func writeValue(_ data: Data, _ descriptor: Descriptor, completion: @escaping @Sendable (Result<Void, BerylError>) -> Void) {
        guard descriptor.uuid != BluetoothUUID(0x2902) else {
            let message = "the Client Characteristic Configuration is written by setNotifyValue(_:for:)"
            reportMisuse(message)
            return later { completion(.failure(.att(code: 0x03, message: message))) }
        }
        gatt({ $0.write = .with { $0.handle = descriptor.handle; $0.value = data } }) { result in
            if case .success = result { descriptor.setValue(bytes: data) }
            completion(result.map { _ in () })
        }
    }

    public func setNotifyValue(_ enabled: Bool, for characteristic: Characteristic) {
        setNotify(enabled, characteristic) { [self] error in
            let error = error?.coreBluetoothError
            notify { $0.peripheral(self, didUpdateNotificationStateFor: characteristic, error: error) }
        }
    }

    /// The async face of setNotifyValue (named apart, as `services(discovering:)` is); values then arrive through
    /// the delegate's didUpdateValueFor.
    public func setNotifying(_ enabled: Bool, for characteristic: Characteristic) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            setNotify(enabled, characteristic) { error in
                if let error { continuation.resume(throwing: error.coreBluetoothError) } else { continuation.resume() }
            }
        }
    }

    private func setNotify(_ enabled: Bool, _ characteristic: Characteristic, completion: @escaping @Sendable (BerylError?) -> Void) {
        guard !characteristic.properties.isDisjoint(with: [.notify, .indicate]) else {
            return later { completion(.att(code: 0x06, message: "the characteristic neither notifies nor indicates")) }
        }
        let cccd = characteristic.descriptors?.first { $0.uuid == BluetoothUUID(0x2902) }?.handle ?? characteristic.valueHandle + 1
        let indicate = !characteristic.properties.contains(.notify) && characteristic.properties.contains(.indicate)
        let valueHandle = UInt16(truncatingIfNeeded: characteristic.valueHandle)
        if enabled { shared.withLock { $0.subscribing.subscribing(valueHandle) } }
        gatt({ $0.setNotify = .with { $0.valueHandle = characteristic.valueHandle; $0.cccdHandle = cccd; $0.indicate = indicate; $0.enable = enabled } }) { [self] result in
            if case .success = result { characteristic.setNotifying(enabled) }
            let error: BerylError? = if case .failure(let failure) = result { failure } else { nil }
            completion(error)
            guard enabled else { return }
            for value in shared.withLock({ $0.subscribing.answered(valueHandle) }) { deliver(value, of: characteristic, error: nil) }
        }
    }

    public func readRSSI() {
        guard let central = manager.value else {
            let error = managerGone().coreBluetoothError
            return notify { $0.peripheral(self, didReadRSSI: NSNumber(value: 127), error: error) }
        }
        central.channel.request(.manager { $0.readRssi.peripheral = identifierString }) { [self] result in
            switch result {
            case .success(let response):
                let rssi = NSNumber(value: response.manager.rssi.rssi)
                notify { $0.peripheral(self, didReadRSSI: rssi, error: nil) }
            case .failure(let failure):
                let error = failure.coreBluetoothError
                notify { $0.peripheral(self, didReadRSSI: NSNumber(value: 127), error: error) }
            }
        }
    }

    /// The most one write of this type carries (512 with response; ATT_MTU - 3 without). With no stack to ask, the
    /// app is told (misuse handler) and gets the least any link carries.
    public func maximumWriteValueLength(for type: CharacteristicWriteType) -> Int {
        let least = type == .withResponse ? 512 : 20
        guard let central = manager.value else {
            _ = managerGone()
            return least
        }
        let result = central.channel.call(.manager { $0.maximumWriteLength = .with { $0.peripheral = identifierString; $0.withoutResponse = type == .withoutResponse } })
        switch result {
        case .success(let response):
            return Int(response.manager.maximumWriteLength.length)
        case .failure(let error):
            central.session.misuse.report(.failed("maximumWriteValueLength(for:) could not reach the stack (\(error)); answering \(least)"))
            return least
        }
    }

    // MARK: From managerd

    func valueArrived(handle: UInt32, value: Data) {
        guard let characteristic = services?.lazy.flatMap({ $0.characteristics ?? [] }).first(where: { $0.valueHandle == handle }),
              let now = shared.withLock({ $0.subscribing.arrived(value, of: UInt16(truncatingIfNeeded: handle)) }) else { return }
        deliver(now, of: characteristic, error: nil)
    }

    func servicesChanged(_ change: Beryl_Ipc_V1_GattServiceChanged) {
        let range = change.startHandle...max(change.startHandle, change.endHandle)
        let invalidated = shared.withLock { state -> [Service] in
            let gone = (state.services ?? []).filter { $0.range.overlaps(range) }
            state.services?.removeAll { $0.range.overlaps(range) }
            return gone
        }
        notify { $0.peripheral(self, didModifyServices: invalidated) }
    }

    /// attd's GattWriteReady for this app on the link, with its count.
    func readyToWrite(count: UInt32) {
        shared.withLock { $0.writes.readyToSend(count: count) }
        sendWrites()
        readyToWriteIfOwed()
    }
}

struct WeakBox<T: AnyObject & Sendable>: Sendable {
    weak var value: T?
}
