import BerylWire
import Dispatch
import Foundation
import Synchronization

/// Core Bluetooth's CBCentralManagerDelegate. Called on the queue given to the manager (the main queue for nil; see
/// Confinement.swift). Every method has Core Bluetooth's exact signature; all but the state update are optional.
public protocol CentralManagerDelegate: AnyObject {
    func centralManagerDidUpdateState(_ central: CentralManager)
    /// Before the first state update of a manager managerd kept while the app was not running; the dictionary has
    /// `CentralManagerRestoredStatePeripheralsKey`, `…ScanServicesKey` and `…ScanOptionsKey`.
    func centralManager(_ central: CentralManager, willRestoreState dict: [String: Any])
    func centralManager(_ central: CentralManager, didDiscover peripheral: Peripheral, advertisementData: [String: Any], rssi RSSI: NSNumber)
    func centralManager(_ central: CentralManager, didConnect peripheral: Peripheral)
    func centralManager(_ central: CentralManager, didFailToConnect peripheral: Peripheral, error: Error?)
    func centralManager(_ central: CentralManager, didDisconnectPeripheral peripheral: Peripheral, error: Error?)
    /// A link to a peripheral matching `registerForConnectionEvents(options:)` came up or went.
    func centralManager(_ central: CentralManager, connectionEventDidOccur event: ConnectionEvent, for peripheral: Peripheral)
}

public extension CentralManagerDelegate {
    func centralManager(_ central: CentralManager, willRestoreState dict: [String: Any]) {}
    func centralManager(_ central: CentralManager, didDiscover peripheral: Peripheral, advertisementData: [String: Any], rssi RSSI: NSNumber) {}
    func centralManager(_ central: CentralManager, didConnect peripheral: Peripheral) {}
    func centralManager(_ central: CentralManager, didFailToConnect peripheral: Peripheral, error: Error?) {}
    func centralManager(_ central: CentralManager, didDisconnectPeripheral peripheral: Peripheral, error: Error?) {}
    func centralManager(_ central: CentralManager, connectionEventDidOccur event: ConnectionEvent, for peripheral: Peripheral) {}
}

/// Typed scan options, beside Core Bluetooth's dictionary.
public struct ScanOptions: Sendable {
    public var allowDuplicates = false
    public var solicitedServiceUUIDs: [BluetoothUUID] = []
    public init(allowDuplicates: Bool = false, solicitedServiceUUIDs: [BluetoothUUID] = []) {
        self.allowDuplicates = allowDuplicates
        self.solicitedServiceUUIDs = solicitedServiceUUIDs
    }

    public init(_ dictionary: [String: Any]?) {
        let options = dictionary ?? [:]
        self.init(allowDuplicates: options.flag(CentralManagerScanOptionAllowDuplicatesKey),
                  solicitedServiceUUIDs: options.uuids(CentralManagerScanOptionSolicitedServiceUUIDsKey))
    }

    public var dictionary: [String: Any] {
        var options: [String: Any] = [CentralManagerScanOptionAllowDuplicatesKey: NSNumber(value: allowDuplicates)]
        if !solicitedServiceUUIDs.isEmpty { options[CentralManagerScanOptionSolicitedServiceUUIDsKey] = solicitedServiceUUIDs }
        return options
    }
}

/// Typed connect options, beside Core Bluetooth's dictionary.
public struct ConnectOptions: Sendable {
    public var notifyOnConnection = false
    public var notifyOnDisconnection = false
    public var notifyOnNotification = false
    public init(notifyOnConnection: Bool = false, notifyOnDisconnection: Bool = false, notifyOnNotification: Bool = false) {
        self.notifyOnConnection = notifyOnConnection
        self.notifyOnDisconnection = notifyOnDisconnection
        self.notifyOnNotification = notifyOnNotification
    }

    public init(_ dictionary: [String: Any]?) {
        let options = dictionary ?? [:]
        self.init(notifyOnConnection: options.flag(ConnectPeripheralOptionNotifyOnConnectionKey),
                  notifyOnDisconnection: options.flag(ConnectPeripheralOptionNotifyOnDisconnectionKey),
                  notifyOnNotification: options.flag(ConnectPeripheralOptionNotifyOnNotificationKey))
    }
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

    /// Core Bluetooth's initialiser: never fails. A stack that is missing or refuses this user is reported through
    /// `state` (poweredOff or unauthorized, with `stateReason`), and the manager attaches by itself once it is up.
    /// - Parameters:
    ///   - queue: where every delegate callback runs; the main queue when nil.
    ///   - options: `CentralManagerOptionRestoreIdentifierKey` opts into state preservation and restoration.
    ///   - appID: Beryl's: the app's identifier (its manifest's id, for background modes and restoration); by default
    ///     `$BERYL_APP_ID`, which managerd sets when it launches the app.
    ///   - socketPath: Beryl's: managerd's socket; `$BERYL_RUNTIME_DIR/managerd.sock` (or /run/beryl) by default.
    public convenience init(delegate: CentralManagerDelegate?, queue: DispatchQueue?, options: [String: Any]? = nil,
                            appID: String? = nil, socketPath: String? = nil) {
        self.init(delegate: delegate, queue: queue, restoreIdentifier: options?[CentralManagerOptionRestoreIdentifierKey] as? String,
                  appID: appID, socketPath: socketPath)
    }

    /// The typed options, beside Core Bluetooth's dictionary.
    public convenience init(delegate: CentralManagerDelegate?, queue: DispatchQueue?, options: CentralManagerOptions,
                            appID: String? = nil, socketPath: String? = nil) {
        self.init(delegate: delegate, queue: queue, restoreIdentifier: options.restoreIdentifier, appID: appID, socketPath: socketPath)
    }

    public convenience init() {
        self.init(delegate: nil, queue: nil)
    }

    private init(delegate: CentralManagerDelegate?, queue: DispatchQueue?, restoreIdentifier: String?, appID: String?, socketPath: String?) {
        session = ManagerSession(label: "central", delegate: delegate, queue: queue, appID: appID, socketPath: socketPath)
        session.start(restoreIdentifier: restoreIdentifier, role: .central, events: { [weak self] in self?.handle($0) }) { [weak self] state, restored, again in
            guard let self else { return }
            // Adopted with its data channel: the manager kept its links and subscriptions, and managerd has them again.
            if again?.resumed == true { return self.update(state) }
            // The data channel kept through managerd's restart was not adopted: the peripherals went after all.
            if again != nil { self.peripheralsLost() }
            if let restored {
                // After managerd restarted, the peripherals take back their links and databases quietly: the app
                // was not relaunched, so there is nothing to restore it from.
                let restoredState = self.restoredState(restored.central)
                if restoredState.isScanning { self.shared.withLock { $0.isScanning = true } }
                if again == nil {
                    let dictionary = restoredState.dictionary
                    self.notify { $0.centralManager(self, willRestoreState: dictionary) }
                }
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
        get { session.pairingSlot.object as? PairingDelegate }
        set { session.pairingSlot.set(newValue) }
    }

    public var delegate: CentralManagerDelegate? {
        get { session.delegateSlot.object as? CentralManagerDelegate }
        set { session.delegateSlot.set(newValue) }
    }

    public var state: ManagerState { session.reportedState }
    /// Beryl's: why the state is not poweredOn (no stack at the socket, a refused app id), when known.
    public var stateReason: String? { session.stateReason }
    public var isScanning: Bool { shared.withLock { $0.isScanning } }

    /// Receives API misuse that has no delegate callback (a scan before poweredOn, a write the characteristic does
    /// not allow); by default it is logged to standard error, as Core Bluetooth logs "API MISUSE".
    public var apiMisuseHandler: (@Sendable (BerylError) -> Void)? {
        get { misuse.current }
        set { misuse.current = newValue }
    }

    private func notify(_ body: sending @escaping (CentralManagerDelegate) -> Void) {
        session.notify(CentralManagerDelegate.self, body)
    }

    private func update(_ newState: ManagerState) {
        if newState != .poweredOn {
            let known = shared.withLock { state in
                state.isScanning = false
                return Array(state.peripherals.values)
            }
            // managerd has attd forget this app's write counts when the stack leaves poweredOn: the queues follow.
            for peripheral in known { peripheral.writesGone() }
        }
        session.changeState(newState, CentralManagerDelegate.self) { $0.centralManagerDidUpdateState(self) }
    }

    /// managerd is gone: resetting, every link lost as far as the app knows, until a new session says otherwise.
    /// managerd went: the peripherals went with it, as with bluetoothd — unless the data channel keeps the app going
    /// while managerd restarts.
    private func sessionLost() {
        if !session.managerdLost() { peripheralsLost() }
    }

    private func peripheralsLost() {
        let known = shared.withLock { Array($0.peripherals.values) }
        for peripheral in known {
            peripheral.setState(.disconnected)
            peripheral.writesGone()
        }
        update(.resetting)
    }

    func peripheral(_ identifier: String, name: String? = nil) -> Peripheral {
        let (peripheral, renamed) = shared.withLock { state -> (Peripheral, Bool) in
            if let known = state.peripherals[identifier] { return (known, name.map { !$0.isEmpty && $0 != known.name } ?? false) }
            let made = Peripheral(identifier: identifier, name: name.flatMap { $0.isEmpty ? nil : $0 }, central: self)
            state.peripherals[identifier] = made
            return (made, false)
        }
        if renamed, let name { peripheral.setName(name) }
        return peripheral
    }

    // MARK: Scanning

    public func scanForPeripherals(withServices serviceUUIDs: [BluetoothUUID]?, options: [String: Any]? = nil) {
        scanForPeripherals(withServices: serviceUUIDs, scanOptions: ScanOptions(options))
    }

    /// The typed options, beside Core Bluetooth's dictionary.
    public func scanForPeripherals(withServices serviceUUIDs: [BluetoothUUID]?, scanOptions options: ScanOptions) {
        shared.withLock { $0.isScanning = true }
        channel.request(.manager {
            $0.startScan = .with {
                $0.manager = managerID
                $0.serviceUuids = (serviceUUIDs ?? []).map(\.description)
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
        scanForPeripherals(withServices: services, scanOptions: options)
        return stream
    }

    // MARK: Connections

    /// Never times out (Core Bluetooth's rule): managerd keeps trying until the peripheral connects or the app cancels.
    public func connect(_ peripheral: Peripheral, options: [String: Any]? = nil) {
        connect(peripheral, connectOptions: ConnectOptions(options))
    }

    /// The typed options, beside Core Bluetooth's dictionary.
    public func connect(_ peripheral: Peripheral, connectOptions options: ConnectOptions) {
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
            guard let self, case .failure(let failure) = result else { return }
            peripheral.setState(.disconnected)
            let error = failure.coreBluetoothError
            self.notify { $0.centralManager(self, didFailToConnect: peripheral, error: error) }
            self.resumeConnectWaiters(peripheral.identifierString, with: error)
        }
    }

    /// The async face of connect: returns once the link is up.
    public func connected(to peripheral: Peripheral, options: ConnectOptions = ConnectOptions()) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            shared.withLock { $0.connectWaiters[peripheral.identifierString, default: []].append(continuation) }
            connect(peripheral, connectOptions: options)
        }
    }

    private func resumeConnectWaiters(_ identifier: String, with error: (any Error)?) {
        let waiters = shared.withLock { $0.connectWaiters.removeValue(forKey: identifier) ?? [] }
        for waiter in waiters {
            if let error { waiter.resume(throwing: error) } else { waiter.resume() }
        }
    }

    public func cancelPeripheralConnection(_ peripheral: Peripheral) {
        peripheral.setState(.disconnecting)
        channel.request(.manager { $0.cancelConnection = .with { $0.manager = managerID; $0.peripheral = peripheral.identifierString } })
    }

    /// Peripherals this stack has seen, by the identifiers it gave them (they survive restarts). With no stack to
    /// ask, the app is told (misuse handler) and gets none.
    public func retrievePeripherals(withIdentifiers identifiers: [UUID]) -> [Peripheral] {
        guard !identifiers.isEmpty else { return [] }
        return peripherals(from: channel.call(.manager { $0.retrievePeripherals.identifiers = identifiers.map(\.uuidString) }), asked: "retrievePeripherals(withIdentifiers:)")
    }

    /// Beryl's addition for labs: a peripheral by its address ("AA:BB:CC:DD:EE:FF", or ".../random"), under the
    /// identifier the stack keeps for it (a new one for an address never heard), so that it can be connected to
    /// without a scan. Nil for an address that does not parse.
    public func retrievePeripheral(address: String) -> Peripheral? {
        peripherals(from: channel.call(.manager { $0.retrievePeripherals.addresses = [address] }), asked: "retrievePeripheral(address:)").first
    }

    public func retrieveConnectedPeripherals(withServices serviceUUIDs: [BluetoothUUID]) -> [Peripheral] {
        peripherals(from: channel.call(.manager { $0.retrieveConnected.serviceUuids = serviceUUIDs.map(\.description) }),
                    asked: "retrieveConnectedPeripherals(withServices:)")
    }

    private func peripherals(from result: Result<Response, BerylError>, asked call: String) -> [Peripheral] {
        switch result {
        case .success(let response):
            return response.manager.peripherals.peripherals.map { peripheral($0.identifier, name: $0.name) }
        case .failure(let error):
            misuse.report(.failed("\(call) failed: \(error)"))
            return []
        }
    }

    // MARK: Events

    private func handle(_ event: Event) {
        guard case .manager(let managed)? = event.kind else {
            if event.kind == nil { sessionLost() }
            return
        }
        if channel.deliverPairing(managed, to: session.pairingSlot, on: delegateQueue) { return }
        switch managed.kind {
        case .stateChanged(let newState)?:
            update(ManagerState(newState))
        case .discovered(let discovery)?:
            let found = peripheral(discovery.peripheral.identifier, name: discovery.peripheral.name)
            let advertisement = AdvertisementData(discovery.peripheral.advertisement)
            let rssi = Int(discovery.peripheral.rssi)
            let dictionary = advertisement.dictionary
            notify { $0.centralManager(self, didDiscover: found, advertisementData: dictionary, rssi: NSNumber(value: rssi)) }
            let streams = shared.withLock { Array($0.scanStreams.values) }
            for stream in streams { stream.yield(Discovery(peripheral: found, advertisementData: advertisement, rssi: rssi)) }
        case .connected(let connected)?:
            let found = peripheral(connected.peripheral)
            found.setState(.connected)
            notify { $0.centralManager(self, didConnect: found) }
            found.readyToWriteIfOwed()
            resumeConnectWaiters(connected.peripheral, with: nil)
        case .disconnected(let disconnected)?:
            let found = peripheral(disconnected.peripheral)
            found.disconnected()
            let error = BluetoothError.Code(disconnectionReason: disconnected.reason).map {
                BluetoothError($0, message: "the link went down (HCI reason 0x\(String(disconnected.reason, radix: 16)))")
            }
            notify { $0.centralManager(self, didDisconnectPeripheral: found, error: error) }
        case .notification(let notification)?:
            peripheral(notification.peripheral).valueArrived(handle: notification.handle, value: notification.value)
        case .servicesChanged(let change)?:
            peripheral(change.peripheral).servicesChanged(change.change)
        case .readyToWrite(let ready)?:
            peripheral(ready.peripheral).readyToWrite(count: ready.count)
        case .connectionEvent(let occurred)?:
            let found = peripheral(occurred.peripheral.identifier, name: occurred.peripheral.name)
            let event: ConnectionEvent = occurred.kind == .peerConnected ? .peerConnected : .peerDisconnected
            notify { $0.centralManager(self, connectionEventDidOccur: event, for: found) }
        default:
            break
        }
    }
}

/// One scan result, for the async face.
public struct Discovery: Sendable {
    public let peripheral: Peripheral
    public let advertisementData: AdvertisementData
    public let rssi: Int
}
