import BerylIPC
import Dispatch
import Foundation
import Synchronization

/// Core Bluetooth's CBPeripheralDelegate.
public protocol PeripheralDelegate: AnyObject, Sendable {
    func peripheral(_ peripheral: Peripheral, didDiscoverServices error: BerylError?)
    func peripheral(_ peripheral: Peripheral, didDiscoverIncludedServicesFor service: Service, error: BerylError?)
    func peripheral(_ peripheral: Peripheral, didDiscoverCharacteristicsFor service: Service, error: BerylError?)
    func peripheral(_ peripheral: Peripheral, didDiscoverDescriptorsFor characteristic: Characteristic, error: BerylError?)
    func peripheral(_ peripheral: Peripheral, didUpdateValueFor characteristic: Characteristic, error: BerylError?)
    func peripheral(_ peripheral: Peripheral, didWriteValueFor characteristic: Characteristic, error: BerylError?)
    func peripheral(_ peripheral: Peripheral, didUpdateNotificationStateFor characteristic: Characteristic, error: BerylError?)
    func peripheral(_ peripheral: Peripheral, didReadRSSI rssi: Int, error: BerylError?)
    func peripheral(_ peripheral: Peripheral, didModifyServices invalidatedServices: [Service])
    func peripheralIsReady(toSendWriteWithoutResponse peripheral: Peripheral)
}

public extension PeripheralDelegate {
    func peripheral(_ peripheral: Peripheral, didDiscoverServices error: BerylError?) {}
    func peripheral(_ peripheral: Peripheral, didDiscoverIncludedServicesFor service: Service, error: BerylError?) {}
    func peripheral(_ peripheral: Peripheral, didDiscoverCharacteristicsFor service: Service, error: BerylError?) {}
    func peripheral(_ peripheral: Peripheral, didDiscoverDescriptorsFor characteristic: Characteristic, error: BerylError?) {}
    func peripheral(_ peripheral: Peripheral, didUpdateValueFor characteristic: Characteristic, error: BerylError?) {}
    func peripheral(_ peripheral: Peripheral, didWriteValueFor characteristic: Characteristic, error: BerylError?) {}
    func peripheral(_ peripheral: Peripheral, didUpdateNotificationStateFor characteristic: Characteristic, error: BerylError?) {}
    func peripheral(_ peripheral: Peripheral, didReadRSSI rssi: Int, error: BerylError?) {}
    func peripheral(_ peripheral: Peripheral, didModifyServices invalidatedServices: [Service]) {}
    func peripheralIsReady(toSendWriteWithoutResponse peripheral: Peripheral) {}
}

public enum PeripheralState: Sendable {
    case disconnected, connecting, connected, disconnecting
}

public final class Service: Sendable {
    public let uuid: BluetoothUUID
    public let isPrimary: Bool
    let range: ClosedRange<UInt32>
    public unowned let peripheral: Peripheral
    private let state = Mutex<(characteristics: [Characteristic], included: [Service])>(([], []))

    init(uuid: BluetoothUUID, isPrimary: Bool, range: ClosedRange<UInt32>, peripheral: Peripheral) {
        self.uuid = uuid
        self.isPrimary = isPrimary
        self.range = range
        self.peripheral = peripheral
    }

    public var characteristics: [Characteristic]? { state.withLock { $0.characteristics } }
    public var includedServices: [Service]? { state.withLock { $0.included } }
    func set(characteristics: [Characteristic], included: [Service]) { state.withLock { $0 = (characteristics, included) } }
}

public final class Characteristic: Sendable {
    public let uuid: BluetoothUUID
    public let properties: CharacteristicProperties
    let valueHandle: UInt32
    public unowned let service: Service
    private let state = Mutex<(value: Data?, notifying: Bool, descriptors: [Descriptor])>((nil, false, []))

    init(uuid: BluetoothUUID, properties: CharacteristicProperties, valueHandle: UInt32, service: Service) {
        self.uuid = uuid
        self.properties = properties
        self.valueHandle = valueHandle
        self.service = service
    }

    public var value: Data? { state.withLock { $0.value } }
    public var isNotifying: Bool { state.withLock { $0.notifying } }
    public var descriptors: [Descriptor]? { state.withLock { $0.descriptors } }
    func setValue(_ value: Data) { state.withLock { $0.value = value } }
    func setNotifying(_ on: Bool) { state.withLock { $0.notifying = on } }
    func setDescriptors(_ descriptors: [Descriptor]) { state.withLock { $0.descriptors = descriptors } }
}

public final class Descriptor: Sendable {
    public let uuid: BluetoothUUID
    let handle: UInt32
    public unowned let characteristic: Characteristic

    init(uuid: BluetoothUUID, handle: UInt32, characteristic: Characteristic) {
        self.uuid = uuid
        self.handle = handle
        self.characteristic = characteristic
    }
}

/// Core Bluetooth's CBPeripheral: a remote peripheral, named by the identifier the stack keeps for it.
public final class Peripheral: Sendable {
    public let identifier: UUID
    let identifierString: String
    unowned let central: CentralManager
    private struct State {
        var name: String?
        var state: PeripheralState = .disconnected
        var services: [Service]?
        var delegate = WeakBox<AnyObject & Sendable>()
        var canSendWriteWithoutResponse = true
    }
    private let shared: Mutex<State>

    init(identifier: String, name: String?, central: CentralManager) {
        identifierString = identifier
        self.identifier = UUID(uuidString: identifier) ?? UUID()
        self.central = central
        shared = Mutex(State(name: name))
    }

    public var name: String? { shared.withLock { $0.name } }
    public var state: PeripheralState { shared.withLock { $0.state } }
    public var services: [Service]? { shared.withLock { $0.services } }
    public var canSendWriteWithoutResponse: Bool { shared.withLock { $0.canSendWriteWithoutResponse } }
    public var delegate: PeripheralDelegate? {
        get { shared.withLock { $0.delegate.value } as? PeripheralDelegate }
        set { shared.withLock { $0.delegate.value = newValue } }
    }

    func setName(_ name: String) { shared.withLock { $0.name = name } }
    func setState(_ state: PeripheralState) { shared.withLock { $0.state = state } }
    func disconnected() {
        shared.withLock { state in
            state.state = .disconnected
            state.canSendWriteWithoutResponse = true
        }
        for service in services ?? [] { for characteristic in service.characteristics ?? [] { characteristic.setNotifying(false) } }
    }

    private func notify(_ body: @escaping @Sendable (PeripheralDelegate) -> Void) {
        guard let delegate else { return }
        central.delegateQueue.async { body(delegate) }
    }

    /// One GATT operation through managerd, answered on the session's queue.
    private func gatt(_ build: (inout Beryl_Ipc_V1_AttRequest) -> Void, completion: @escaping @Sendable (Result<Beryl_Ipc_V1_AttResponse, BerylError>) -> Void) {
        var operation = Beryl_Ipc_V1_AttRequest()
        build(&operation)
        central.channel.request(.manager { $0.gatt = .with { $0.peripheral = identifierString; $0.request = operation } }) { result in
            completion(result.map { $0.manager.gatt })
        }
    }

    // MARK: Discovery

    /// Discovers the services (all, or those given) with their characteristics and descriptors in one pass; the
    /// characteristic and descriptor discovery calls then answer from it.
    public func discoverServices(_ uuids: [BluetoothUUID]?) {
        discoverAll(uuids) { [self] result in
            let error: BerylError? = if case .failure(let failure) = result { failure } else { nil }
            notify { $0.peripheral(self, didDiscoverServices: error) }
        }
    }

    /// The async face of discoverServices (named apart so that delegate-style code in async contexts keeps its
    /// meaning): the services with their characteristics, descriptors and included services.
    public func services(discovering uuids: [BluetoothUUID]?) async throws -> [Service] {
        try await withCheckedThrowingContinuation { continuation in
            discoverAll(uuids) { continuation.resume(with: $0.mapError { $0 as any Error }) }
        }
    }

    /// Service objects for a discovered database (also how a restored peripheral gets back what the app had found).
    @discardableResult
    func adopt(_ database: Beryl_Ipc_V1_GattDatabase) -> [Service] {
        let services = database.services.map { info -> Service in
            let service = Service(uuid: BluetoothUUID(info.uuid) ?? BluetoothUUID(0), isPrimary: true, range: info.startHandle...max(info.startHandle, info.endHandle),
                                  peripheral: self)
            let characteristics = info.characteristics.map { item -> Characteristic in
                let characteristic = Characteristic(uuid: BluetoothUUID(item.uuid) ?? BluetoothUUID(0),
                                                    properties: CharacteristicProperties(rawValue: UInt8(truncatingIfNeeded: item.properties)),
                                                    valueHandle: item.valueHandle, service: service)
                characteristic.setDescriptors(item.descriptors.map { Descriptor(uuid: BluetoothUUID($0.uuid) ?? BluetoothUUID(0), handle: $0.handle,
                                                                                characteristic: characteristic) })
                return characteristic
            }
            service.set(characteristics: characteristics, included: [])
            return service
        }
        // An included service is the discovered one at its handles, or a secondary service (primary discovery
        // does not find those), known by its type and range (Core Vol 3 Part G §4.5.1).
        for (service, info) in zip(services, database.services) {
            let included = info.included.map { entry in
                services.first { $0.range.lowerBound == entry.startHandle }
                    ?? Service(uuid: BluetoothUUID(entry.uuid) ?? BluetoothUUID(0), isPrimary: false,
                               range: entry.startHandle...max(entry.startHandle, entry.endHandle), peripheral: self)
            }
            service.set(characteristics: service.characteristics ?? [], included: included)
        }
        shared.withLock { $0.services = services }
        return services
    }

    private func discoverAll(_ uuids: [BluetoothUUID]?, completion: @escaping @Sendable (Result<[Service], BerylError>) -> Void) {
        gatt({ $0.gattDiscover.serviceUuids = (uuids ?? []).map(\.description) }) { [self] result in
            switch result {
            case .failure(let error): completion(.failure(error))
            case .success(let response):
                let services = self.adopt(response.gattDatabase)
                completion(.success(services))
            }
        }
    }

    public func discoverCharacteristics(_ uuids: [BluetoothUUID]?, for service: Service) {
        central.delegateQueue.async { [self] in
            if let uuids { service.set(characteristics: (service.characteristics ?? []).filter { uuids.contains($0.uuid) }, included: service.includedServices ?? []) }
            notify { $0.peripheral(self, didDiscoverCharacteristicsFor: service, error: nil) }
        }
    }

    public func discoverDescriptors(for characteristic: Characteristic) {
        notify { $0.peripheral(self, didDiscoverDescriptorsFor: characteristic, error: nil) }
    }

    public func discoverIncludedServices(_ uuids: [BluetoothUUID]?, for service: Service) {
        central.delegateQueue.async { [self] in
            if let uuids { service.set(characteristics: service.characteristics ?? [], included: (service.includedServices ?? []).filter { uuids.contains($0.uuid) }) }
            notify { $0.peripheral(self, didDiscoverIncludedServicesFor: service, error: nil) }
        }
    }

    // MARK: Values

    public func readValue(for characteristic: Characteristic) {
        readValue(characteristic) { [self] result in
            let error: BerylError? = if case .failure(let failure) = result { failure } else { nil }
            notify { $0.peripheral(self, didUpdateValueFor: characteristic, error: error) }
        }
    }

    private func readValue(_ characteristic: Characteristic, completion: @escaping @Sendable (Result<Data, BerylError>) -> Void) {
        // Core Bluetooth's API misuse: reading what does not say it can be read.
        guard characteristic.properties.contains(.read) else {
            return central.delegateQueue.async { completion(.failure(.att(code: 0x02, message: "the characteristic has no read property"))) }
        }
        gatt({ $0.gattRead.handle = characteristic.valueHandle }) { result in
            switch result {
            case .success(let response):
                characteristic.setValue(response.gattValue.value)
                completion(.success(response.gattValue.value))
            case .failure(let error):
                completion(.failure(error))
            }
        }
    }

    public func readValue(for characteristic: Characteristic) async throws -> Data {
        try await withCheckedThrowingContinuation { continuation in
            readValue(characteristic) { continuation.resume(with: $0) }
        }
    }

    public func writeValue(_ data: Data, for characteristic: Characteristic, type: WriteType) {
        writeValue(data, characteristic, type) { [self] result in
            guard type == .withResponse else { return }
            let error: BerylError? = if case .failure(let failure) = result { failure } else { nil }
            notify { $0.peripheral(self, didWriteValueFor: characteristic, error: error) }
        }
    }

    private func writeValue(_ data: Data, _ characteristic: Characteristic, _ type: WriteType, completion: @escaping @Sendable (Result<Void, BerylError>) -> Void) {
        let allowed = type == .withResponse ? characteristic.properties.contains(.write) : characteristic.properties.contains(.writeWithoutResponse)
        guard allowed else {
            return central.delegateQueue.async {
                completion(.failure(.att(code: 0x03, message: "the characteristic has no \(type == .withResponse ? "write" : "writeWithoutResponse") property")))
            }
        }
        gatt({ $0.gattWrite = .with { $0.handle = characteristic.valueHandle; $0.value = data; $0.withoutResponse = type == .withoutResponse } }) { [self] result in
            switch result {
            case .success: completion(.success(()))
            case .failure(.failed(let message)) where type == .withoutResponse && message.contains("busy"):
                // The link's transmit queue is full: canSendWriteWithoutResponse turns false until peripheralIsReady.
                shared.withLock { $0.canSendWriteWithoutResponse = false }
                completion(.failure(.failed(message)))
            case .failure(let error): completion(.failure(error))
            }
        }
    }

    public func writeValue(_ data: Data, for characteristic: Characteristic, type: WriteType = .withResponse) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            writeValue(data, characteristic, type) { continuation.resume(with: $0.mapError { $0 as any Error }) }
        }
    }

    /// Beryl's addition: a reliable write (Core Vol 3 Part G §4.9.5). Every value is prepared, echoed back and
    /// checked, then executed as one; a mismatch or a refusal cancels all of them.
    public func writeValuesReliably(_ writes: [(Characteristic, Data)]) async throws {
        guard !writes.isEmpty else { return }
        if let refused = writes.first(where: { !$0.0.properties.contains(.write) }) {
            throw BerylError.att(code: 0x03, message: "\(refused.0.uuid) has no write property")
        }
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            gatt({ $0.gattReliableWrite.writes = writes.map { characteristic, value in .with { $0.handle = characteristic.valueHandle; $0.value = value } } }) { result in
                continuation.resume(with: result.map { _ in () }.mapError { $0 as any Error })
            }
        }
    }

    public func setNotifyValue(_ enabled: Bool, for characteristic: Characteristic) {
        setNotify(enabled, characteristic) { [self] error in
            notify { $0.peripheral(self, didUpdateNotificationStateFor: characteristic, error: error) }
        }
    }

    /// The async face of setNotifyValue (named apart, as `services(discovering:)` is); values then arrive through
    /// the delegate's didUpdateValueFor.
    public func setNotifying(_ enabled: Bool, for characteristic: Characteristic) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            setNotify(enabled, characteristic) { error in
                if let error { continuation.resume(throwing: error) } else { continuation.resume() }
            }
        }
    }

    private func setNotify(_ enabled: Bool, _ characteristic: Characteristic, completion: @escaping @Sendable (BerylError?) -> Void) {
        guard !characteristic.properties.isDisjoint(with: [.notify, .indicate]) else {
            return central.delegateQueue.async { completion(.att(code: 0x06, message: "the characteristic neither notifies nor indicates")) }
        }
        let cccd = characteristic.descriptors?.first { $0.uuid == BluetoothUUID(0x2902) }?.handle ?? characteristic.valueHandle + 1
        let indicate = !characteristic.properties.contains(.notify) && characteristic.properties.contains(.indicate)
        gatt({ $0.gattSubscribe = .with { $0.valueHandle = characteristic.valueHandle; $0.cccdHandle = cccd; $0.indicate = indicate; $0.enable = enabled } }) { result in
            if case .success = result { characteristic.setNotifying(enabled) }
            let error: BerylError? = if case .failure(let failure) = result { failure } else { nil }
            completion(error)
        }
    }

    public func readRSSI() {
        central.channel.request(.manager { $0.readRssi.peripheral = identifierString }) { [self] result in
            switch result {
            case .success(let response): notify { $0.peripheral(self, didReadRSSI: Int(response.manager.rssi.rssi), error: nil) }
            case .failure(let error): notify { $0.peripheral(self, didReadRSSI: 127, error: error) }
            }
        }
    }

    /// The most one write of this type carries (512 with response; ATT_MTU - 3 without).
    public func maximumWriteValueLength(for type: WriteType) -> Int {
        let result = central.channel.call(.manager { $0.maximumWriteLength = .with { $0.peripheral = identifierString; $0.withoutResponse = type == .withoutResponse } })
        guard case .success(let response) = result else { return type == .withResponse ? 512 : 20 }
        return Int(response.manager.maximumWriteLength.length)
    }

    // MARK: From managerd

    func valueArrived(handle: UInt32, value: Data) {
        guard let characteristic = services?.lazy.flatMap({ $0.characteristics ?? [] }).first(where: { $0.valueHandle == handle }) else { return }
        characteristic.setValue(value)
        notify { $0.peripheral(self, didUpdateValueFor: characteristic, error: nil) }
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

    func readyToWrite() {
        shared.withLock { $0.canSendWriteWithoutResponse = true }
        notify { $0.peripheralIsReady(toSendWriteWithoutResponse: self) }
    }
}
