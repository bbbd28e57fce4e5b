import Beryl
import BerylCore
import BerylTools
import Dispatch
import Foundation
import Synchronization

/// `beryl gatt` as an app of managerd: connect through a central manager, discover, run one operation, cancel.
final class GattApp: CentralManagerDelegate, PeripheralDelegate, Sendable {
    let printer: EventPrinter
    private let notifications = Mutex<AsyncStream<(BluetoothUUID, Data)>.Continuation?>(nil)

    init(printer: EventPrinter) { self.printer = printer }

    func centralManagerDidUpdateState(_ central: CentralManager) {}

    func peripheral(_ peripheral: Peripheral, didUpdateValueFor characteristic: Characteristic, error: Error?) {
        // Values read with the async face also pass here; only notified ones are streamed.
        guard characteristic.isNotifying, error == nil, let value = characteristic.value else { return }
        _ = notifications.withLock { $0?.yield((characteristic.uuid, value)) }
    }

    static func run(stack: StackOptions, peer: String, operation: GattClientSession.Operation, timeout: Double, json: Bool, agent: PairingAgent) throws {
        let printer = EventPrinter(json: json)
        let app = GattApp(printer: printer)
        let connected = Mutex(false)
        // A script tells "never connected" from "the operation did not finish" by the failed step, not by the message.
        let timedOut: @Sendable () -> GattFailure = {
            var failure = connected.withLock { $0 } ? GattFailure("timed out", step: operation.verb)
                : GattFailure("no connection to \(peer) within \(timeout) s", step: "connect")
            failure.timedOut = true
            return failure
        }
        let report: @Sendable () -> Void = { printer.emit(timedOut().fields) }
        let reportTimeout = json ? report : nil
        AppSupport.watchdog(seconds: timeout, event: reportTimeout) { timedOut().message }
        try AppSupport.blocking {
            let central = CentralManager(delegate: app, queue: DispatchQueue(label: "beryl.gatt"), appID: "beryl.gatt",
                                             socketPath: stack.paths.socket("managerd"))
            let pairing = CommandPairing(agent: agent) { printer.emit($0.fields) }
            central.pairingDelegate = pairing
            try await AppSupport.poweredOn({ central.state }, reason: { central.stateReason }, runtimeDir: stack.paths.runtimeDir)
            let peripheral = try AppSupport.peripheral(peer, on: central)
            peripheral.delegate = app
            do {
                try await central.connected(to: peripheral)
            } catch {
                if json { printer.emit(Self.failure(error, operation: "connect")) }
                throw error
            }
            connected.withLock { $0 = true }
            printer.emit(["event": "connected", "peer": peer, "identifier": peripheral.identifier.uuidString])
            defer { central.cancelPeripheralConnection(peripheral) }
            do {
                try await app.perform(operation, on: peripheral)
            } catch {
                if json { printer.emit(Self.failure(error, operation: operation.verb)) }
                if let missing = error as? NotOnPeer { throw Output.fail(missing.description) }
                guard error is BerylError else { throw error }
                throw Output.fail("\(operation.verb) failed: \(error)")
            }
            // Let managerd take the cancel before the session closes (a command without response is then carried).
            try? await Task.sleep(for: .milliseconds(100))
            withExtendedLifetime((central, pairing)) {}
        }
    }

    /// A failed operation as an event, with the typed codes a script acts on (`--json`); the message is for people.
    static func failure(_ error: any Error, operation: String) -> [String: Any] {
        var failure = GattFailure("\(error)", step: operation)
        record(error, in: &failure)
        return failure.fields
    }

    /// Core Bluetooth's errors, as the async calls throw them (with the pairing or encryption that failed beneath an
    /// ATT error), and the library's own.
    private static func record(_ error: any Error, in failure: inout GattFailure) {
        switch error {
        case let att as ATTError:
            failure.attError = att.code.rawValue
            if let underlying = att.underlyingError { record(underlying, in: &failure) }
        case let bluetooth as BluetoothError:
            failure.bluetoothError = bluetooth.code.rawValue
        case let missing as NotOnPeer:
            failure.notOnPeer = missing
        case BerylError.att(let code, _):
            failure.attError = Int(code)
        case BerylError.bluetooth(let code, _):
            failure.bluetoothError = code.rawValue
        case BerylError.pairingFailed(let reason, let byPeer, _):
            failure.smpReason = reason
            failure.byPeer = byPeer
        case BerylError.encryptionFailed(let status, _):
            failure.hciStatus = status
        default:
            break
        }
    }

    private func perform(_ operation: GattClientSession.Operation, on peripheral: Peripheral) async throws {
        let services = try await peripheral.services(discovering: nil)
        func find(_ uuid: BluetoothUUID) throws -> Characteristic {
            guard let found = services.lazy.flatMap({ $0.characteristics ?? [] }).first(where: { $0.uuid == uuid }) else {
                throw NotOnPeer.characteristic(uuid)
            }
            return found
        }
        switch operation {
        case .discover:
            for service in services {
                printer.emit(["event": "service", "uuid": service.uuid.description, "primary": service.isPrimary,
                              "included": (service.includedServices ?? []).map(\.uuid.description),
                              "characteristics": (service.characteristics ?? []).map { characteristic in
                                  ["uuid": characteristic.uuid.description, "properties": Int(characteristic.properties.rawValue),
                                   "descriptors": (characteristic.descriptors ?? []).map { ["uuid": $0.uuid.description] }] as [String: Any]
                              }])
            }
        case .read(let uuid):
            let value = try await peripheral.readValue(for: try find(uuid))
            printer.emit(["event": "read", "uuid": uuid.description, "value": Hex.encode(value)])
        case .write(let uuid, let value, let withoutResponse):
            try await peripheral.writeValue(Data(value), for: try find(uuid), type: withoutResponse ? .withoutResponse : .withResponse)
            printer.emit(["event": "written", "uuid": uuid.description, "bytes": value.count, "withResponse": !withoutResponse])
        case .reliableWrite(let uuid, let value):
            try await peripheral.writeValuesReliably([(try find(uuid), Data(value))])
            printer.emit(["event": "written", "uuid": uuid.description, "bytes": value.count, "withResponse": true, "reliable": true])
        case .subscribe(let uuid, let count):
            let characteristic = try find(uuid)
            let (values, continuation) = AsyncStream<(BluetoothUUID, Data)>.makeStream()
            notifications.withLock { $0 = continuation }
            try await peripheral.setNotifying(true, for: characteristic)
            let indications = !characteristic.properties.contains(.notify)
            printer.emit(["event": "subscribed", "uuid": uuid.description, "indications": indications])
            var received = 0
            for await (from, value) in values where from == uuid {
                printer.emit(["event": indications ? "indication" : "notification", "uuid": uuid.description, "value": Hex.encode(value)])
                received += 1
                if received >= count { break }
            }
            // Subscriptions outlive an app's session (managerd keeps the link for other apps): the command ends its own.
            if (try? await peripheral.setNotifying(false, for: characteristic)) != nil {
                printer.emit(["event": "unsubscribed", "uuid": uuid.description])
            }
        case .readDescriptor(let uuid, let descriptorUUID):
            let value = try await peripheral.readValue(for: try descriptor(descriptorUUID, of: find(uuid), on: peripheral))
            printer.emit(["event": "read", "uuid": uuid.description, "descriptor": descriptorUUID.description, "value": Hex.encode(value)])
        case .writeDescriptor(let uuid, let descriptorUUID, let value):
            try await peripheral.writeValue(Data(value), for: try descriptor(descriptorUUID, of: find(uuid), on: peripheral))
            printer.emit(["event": "written", "uuid": uuid.description, "descriptor": descriptorUUID.description, "bytes": value.count])
        case .pair:
            throw Output.fail("pairing is `beryl pair`")
        }
    }

    private func descriptor(_ uuid: BluetoothUUID, of characteristic: Characteristic, on peripheral: Peripheral) throws -> Descriptor {
        guard let found = characteristic.descriptors?.first(where: { $0.uuid == uuid }) else {
            throw NotOnPeer.descriptor(uuid, of: characteristic.uuid)
        }
        return found
    }
}

