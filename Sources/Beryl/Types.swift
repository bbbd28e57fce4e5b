@_exported import struct BerylCore.BluetoothUUID
// Core Bluetooth's property and permission bits are GATT's own.
@_exported import struct BerylGATT.AttributePermissions
@_exported import struct BerylGATT.CharacteristicProperties
import BerylIPC
import Foundation

/// Core Bluetooth's manager states.
public enum ManagerState: Sendable, Equatable {
    case unknown, resetting, unsupported, unauthorized, poweredOff, poweredOn

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

public enum WriteType: Sendable {
    case withResponse, withoutResponse
}

/// ATT error codes an app answers requests with (Core Vol 3 Part F §3.4.1.1), Core Bluetooth's CBATTError.Code.
public enum ATTError: UInt8, Error, Sendable {
    case success = 0x00
    case invalidHandle = 0x01
    case readNotPermitted = 0x02
    case writeNotPermitted = 0x03
    case invalidPdu = 0x04
    case insufficientAuthentication = 0x05
    case requestNotSupported = 0x06
    case invalidOffset = 0x07
    case insufficientAuthorization = 0x08
    case prepareQueueFull = 0x09
    case attributeNotFound = 0x0A
    case attributeNotLong = 0x0B
    case insufficientEncryptionKeySize = 0x0C
    case invalidAttributeValueLength = 0x0D
    case unlikelyError = 0x0E
    case insufficientEncryption = 0x0F
    case unsupportedGroupType = 0x10
    case insufficientResources = 0x11
}

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
}

/// One scan result.
public struct Discovery: Sendable {
    public let peripheral: Peripheral
    public let advertisementData: AdvertisementData
    public let rssi: Int
}

extension Request {
    static func manager(_ build: (inout Beryl_Ipc_V1_ManagerRequest) -> Void) -> Request {
        var request = Request()
        build(&request.manager)
        return request
    }
}
