import BerylCore
import BerylGAP
import BerylManager
import BerylStore
import BerylWire
import FoundationEssentials
import Glibc

// managerd's proto ⇄ core translation for its app-facing values: the app's GATT operations as attd's requests,
// lifecycle states, launch failures, alerts, the lab's security. Stateless, so each is a round-trip test away.

extension OpenBearer {
    public init(_ bearer: Beryl_Ipc_V1_Bearer) {
        self.init(link: UInt16(truncatingIfNeeded: bearer.connectionHandle), mtu: UInt16(truncatingIfNeeded: bearer.attMtu),
                  peer: DeviceAddress(bearer.peerAddress), isCentral: bearer.central)
    }
}

extension GattAsk {
    /// What managerd's bookkeeping looks at in an app's operation: a subscription to a value ATT can name, or nothing.
    public init(_ operation: Beryl_Ipc_V1_GattOperation) {
        guard case .setNotify(let change)? = operation.kind, let valueHandle = UInt16(exactly: change.valueHandle) else {
            self = .other
            return
        }
        self = .setNotify(enable: change.enable, valueHandle: valueHandle, cccdHandle: UInt16(exactly: change.cccdHandle))
    }
}

extension Beryl_Ipc_V1_AttRequest {
    /// The app's operation as attd's request on the link (attd names links by connection handle, apps by identifier);
    /// nil when the operation names no kind.
    /// `session`: the app's, for attd's per-sender refusals of writes without response.
    public init?(_ operation: Beryl_Ipc_V1_GattOperation, connectionHandle handle: UInt32, session: UInt64) {
        switch operation.kind {
        case .discover(let discover)?:
            self = .with { $0.gattDiscover = .with {
                $0.connectionHandle = handle
                $0.serviceUuids = discover.serviceUuids
                $0.characteristicUuids = discover.characteristicUuids
                $0.startHandle = discover.startHandle
                $0.endHandle = discover.endHandle
                $0.depth = discover.depth
            } }
        // The app's own message, with what attd needs set and nothing of the app's word for link or sender kept.
        case .read(var read)?:
            read.connectionHandle = handle
            read.peripheral = ""
            self = .with { $0.gattRead = read }
        case .write(var write)?:
            write.connectionHandle = handle
            write.peripheral = ""
            write.onBehalfOf = session
            self = .with { $0.gattWrite = write }
        case .setNotify(var change)?:
            change.connectionHandle = handle
            self = .with { $0.gattSubscribe = change }
        case .reliableWrite(let writes)?:
            self = .with { $0.gattReliableWrite = .with { $0.connectionHandle = handle; $0.writes = writes.writes } }
        case nil:
            return nil
        }
    }
}

/// attd's answer to an item an app sends without waiting for the last one's answer (a Notify, a write without
/// response), as the library's ordered queue takes it; nil for an error managerd relays as it is.
public enum OrderedSendAnswer: Equatable, Sendable {
    case sent
    /// BUSY: the transmit queue is full; a ready event follows.
    case queueFull
    /// CANCELLED to an ordered sender: sent before its latest ready event, so it goes again at once.
    case sendAgain

    public init?(_ result: Result<Beryl_Ipc_V1_Response, IPCClientError>, ordered: Bool) {
        switch result {
        case .success: self = .sent
        case .failure(.remote(.busy, _, _, _)): self = .queueFull
        case .failure(.remote(.cancelled, _, _, _)) where ordered: self = .sendAgain
        case .failure: return nil
        }
    }
}

extension Beryl_Ipc_V1_Response {
    /// attd's answer to an app's GATT operation, as the app's: what discovery found, the value read, or done.
    public init(gattAnswer answer: Beryl_Ipc_V1_AttResponse) {
        self.init()
        switch answer.kind {
        case .gattDatabase(let database)?: manager.gatt.database = database
        case .gattValue(let value)?: manager.gatt.value = value.value
        default: manager.gatt = .init()
        }
    }
}

extension Beryl_Ipc_V1_UpdateResult {
    public init(_ answer: OrderedSendAnswer) {
        self.init()
        sent = answer == .sent
        sendAgain = answer == .sendAgain
    }
}

extension Beryl_Ipc_V1_WriteCommandResult {
    public init(_ answer: OrderedSendAnswer) {
        self.init()
        sent = answer == .sent
        sendAgain = answer == .sendAgain
    }
}

extension Beryl_Ipc_V1_ServicePublished {
    /// The handles attd gave the service; nil when they are not a 16-bit range (Core Vol 3 Part F §3.2.2).
    public var handles: ClosedRange<UInt16>? {
        guard let start = UInt16(exactly: startHandle), let end = UInt16(exactly: endHandle), start <= end else { return nil }
        return start...end
    }
}

extension LifecycleState {
    /// The states an app can be put in; not running is what its process exiting makes it, so it is nil here.
    public init?(settable state: Beryl_Ipc_V1_AppLifecycle) {
        switch state {
        case .foreground: self = .foreground
        case .background: self = .background
        case .suspended: self = .suspended
        case .notRunning, .UNRECOGNIZED: return nil
        }
    }

    public var wire: Beryl_Ipc_V1_AppLifecycle {
        switch self {
        case .foreground: .foreground
        case .background: .background
        case .suspended: .suspended
        case .notRunning: .notRunning
        }
    }
}

extension Beryl_Ipc_V1_AppInfo {
    public init(_ status: AppStatus) {
        self.init()
        id = status.id
        if let manifest = status.manifest {
            self.manifest = manifest.file
            user = manifest.user
            backgroundModes = manifest.backgroundModes.map(\.rawValue).sorted()
            launchable = manifest.launch != nil
        }
        state = status.state.wire
        pids = status.pids
        preservedCentrals = status.preservedCentrals
        preservedPeripherals = status.preservedPeripherals
        queuedEvents = UInt32(clamping: status.queuedEvents)
        launches = UInt32(clamping: status.launches)
        lastLaunchError = status.lastLaunchFailure?.description ?? ""
        lastLaunchFailure = .init(status.lastLaunchFailure)
        lastLaunchUnrestored = status.lastLaunchFailure?.unrestored ?? []
        restorations = UInt32(clamping: status.restorations)
        launchesEndedUnrestored = UInt32(clamping: status.relaunches.endedUnrestored)
        launchesBackedOff = UInt32(clamping: status.relaunches.backedOff)
        launchesBeforeReaped = UInt32(clamping: status.relaunches.launchedBeforeReaped)
        wakes = UInt32(clamping: status.wakes.begun)
        wakesEndedIdle = UInt32(clamping: status.wakes.endedIdle)
        wakesOverran = UInt32(clamping: status.wakes.overran)
    }
}

extension AppLifecycle.EventClass {
    /// How an event for a suspended app counts: news and prompts wake or wait differently from work (AppLifecycle).
    public init(_ event: Beryl_Ipc_V1_ManagerEvent) {
        switch event.kind {
        case .stateChanged?, .pairingFinished?: self = .news
        // The library waits for these: its update queue for ReadyToUpdate (values it sent stay refused until then), a
        // peripheral's canSendWriteWithoutResponse for ReadyToWrite. Kept, so an app back from suspension can send.
        case .readyToUpdate?, .readyToWrite?: self = .news
        case .pairingPrompt?: self = .prompt
        default: self = .work
        }
    }
}

extension Beryl_Ipc_V1_ManagerRequest.OneOf_Kind {
    /// A manager's work is an app's: its session says Hello first (who it is, checked against its manifest, and its
    /// lifecycle), and a lab session, which never does, gets none of it. Questions of the stack (`beryl peripherals`,
    /// capabilities), `beryl app`, alerts and the lab need no Hello.
    public var needsHello: Bool {
        switch self {
        case .startScan, .stopScan, .connect, .cancelConnection, .gatt, .readRssi, .maximumWriteLength, .addService, .removeService,
             .removeAllServices, .startAdvertising, .stopAdvertising, .updateValue, .respond, .answerPairing, .setConnectionLatency,
             .registerConnectionEvents, .appIdle, .invalidate, .renewDataChannel:
            true
        case .hello, .retrievePeripherals, .retrieveConnected, .getCapabilities, .setAppState, .listApps, .launchApp, .stopApp,
             .subscribeAlerts, .labOpen, .labAdvertise, .labStopAdvertising, .labScan, .labStopScan, .labConnect, .labCancelConnect,
             .labDisconnect, .labGetLinks, .labFactoryReset, .labGetInfo, .labSecure, .labPairingAnswer, .labListBonds, .labRemoveBond:
            false
        }
    }

    /// Core Bluetooth's API misuse rule: a manager that is not powered on takes nothing but questions of its state.
    /// Let through: retrieving peripherals, answering a request already delivered, and clearing a manager's services
    /// and advertising (the library does that for the app after a reset, often before the stack is on again; refused,
    /// it would leave the record's copies to be published beside the ones the app adds at poweredOn); and what is not
    /// a manager's (Hello, capabilities, idleness, `beryl app`, alerts, the lab).
    public var needsPoweredOn: Bool {
        switch self {
        case .startScan, .stopScan, .connect, .cancelConnection, .retrieveConnected, .gatt, .readRssi, .maximumWriteLength, .addService,
             .removeService, .startAdvertising, .updateValue, .answerPairing, .setConnectionLatency, .registerConnectionEvents:
            true
        case .retrievePeripherals, .respond, .removeAllServices, .stopAdvertising, .hello, .invalidate, .renewDataChannel, .setAppState, .listApps, .launchApp,
             .stopApp, .subscribeAlerts, .appIdle, .getCapabilities, .labOpen, .labAdvertise, .labStopAdvertising, .labScan, .labStopScan,
             .labConnect, .labCancelConnect, .labDisconnect, .labGetLinks, .labFactoryReset, .labGetInfo, .labSecure, .labPairingAnswer,
             .labListBonds, .labRemoveBond:
            false
        }
    }
}

extension Beryl_Ipc_V1_ManagerEvent {
    /// Whether the event waits, held, for a preserved manager whose app is away (and launches the app): work does;
    /// the state (the restored manager hears the current one), pairing (a prompt cannot wait), flow control, and the
    /// start of advertising (the record's advertising is started again by itself) do not.
    public var waitsForAbsentApp: Bool {
        guard let kind, AppLifecycle.EventClass(self) == .work else { return false }
        if case .advertisingStarted = kind { return false }
        return true
    }

    /// What the event supersedes: an app not taking events hears only the latest discovery of each peripheral, one
    /// word that it may write without response to each again, and the latest ReadyToUpdate.
    public var heldKey: HeldKey? {
        switch kind {
        case .discovered(let discovery)?: .discovery(peripheral: discovery.peripheral.identifier)
        case .readyToWrite(let ready)?: .readyToWrite(peripheral: ready.peripheral)
        case .readyToUpdate?: .readyToUpdate
        default: nil
        }
    }
    /// An event held for a preserved manager goes to the manager its returning app makes (the first of its session).
    public mutating func retarget(manager: UInt32) {
        switch kind {
        case .discovered?: discovered.manager = manager
        case .connected?: connected.manager = manager
        case .disconnected?: disconnected.manager = manager
        case .readRequest?: readRequest.manager = manager
        case .writeRequest?: writeRequest.manager = manager
        case .subscription?: subscription.manager = manager
        case .advertisingStarted?: advertisingStarted.manager = manager
        case .connectionEvent?: connectionEvent.manager = manager
        case .stateChanged?, .notification?, .servicesChanged?, .readyToWrite?, .readyToUpdate?, .pairingPrompt?, .pairingFinished?, .alert?, .lab?, nil: break
        }
    }

    public init(alert kind: AlertKind, appID: String, message: String, peripheral: String) {
        self.init()
        alert = .with { $0.appID = appID; $0.message = message; $0.kind = .init(kind); $0.peripheral = peripheral }
    }
}

extension Beryl_Ipc_V1_LaunchFailureKind {
    public init(_ failure: LaunchFailure?) {
        switch failure {
        case nil: self = .none
        case .couldNotStart?: self = .couldNotStart
        case .didNotRestore?: self = .didNotRestore
        case .exitedWithoutRestoring?: self = .exitedWithoutRestoring
        }
    }
}

extension AlertKind {
    /// The alert an app's event could raise, and the peripheral it is about; nil for events no option alerts of.
    public static func candidate(for event: Beryl_Ipc_V1_ManagerEvent) -> (kind: AlertKind, peripheral: String)? {
        switch event.kind {
        case .connected(let connected)?: (.connection, connected.peripheral)
        case .disconnected(let disconnected)?: (.disconnection, disconnected.peripheral)
        case .notification(let notification)?: (.notification, notification.peripheral)
        default: nil
        }
    }
}

extension PreservedState.ConnectOptions {
    public init(_ connect: Beryl_Ipc_V1_Connect) {
        self.init(notifyOnConnection: connect.notifyOnConnection, notifyOnDisconnection: connect.notifyOnDisconnection,
                  notifyOnNotification: connect.notifyOnNotification)
    }
}

extension Beryl_Ipc_V1_AlertKind {
    public init(_ kind: AlertKind) {
        switch kind {
        case .connection: self = .connection
        case .disconnection: self = .disconnection
        case .notification: self = .notification
        }
    }
}

extension LabSecurity {
    public init(_ paired: Beryl_Ipc_V1_Paired) {
        self.init(encrypted: paired.encrypted, authenticated: paired.authenticated, bonded: paired.bonded,
                  secureConnections: paired.secureConnections, keySize: UInt8(truncatingIfNeeded: paired.keySize))
    }

    public var wire: Beryl_Ipc_V1_LabSecurityState {
        .with {
            $0.encrypted = encrypted
            $0.authenticated = authenticated
            $0.bonded = bonded
            $0.secureConnections = secureConnections
            $0.keySize = UInt32(keySize)
        }
    }
}

extension LabSecurityOutcome {
    public func wire(handle: UInt16) -> Beryl_Ipc_V1_LabSecurityOutcome {
        .with {
            $0.handle = UInt32(handle)
            switch self {
            case .secured(let state): $0.secured = state.wire
            case .pairingFailed(let reason, let remote): $0.pairingFailed = .with { $0.reason = UInt32(reason); $0.remote = remote }
            case .encryptionFailed(let status): $0.encryptionFailed = UInt32(status)
            case .linkClosed(let reason): $0.linkClosed = UInt32(reason)
            }
        }
    }
}

extension Beryl_Ipc_V1_AdvertisementInfo {
    /// What a device advertised, as an app's didDiscover hears it (Core Bluetooth's advertisement data keys).
    public init(_ advertisement: AdvertisementData) {
        self = .with {
            $0.localName = advertisement.localName ?? ""
            $0.serviceUuids = advertisement.serviceUUIDs.map(\.description)
            $0.overflowServiceUuids = advertisement.overflowServiceUUIDs.map(\.description)
            $0.solicitedServiceUuids = advertisement.solicitedServiceUUIDs.map(\.description)
            $0.serviceData = Dictionary(uniqueKeysWithValues: advertisement.serviceData.map { ($0.key.description, Data($0.value)) })
            $0.manufacturerData = Data(advertisement.manufacturerData ?? [])
            if let power = advertisement.txPowerLevel {
                $0.txPowerKnown = true
                $0.txPowerLevel = Int32(power)
            }
            $0.connectable = advertisement.isConnectable
        }
    }
}

extension Beryl_Ipc_V1_ManagerEvent {
    /// What an app's manager hears of a link; nil for what it does not (a link requested again while its app is away).
    public init?(_ event: CentralConnections.Event) {
        self.init()
        switch event {
        case .connected(let key, let identifier):
            connected = .with { $0.manager = key.manager; $0.peripheral = identifier }
        case .disconnected(let key, let identifier, let reason):
            disconnected = .with { $0.manager = key.manager; $0.peripheral = identifier; $0.reason = UInt32(reason) }
        case .requestedAgain:
            return nil
        }
    }
}

extension StackState {
    /// Each state and hcid's wire value for it, one table for both directions.
    static let wireValues: [(StackState, Beryl_Ipc_V1_ControllerState)] = [
        (.unknown, .unknown), (.resetting, .resetting), (.unsupported, .unsupported), (.unauthorized, .unauthorized),
        (.poweredOff, .poweredOff), (.poweredOn, .poweredOn), (.unresponsive, .unresponsive),
    ]

    /// hcid's controller state; a value this Beryl does not know reads as unknown.
    public init(_ wire: Beryl_Ipc_V1_ControllerState) {
        self = Self.wireValues.first { $0.1 == wire }?.0 ?? .unknown
    }
}

extension Beryl_Ipc_V1_ControllerState {
    public init(_ state: StackState) {
        self = StackState.wireValues.first { $0.0 == state }?.1 ?? .unknown
    }
}

extension Beryl_Ipc_V1_PeripheralInfo {
    /// A known device as an app sees it: the name its advertising gives (else the one stored), RSSI 127 when unheard.
    public init(_ device: KnownDevice, advertisement: AdvertisementData?, rssi: Int8?, connected: Bool) {
        self.init()
        identifier = device.identifier
        address = device.address.description
        name = advertisement?.localName ?? device.name ?? ""
        self.rssi = Int32(rssi ?? 127)
        self.connected = connected
        lastSeen = device.lastSeen
        if let advertisement { self.advertisement = Beryl_Ipc_V1_AdvertisementInfo(advertisement) }
    }
}
