import Foundation

// Core Bluetooth's dictionary keys, under its names less the CB prefix and with Apple's string values, so that
// options, advertisement data, restored state and launch options are the dictionaries the guide reads and writes.

/// Manager options.
public let CentralManagerOptionShowPowerAlertKey = "kCBInitOptionShowPowerAlert"
public let CentralManagerOptionRestoreIdentifierKey = "kCBInitOptionRestoreIdentifier"
public let PeripheralManagerOptionShowPowerAlertKey = "kCBInitOptionShowPowerAlert"
public let PeripheralManagerOptionRestoreIdentifierKey = "kCBInitOptionRestoreIdentifier"

/// Scan options.
public let CentralManagerScanOptionAllowDuplicatesKey = "kCBScanOptionAllowDuplicates"
public let CentralManagerScanOptionSolicitedServiceUUIDsKey = "kCBScanOptionSolicitedServiceUUIDs"

/// Connect options.
public let ConnectPeripheralOptionNotifyOnConnectionKey = "kCBConnectOptionNotifyOnConnection"
public let ConnectPeripheralOptionNotifyOnDisconnectionKey = "kCBConnectOptionNotifyOnDisconnection"
public let ConnectPeripheralOptionNotifyOnNotificationKey = "kCBConnectOptionNotifyOnNotification"
public let ConnectPeripheralOptionStartDelayKey = "kCBConnectOptionStartDelay"

/// Restored state (willRestoreState's dictionary).
public let CentralManagerRestoredStatePeripheralsKey = "kCBRestoredPeripherals"
public let CentralManagerRestoredStateScanServicesKey = "kCBRestoredScanServices"
public let CentralManagerRestoredStateScanOptionsKey = "kCBRestoredScanOptions"
public let PeripheralManagerRestoredStateServicesKey = "kCBRestoredServices"
public let PeripheralManagerRestoredStateAdvertisementDataKey = "kCBRestoredAdvertisement"

/// Advertisement data, heard (didDiscover) and sent (startAdvertising).
public let AdvertisementDataLocalNameKey = "kCBAdvDataLocalName"
public let AdvertisementDataTxPowerLevelKey = "kCBAdvDataTxPowerLevel"
public let AdvertisementDataServiceUUIDsKey = "kCBAdvDataServiceUUIDs"
public let AdvertisementDataServiceDataKey = "kCBAdvDataServiceData"
public let AdvertisementDataManufacturerDataKey = "kCBAdvDataManufacturerData"
public let AdvertisementDataOverflowServiceUUIDsKey = "kCBAdvDataOverflowServiceUUIDs"
public let AdvertisementDataIsConnectable = "kCBAdvDataIsConnectable"
public let AdvertisementDataSolicitedServiceUUIDsKey = "kCBAdvDataSolicitedServiceUUIDs"

/// Why the process was launched (UIApplicationLaunchOptionsBluetooth…Key): the restore identifiers of the managers
/// managerd kept while the app was not running. See `LaunchOptions.current.dictionary`.
public let ApplicationLaunchOptionsBluetoothCentralsKey = "UIApplicationLaunchOptionsBluetoothCentralsKey"
public let ApplicationLaunchOptionsBluetoothPeripheralsKey = "UIApplicationLaunchOptionsBluetoothPeripheralsKey"

/// The standard descriptors' UUIDs (Core Bluetooth's CBUUID…String constants; Core Vol 3 Part G §3.3.3).
public let UUIDCharacteristicExtendedPropertiesString = "2900"
public let UUIDCharacteristicUserDescriptionString = "2901"
public let UUIDClientCharacteristicConfigurationString = "2902"
public let UUIDServerCharacteristicConfigurationString = "2903"
public let UUIDCharacteristicFormatString = "2904"
public let UUIDCharacteristicAggregateFormatString = "2905"

/// Reading an options dictionary as Core Bluetooth does: a key absent or of another type is the default.
extension Dictionary where Key == String, Value == Any {
    func flag(_ key: String) -> Bool {
        if let value = self[key] as? Bool { return value }
        return (self[key] as? NSNumber)?.boolValue ?? false
    }

    func uuids(_ key: String) -> [BluetoothUUID] { self[key] as? [BluetoothUUID] ?? [] }
}
