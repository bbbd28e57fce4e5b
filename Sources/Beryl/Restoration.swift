import BerylWire
import Foundation

/// The options Core Bluetooth takes as a dictionary when a central manager is made.
public struct CentralManagerOptions: Sendable {
    /// Opts into state preservation and restoration (CBCentralManagerOptionRestoreIdentifierKey). Needs an app id
    /// with a manifest.
    public var restoreIdentifier: String?
    public init(restoreIdentifier: String? = nil) { self.restoreIdentifier = restoreIdentifier }
}

public struct PeripheralManagerOptions: Sendable {
    /// CBPeripheralManagerOptionRestoreIdentifierKey.
    public var restoreIdentifier: String?
    public init(restoreIdentifier: String? = nil) { self.restoreIdentifier = restoreIdentifier }
}

/// What a restored central manager gets back (willRestoreState's dictionary, typed): its peripherals, with the
/// services, characteristics and notifying state the app had found, and its scan.
public struct RestoredCentralState: Sendable {
    public let peripherals: [Peripheral]
    /// The scan's services (nil: every peripheral) when the manager was scanning.
    public let scanServices: [BluetoothUUID]?
    public let scanOptions: ScanOptions?
    public let isScanning: Bool

    init(peripherals: [Peripheral], scanServices: [BluetoothUUID]?, scanOptions: ScanOptions?, isScanning: Bool) {
        self.peripherals = peripherals
        self.scanServices = scanServices
        self.scanOptions = scanOptions
        self.isScanning = isScanning
    }

    /// Reads willRestoreState's dictionary.
    public init(_ dictionary: [String: Any]) {
        peripherals = dictionary[CentralManagerRestoredStatePeripheralsKey] as? [Peripheral] ?? []
        scanServices = dictionary[CentralManagerRestoredStateScanServicesKey] as? [BluetoothUUID]
        let options = dictionary[CentralManagerRestoredStateScanOptionsKey] as? [String: Any]
        scanOptions = options.map { ScanOptions($0) }
        isScanning = options != nil
    }

    /// As Core Bluetooth gives it: only the keys that apply.
    public var dictionary: [String: Any] {
        var dictionary: [String: Any] = [:]
        if !peripherals.isEmpty { dictionary[CentralManagerRestoredStatePeripheralsKey] = peripherals }
        if let scanServices { dictionary[CentralManagerRestoredStateScanServicesKey] = scanServices }
        if let scanOptions { dictionary[CentralManagerRestoredStateScanOptionsKey] = scanOptions.dictionary }
        return dictionary
    }
}

/// What a restored peripheral manager gets back (willRestoreState's dictionary, typed): its published services
/// (with their handles) and advertising.
public struct RestoredPeripheralState: Sendable {
    public let services: [MutableService]
    public let advertisementData: AdvertisingOptions?

    init(services: [MutableService], advertisementData: AdvertisingOptions?) {
        self.services = services
        self.advertisementData = advertisementData
    }

    public init(_ dictionary: [String: Any]) {
        services = dictionary[PeripheralManagerRestoredStateServicesKey] as? [MutableService] ?? []
        advertisementData = (dictionary[PeripheralManagerRestoredStateAdvertisementDataKey] as? [String: Any]).map { AdvertisingOptions($0) }
    }

    public var dictionary: [String: Any] {
        var dictionary: [String: Any] = [:]
        if !services.isEmpty { dictionary[PeripheralManagerRestoredStateServicesKey] = services }
        if let advertisementData { dictionary[PeripheralManagerRestoredStateAdvertisementDataKey] = advertisementData.dictionary }
        return dictionary
    }
}

/// Why the process was launched (UIApplicationLaunchOptionsBluetoothCentralsKey and ...PeripheralsKey): the
/// restore identifiers of the managers managerd kept while the app was not running.
public struct LaunchOptions: Sendable, Equatable {
    public let centrals: [String]
    public let peripherals: [String]
    public let appID: String?

    /// From the environment managerd launched the process with (empty when the user started it).
    public static var current: LaunchOptions {
        let environment = ProcessInfo.processInfo.environment
        func list(_ key: String) -> [String] { (environment[key] ?? "").split(separator: ",").map(String.init) }
        return LaunchOptions(centrals: list("BERYL_LAUNCH_CENTRALS"), peripherals: list("BERYL_LAUNCH_PERIPHERALS"), appID: environment["BERYL_APP_ID"])
    }

    public var isRelaunch: Bool { !centrals.isEmpty || !peripherals.isEmpty }

    /// As iOS gives an app its launch options: `ApplicationLaunchOptionsBluetoothCentralsKey` and
    /// `…PeripheralsKey` with the restore identifiers, present only for a relaunch.
    public var dictionary: [String: Any] {
        var options: [String: Any] = [:]
        if !centrals.isEmpty { options[ApplicationLaunchOptionsBluetoothCentralsKey] = centrals }
        if !peripherals.isEmpty { options[ApplicationLaunchOptionsBluetoothPeripheralsKey] = peripherals }
        return options
    }
}

/// What an app tells the stack about itself (iOS knows it from UIApplication): in the foreground or in the
/// background. An app woken in the background need not say anything: the library tells the stack it is idle once its
/// delegate callbacks for the wake have returned.
public enum ApplicationState: Sendable {
    case foreground, background
}

extension Channel {
    /// Ends a manager for good (Core Bluetooth: the user force-quit the app): managerd discards what it preserved.
    func invalidate(manager: UInt32) {
        _ = call(.manager { $0.invalidate.manager = manager })
        close()
    }

    func report(_ state: ApplicationState, appID: String) -> BerylError? {
        guard !appID.isEmpty else { return .invalidArgument("an app without an app id is always in the foreground") }
        let result = call(.manager { $0.setAppState = .with { $0.appID = appID; $0.state = state == .foreground ? .foreground : .background } })
        if case .failure(let error) = result { return error }
        return nil
    }
}

extension CentralManager {
    /// Reports the app's state: background apps follow Core Bluetooth's background rules; a foreground-only app is
    /// suspended a few seconds after going to the background.
    @discardableResult
    public func reportApplicationState(_ state: ApplicationState) -> BerylError? { channel.report(state, appID: appID) }

    func restoredState(_ preserved: Beryl_Ipc_V1_PreservedCentralRole) -> RestoredCentralState {
        let peripherals = preserved.links.map { link -> Peripheral in
            let restored = peripheral(link.identifier, name: link.name.isEmpty ? nil : link.name)
            restored.setState(link.pending ? .connecting : .connected)
            if link.hasDatabase {
                let services = restored.adopt(link.database)
                let notifying = Set(link.notifyingValueHandles)
                for characteristic in services.flatMap({ $0.characteristics ?? [] }) where notifying.contains(characteristic.valueHandle) {
                    characteristic.setNotifying(true)
                }
            }
            return restored
        }
        let services = preserved.scanServiceUuids.compactMap(BluetoothUUID.init)
        return RestoredCentralState(peripherals: peripherals, scanServices: preserved.scanning && !services.isEmpty ? services : nil,
                                    scanOptions: preserved.scanning ? ScanOptions(allowDuplicates: preserved.allowDuplicates,
                                                                                   solicitedServiceUUIDs: preserved.solicitedServiceUuids.compactMap(BluetoothUUID.init)) : nil,
                                    isScanning: preserved.scanning)
    }
}

extension PeripheralManager {
    /// As `CentralManager.reportApplicationState`.
    @discardableResult
    public func reportApplicationState(_ state: ApplicationState) -> BerylError? { channel.report(state, appID: appID) }
}

extension MutableService {
    /// A published service as managerd preserved it, with its handles.
    static func restored(_ preserved: Beryl_Ipc_V1_PreservedService) -> MutableService {
        let spec = preserved.spec
        let service = MutableService(type: BluetoothUUID(spec.uuid) ?? BluetoothUUID(0), primary: spec.primary)
        service.characteristics = zip(spec.characteristics, preserved.published.valueHandles).map { item, handle in
            let characteristic = MutableCharacteristic(type: BluetoothUUID(item.uuid) ?? BluetoothUUID(0),
                                                       properties: CharacteristicProperties(rawValue: UInt16(truncatingIfNeeded: item.properties)),
                                                       value: item.cached ? item.value : nil,
                                                       permissions: AttributePermissions(rawValue: UInt8(truncatingIfNeeded: item.permissions)))
            characteristic.descriptors = item.descriptors.compactMap { descriptor in
                BluetoothUUID(descriptor.uuid).map { MutableDescriptor(type: $0, typedValue: DescriptorValue(bytes: descriptor.value, for: $0)) }
            }
            characteristic.setHandle(handle)
            return characteristic
        }
        service.setStart(preserved.published.startHandle)
        return service
    }
}
