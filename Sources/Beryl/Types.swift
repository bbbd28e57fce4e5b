@_exported import struct BerylCore.BluetoothUUID
// Core Bluetooth's property and permission bits are GATT's own.
@_exported import struct BerylCore.AttributePermissions
@_exported import struct BerylCore.CharacteristicProperties
import BerylWire
import Foundation

/// Core Bluetooth's CBManagerState, with Apple's raw values.
public enum ManagerState: Int, Sendable, Equatable {
    case unknown = 0, resetting = 1, unsupported = 2, unauthorized = 3, poweredOff = 4, poweredOn = 5

    init(_ state: Beryl_Ipc_V1_ControllerState) {
        switch state {
        case .poweredOn: self = .poweredOn
        case .poweredOff, .unresponsive: self = .poweredOff
        case .resetting: self = .resetting
        case .unsupported: self = .unsupported
        case .unauthorized: self = .unauthorized
        default: self = .unknown
        }
    }
}

/// Core Bluetooth's CBCharacteristicWriteType.
public enum CharacteristicWriteType: Int, Sendable {
    case withResponse = 0, withoutResponse = 1
}

public typealias WriteType = CharacteristicWriteType

/// What a scan heard: Core Bluetooth's advertisement data keys.
public struct AdvertisementData: Sendable, Equatable {
    public var localName: String?
    public var serviceUUIDs: [BluetoothUUID]
    public var overflowServiceUUIDs: [BluetoothUUID]
    public var solicitedServiceUUIDs: [BluetoothUUID]
    public var serviceData: [BluetoothUUID: Data]
    public var manufacturerData: Data?
    public var txPowerLevel: Int?
    public var isConnectable: Bool

    init(_ info: Beryl_Ipc_V1_AdvertisementInfo) {
        localName = info.localName.isEmpty ? nil : info.localName
        serviceUUIDs = info.serviceUuids.compactMap(BluetoothUUID.init)
        overflowServiceUUIDs = info.overflowServiceUuids.compactMap(BluetoothUUID.init)
        solicitedServiceUUIDs = info.solicitedServiceUuids.compactMap(BluetoothUUID.init)
        serviceData = Dictionary(uniqueKeysWithValues: info.serviceData.compactMap { key, value in BluetoothUUID(key).map { ($0, value) } })
        manufacturerData = info.manufacturerData.isEmpty ? nil : info.manufacturerData
        txPowerLevel = info.txPowerKnown ? Int(info.txPowerLevel) : nil
        isConnectable = info.connectable
    }

    /// As Core Bluetooth's didDiscover gives it: only the keys that were heard, with its value types.
    public var dictionary: [String: Any] {
        var data: [String: Any] = [AdvertisementDataIsConnectable: NSNumber(value: isConnectable)]
        if let localName { data[AdvertisementDataLocalNameKey] = localName }
        if !serviceUUIDs.isEmpty { data[AdvertisementDataServiceUUIDsKey] = serviceUUIDs }
        if !overflowServiceUUIDs.isEmpty { data[AdvertisementDataOverflowServiceUUIDsKey] = overflowServiceUUIDs }
        if !solicitedServiceUUIDs.isEmpty { data[AdvertisementDataSolicitedServiceUUIDsKey] = solicitedServiceUUIDs }
        if !serviceData.isEmpty { data[AdvertisementDataServiceDataKey] = serviceData }
        if let manufacturerData { data[AdvertisementDataManufacturerDataKey] = manufacturerData }
        if let txPowerLevel { data[AdvertisementDataTxPowerLevelKey] = NSNumber(value: txPowerLevel) }
        return data
    }
}

extension Request {
    static func manager(_ build: (inout Beryl_Ipc_V1_ManagerRequest) -> Void) -> Request {
        var request = Request()
        build(&request.manager)
        return request
    }
}
