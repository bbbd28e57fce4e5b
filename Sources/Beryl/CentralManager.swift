import BerylIPC
import Dispatch
import Foundation
import Synchronization

/// Core Bluetooth's CBCentralManagerDelegate. Callbacks arrive on the queue given to the manager (main if none).
public protocol CentralManagerDelegate: AnyObject, Sendable {
    func centralManagerDidUpdateState(_ central: CentralManager)
    func centralManager(_ central: CentralManager, didDiscover peripheral: Peripheral, advertisementData: AdvertisementData, rssi: Int)
    func centralManager(_ central: CentralManager, didConnect peripheral: Peripheral)
    func centralManager(_ central: CentralManager, didFailToConnect peripheral: Peripheral, error: BerylError?)
    func centralManager(_ central: CentralManager, didDisconnectPeripheral peripheral: Peripheral, error: BerylError?)
    /// Before the first state update of a manager managerd kept while the app was not running.
    func centralManager(_ central: CentralManager, willRestoreState state: RestoredCentralState)
}

public extension CentralManagerDelegate {
    func centralManager(_ central: CentralManager, willRestoreState state: RestoredCentralState) {}
    func centralManager(_ central: CentralManager, didDiscover peripheral: Peripheral, advertisementData: AdvertisementData, rssi: Int) {}
    func centralManager(_ central: CentralManager, didConnect peripheral: Peripheral) {}
    func centralManager(_ central: CentralManager, didFailToConnect peripheral: Peripheral, error: BerylError?) {}
    func centralManager(_ central: CentralManager, didDisconnectPeripheral peripheral: Peripheral, error: BerylError?) {}
}

public struct ScanOptions: Sendable {
    public var allowDuplicates = false
    public var solicitedServiceUUIDs: [BluetoothUUID] = []
    public init(allowDuplicates: Bool = false, solicitedServiceUUIDs: [BluetoothUUID] = []) {
        self.allowDuplicates = allowDuplicates
        self.solicitedServiceUUIDs = solicitedServiceUUIDs
    }
}

public struct ConnectOptions: Sendable {
    public var notifyOnConnection = false
    public var notifyOnDisconnection = false
    public var notifyOnNotification = false
    public init(notifyOnConnection: Bool = false, notifyOnDisconnection: Bool = false, notifyOnNotification: Bool = false) {
        self.notifyOnConnection = notifyOnConnection
        self.notifyOnDisconnection = notifyOnDisconnection
        self.notifyOnNotification = notifyOnNotification
    }
}

struct WeakBox<T: AnyObject & Sendable>: Sendable {
    weak var value: T?
}

/// Core Bluetooth's CBCentralManager for Linux apps: one session with managerd.
public final class CentralManager: Sendable, SessionBacked {
    let session: ManagerSession
    private struct State {
        var isScanning = false
        var peripherals: [String: Peripheral] = [:]
        var scanStreams: [UUID: AsyncStream<Discovery>.Continuation] = [:]
        var connectWaiters: [String: [CheckedContinuation<Void, any Error>]] = [:]
    }
    private let shared = Mutex(State())

    /// - Parameters:
    ///   - socketPath: managerd's socket; `$BERYL_RUNTIME_DIR/managerd.sock` (or /run/beryl) by default.
    ///   - appID: the app's identifier (an app manifest's id, for background modes and restoration); by default
    ///     `$BERYL_APP_ID`, which managerd sets when it launches the app.
    public init(delegate: CentralManagerDelegate?, queue: DispatchQueue? = nil, options: CentralManagerOptions = CentralManagerOptions(),
                appID: String? = nil, socketPath: String? = nil) throws(BerylError) {
        session = try ManagerSession(label: "central", delegate: delegate, queue: queue, appID: appID, socketPath: socketPath)
        session.start(restoreIdentifier: options.restoreIdentifier, role: .central, events: { [weak self] in self?.handle($0) }) { [weak self] state, restored, again in
            guard let self else { return }
            if let restored {
                // After managerd restarted, the peripherals take back their links and databases quietly: the app
                // was not relaunched, so there is nothing to restore it from.
                let restoredState = self.restoredState(restored.central)
                if restoredState.isScanning { self.shared.withLock { $0.isScanning = true } }
                if !again { self.notify { $0.centralManager(self, willRestoreState: restoredState) } }
            }
            self.update(state)
        }
    }

    /// Ends the manager for good (Core Bluetooth: the user force-quit the app): what managerd preserved for its
    /// restore identifier is discarded, and its scan, connections, services and advertising stop.
    public func invalidate() {
        channel.invalidate(manager: managerID)
    }

    /// Answers pairing prompts (passkeys, number comparison) for links this manager uses.
    public var pairingDelegate: PairingDelegate? {
        get { session.pairingDelegate }
        set { session.pairingDelegate = newValue }
    }

    public var delegate: CentralManagerDelegate? {
        get { session.delegate as? CentralManagerDelegate }
        set { session.delegate = newValue }
    }

    public var state: ManagerState { session.reportedState }
    public var isScanning: Bool { shared.withLock { $0.isScanning } }

    /// Receives API misuse that has no delegate callback (a scan before poweredOn, a write the characteristic does
    /// not allow); by default it is logged to standard error, as Core Bluetooth logs "API MISUSE".
    public var apiMisuseHandler: (@Sendable (BerylError) -> Void)? {
        get { misuse.current }
        set { misuse.current = newValue }
    }

    private func notify(_ body: @escaping @Sendable (CentralManagerDelegate) -> Void) {
        guard let delegate = delegate else { return }
        delegateQueue.async { body(delegate) }
    }

    private func update(_ newState: ManagerState) {
        if newState != .poweredOn { shared.withLock { $0.isScanning = false } }
        session.changeState(newState) { ($0 as? CentralManagerDelegate)?.centralManagerDidUpdateState(self) }
    }

    /// managerd is gone: resetting, every link lost as far as the app knows, until a new session says otherwise.
    private func sessionLost() {
        let known = shared.withLock { Array($0.peripherals.values) }
        for peripheral in known { peripheral.setState(.disconnected) }
        update(.resetting)
        session.reconnect()
    }

    func peripheral(_ identifier: String, name: String? = nil) -> Peripheral {
        shared.withLock { state in
            if let known = state.peripherals[identifier] {
                if let name, !name.isEmpty { known.setName(name) }
                return known
            }
            let made = Peripheral(identifier: identifier, name: name, central: self)
            state.peripherals[identifier] = made
            return made
        }
    }

    // MARK: Scanning

    public func scanForPeripherals(withServices services: [BluetoothUUID]?, options: ScanOptions = ScanOptions()) {
        shared.withLock { $0.isScanning = true }
        channel.request(.manager {
            $0.startScan = .with {
                $0.manager = managerID
                $0.serviceUuids = (services ?? []).map(\.description)
                $0.allowDuplicates = options.allowDuplicates
                $0.solicitedServiceUuids = options.solicitedServiceUUIDs.map(\.description)
            }
        }) { [weak self] result in
            guard let self, case .failure(let error) = result else { return }
            self.shared.withLock { $0.isScanning = false }
            self.misuse.report(error)
            let streams = self.shared.withLock { state in
                defer { state.scanStreams.removeAll() }
                return Array(state.scanStreams.values)
            }
            for stream in streams { stream.finish() }
        }
    }

    public func stopScan() {
        shared.withLock { $0.isScanning = false }
        channel.request(.manager { $0.stopScan.manager = managerID })
    }

    /// The async face: discoveries until the stream is dropped (which stops the scan).
    public func scan(withServices services: [BluetoothUUID]?, options: ScanOptions = ScanOptions()) -> AsyncStream<Discovery> {
        let key = UUID()
        let (stream, continuation) = AsyncStream<Discovery>.makeStream()
        shared.withLock { $0.scanStreams[key] = continuation }
        continuation.onTermination = { [weak self] _ in
            guard let self else { return }
            let last = self.shared.withLock { state in
                state.scanStreams[key] = nil
                return state.scanStreams.isEmpty
            }
            if last { self.stopScan() }
        }
        scanForPeripherals(withServices: services, options: options)
        return stream
    }

    // MARK: Connections

    /// Never times out (Core Bluetooth's rule): managerd keeps trying until the peripheral connects or the app cancels.
    public func connect(_ peripheral: Peripheral, options: ConnectOptions = ConnectOptions()) {
        peripheral.setState(.connecting)
        channel.request(.manager {
            $0.connect = .with {
                $0.manager = managerID
                $0.peripheral = peripheral.identifierString
                $0.notifyOnConnection = options.notifyOnConnection
                $0.notifyOnDisconnection = options.notifyOnDisconnection
                $0.notifyOnNotification = options.notifyOnNotification
            }
        }) { [weak self] result in
            guard let self, case .failure(let error) = result else { return }
            peripheral.setState(.disconnected)
            self.notify { $0.centralManager(self, didFailToConnect: peripheral, error: error) }
            self.resumeConnectWaiters(peripheral.identifierString, with: error)
        }
    }

    public func connect(_ peripheral: Peripheral, options: ConnectOptions = ConnectOptions()) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            shared.withLock { $0.connectWaiters[peripheral.identifierString, default: []].append(continuation) }
            connect(peripheral, options: options)
        }
    }

    private func resumeConnectWaiters(_ identifier: String, with error: BerylError?) {
        let waiters = shared.withLock { $0.connectWaiters.removeValue(forKey: identifier) ?? [] }
        for waiter in waiters {
            if let error { waiter.resume(throwing: error) } else { waiter.resume() }
        }
    }

    public func cancelPeripheralConnection(_ peripheral: Peripheral) {
        peripheral.setState(.disconnecting)
        channel.request(.manager { $0.cancelConnection = .with { $0.manager = managerID; $0.peripheral = peripheral.identifierString } })
    }

    /// Peripherals this stack has seen, by the identifiers it gave them (they survive restarts).
    public func retrievePeripherals(withIdentifiers identifiers: [UUID]) -> [Peripheral] {
        guard !identifiers.isEmpty else { return [] }
        let result = channel.call(.manager { $0.retrievePeripherals.identifiers = identifiers.map(\.uuidString) })
        guard case .success(let response) = result else { return [] }
        return response.manager.peripherals.peripherals.map { peripheral($0.identifier, name: $0.name) }
    }

    /// Beryl's addition for labs: a peripheral by its address ("AA:BB:CC:DD:EE:FF", or ".../random"), under the
    /// identifier the stack keeps for it (a new one for an address never heard), so that it can be connected to
    /// without a scan. Nil for an address that does not parse.
    public func retrievePeripheral(address: String) -> Peripheral? {
        let result = channel.call(.manager { $0.retrievePeripherals.addresses = [address] })
        guard case .success(let response) = result, let found = response.manager.peripherals.peripherals.first else { return nil }
        return peripheral(found.identifier, name: found.name)
    }

    public func retrieveConnectedPeripherals(withServices services: [BluetoothUUID]) -> [Peripheral] {
        let result = channel.call(.manager { $0.retrieveConnected.serviceUuids = services.map(\.description) })
        guard case .success(let response) = result else { return [] }
        return response.manager.peripherals.peripherals.map { peripheral($0.identifier, name: $0.name) }
    }

    // MARK: Events

    private func handle(_ event: Event) {
        guard case .manager(let managed)? = event.kind else {
            if event.kind == nil { sessionLost() }
            return
        }
        if channel.deliverPairing(managed, to: pairingDelegate, on: delegateQueue) { return }
        switch managed.kind {
        case .stateChanged(let newState)?:
            update(ManagerState(newState))
        case .discovered(let discovery)?:
            let found = peripheral(discovery.peripheral.identifier, name: discovery.peripheral.name)
            let advertisement = AdvertisementData(discovery.peripheral.advertisement)
            let rssi = Int(discovery.peripheral.rssi)
            notify { $0.centralManager(self, didDiscover: found, advertisementData: advertisement, rssi: rssi) }
            let streams = shared.withLock { Array($0.scanStreams.values) }
            for stream in streams { stream.yield(Discovery(peripheral: found, advertisementData: advertisement, rssi: rssi)) }
        case .connected(let connected)?:
            let found = peripheral(connected.peripheral)
            found.setState(.connected)
            notify { $0.centralManager(self, didConnect: found) }
            resumeConnectWaiters(connected.peripheral, with: nil)
        case .disconnected(let disconnected)?:
            let found = peripheral(disconnected.peripheral)
            found.disconnected()
            let error: BerylError? = disconnected.reason == 0 || disconnected.reason == 0x16 ? nil
                : .failed("the link went down (HCI reason 0x\(String(disconnected.reason, radix: 16)))")
            notify { $0.centralManager(self, didDisconnectPeripheral: found, error: error) }
        case .notification(let notification)?:
            peripheral(notification.peripheral).valueArrived(handle: notification.handle, value: notification.value)
        case .servicesChanged(let change)?:
            peripheral(change.peripheral).servicesChanged(change.change)
        case .readyToWrite(let ready)?:
            peripheral(ready.peripheral).readyToWrite()
        default:
            break
        }
    }
}
