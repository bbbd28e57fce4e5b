import Beryl
import BerylCore
import BerylTools
import Dispatch
import Foundation
import Synchronization

/// `beryl serve` as an app of managerd: publishes a profile through a peripheral manager, answers reads and writes
/// of its dynamic values (keeping the last value written), sends its periodic notifications, and advertises.
final class ServeApp: PeripheralManagerDelegate, Sendable {
    let profile: GATTProfile
    let printer: EventPrinter
    let queue = DispatchQueue(label: "beryl.serve")
    private struct State {
        var values = ProfileValues<ObjectIdentifier>()
        var counters: [ObjectIdentifier: UInt8] = [:]
    }
    /// The periodic notifications, for the life of the command.
    private let periodicTasks = Mutex<[Task<Void, Never>]>([])
    private let state = Mutex(State())
    private let published = Mutex<[(GATTProfile.Characteristic, MutableCharacteristic)]>([])
    /// Whether the profile is up: a reset clears an app's services and advertising, and the app adds them again at
    /// the next poweredOn (docs/core-bluetooth.md, "After a reset").
    private enum Phase { case starting, serving, cleared }
    private let phase = Mutex(Phase.starting)
    /// The one republication under way: a second reset cancels it, so services are never added twice.
    private let republication = Mutex<Task<Void, Never>?>(nil)

    init(profile: GATTProfile, printer: EventPrinter) {
        self.profile = profile
        self.printer = printer
    }

    static func run(stack: StackOptions, profile: GATTProfile, json: Bool, agent: PairingAgent) throws {
        let printer = EventPrinter(json: json)
        let app = ServeApp(profile: profile, printer: printer)
        try AppSupport.blocking {
            let manager = PeripheralManager(delegate: app, queue: app.queue, appID: "beryl.serve", socketPath: stack.paths.socket("managerd"))
            let pairing = CommandPairing(agent: agent) { printer.report(.pairing($0)) }
            manager.pairingDelegate = pairing
            try await AppSupport.poweredOn({ manager.state }, reason: { manager.stateReason }, runtimeDir: stack.paths.runtimeDir)
            try await app.publish(on: manager)
            app.advertise(on: manager)
            app.phase.withLock { $0 = .serving }
            await AppSupport.waitForStop(seconds: nil)
            manager.stopAdvertising()
            manager.removeAllServices()
            withExtendedLifetime(pairing) {}
        }
    }

    private func advertise(on manager: PeripheralManager) {
        manager.startAdvertising(AdvertisingOptions(localName: profile.localName, serviceUUIDs: profile.advertise))
    }

    private func publishAgain(on manager: PeripheralManager) {
        periodicTasks.withLock { tasks in
            tasks.forEach { $0.cancel() }
            tasks = []
        }
        published.withLock { $0 = [] }
        let task = Task { [self] in
            do {
                try await publish(on: manager)
                guard !Task.isCancelled else { return }
                advertise(on: manager)
            } catch {
                printer.report(.warning("publishing again after the reset failed: \(error)"))
            }
        }
        republication.withLock { running in
            running?.cancel()
            running = task
        }
    }

    private func publish(on manager: PeripheralManager) async throws {
        for service in profile.services where !Task.isCancelled {
            let mutable = MutableService(type: service.uuid, primary: service.primary)
            let characteristics = service.characteristics.map { spec in
                let characteristic = MutableCharacteristic(type: spec.uuid, properties: CharacteristicProperties(rawValue: UInt16(spec.properties)),
                                                           value: spec.value.map { Data($0) }, permissions: AttributePermissions(rawValue: spec.permissions))
                characteristic.descriptors = spec.descriptors.map { MutableDescriptor(type: $0.uuid, value: Data($0.value)) }
                return (spec, characteristic)
            }
            mutable.characteristics = characteristics.map(\.1)
            do {
                try await manager.add(mutable)
            } catch {
                throw Output.fail("publishing \(service.uuid): \(error)")
            }
            published.withLock { $0 += characteristics }
            printer.report(.published(service: "\(service.uuid)", handles: nil, characteristics: characteristics.count))
            for (spec, characteristic) in characteristics { schedule(spec, characteristic, manager) }
        }
    }

    private func schedule(_ spec: GATTProfile.Characteristic, _ characteristic: MutableCharacteristic, _ manager: PeripheralManager) {
        guard let periodic = spec.notify ?? spec.indicate else { return }
        let ticks = Task { [self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: periodic.every)
                tick(periodic, characteristic, manager)
            }
        }
        periodicTasks.withLock { $0.append(ticks) }
    }

    private func tick(_ periodic: GATTProfile.Periodic, _ characteristic: MutableCharacteristic, _ manager: PeripheralManager) {
        guard !(characteristic.subscribedCentrals ?? []).isEmpty else { return }
        let bytes: Data
        switch periodic.value {
        case .fixed(let fixed): bytes = Data(fixed)
        case .counter8:
            bytes = Data([state.withLock { state in
                let next = state.counters[ObjectIdentifier(characteristic), default: 0] &+ 1
                state.counters[ObjectIdentifier(characteristic)] = next
                return next
            }])
        }
        // False: the transmit queue is full; this tick is dropped (peripheralManagerIsReady says when to resume).
        _ = manager.updateValue(bytes, for: characteristic, onSubscribedCentrals: nil)
    }

    func peripheralManagerDidUpdateState(_ peripheral: PeripheralManager) {
        if peripheral.state != .poweredOn, peripheral.state != .unknown { printer.report(.stackState("\(peripheral.state)")) }
        let again = phase.withLock { phase -> Bool in
            switch (phase, peripheral.state == .poweredOn) {
            case (.serving, false):
                phase = .cleared
                republication.withLock { $0?.cancel() }
            case (.cleared, true): phase = .serving; return true
            default: break
            }
            return false
        }
        if again { publishAgain(on: peripheral) }
    }

    func peripheralManagerDidStartAdvertising(_ peripheral: PeripheralManager, error: Error?) {
        if let error { return printer.report(.advertisingRefused(reason: "\(error)")) }
        printer.report(.advertising(name: profile.localName, privateAddress: nil))
    }

    func peripheralManager(_ peripheral: PeripheralManager, didReceiveRead request: ATTRequest) {
        let value = Data(state.withLock { $0.values[ObjectIdentifier(request.characteristic)] })
        printer.report(.readRequested(.init(attribute: "\(request.characteristic.uuid)", offset: request.offset, bytes: value.count)))
        // Core Bluetooth's rule for long reads: the app answers from the offset on; past the end is Invalid Offset.
        guard request.offset <= value.count else { return peripheral.respond(to: request, withResult: .invalidOffset) }
        request.value = value.subdata(in: request.offset..<value.count)
        peripheral.respond(to: request, withResult: .success)
    }

    func peripheralManager(_ peripheral: PeripheralManager, didReceiveWrite requests: [ATTRequest]) {
        let refusal = state.withLock { $0.values.apply(requests.map { (ObjectIdentifier($0.characteristic), $0.offset, Array($0.value ?? Data())) }) }
        let result = refusal.flatMap { ATTError.Code(rawValue: Int($0)) } ?? .success
        printer.report(.writeRequested(requests.map { .init(attribute: "\($0.characteristic.uuid)", offset: $0.offset, bytes: $0.value?.count ?? 0) },
                                       refusal: result == .success ? nil : UInt8(truncatingIfNeeded: result.rawValue)))
        if let first = requests.first, first.expectsResponse { peripheral.respond(to: first, withResult: result) }
    }

    func peripheralManager(_ peripheral: PeripheralManager, central: Central, didSubscribeTo characteristic: Characteristic) {
        printer.report(.subscription(attribute: "\(characteristic.uuid)", central: central.identifier.uuidString, subscribed: true, indications: false))
    }

    func peripheralManager(_ peripheral: PeripheralManager, central: Central, didUnsubscribeFrom characteristic: Characteristic) {
        printer.report(.subscription(attribute: "\(characteristic.uuid)", central: central.identifier.uuidString, subscribed: false, indications: false))
    }
}
