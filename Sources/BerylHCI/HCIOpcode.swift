/// The HCI commands Beryl sends or its simulator serves (Core Vol 4 Part E §7). OGF in the top 6 bits.
public enum HCIOpcode: UInt16, Sendable, CaseIterable {
    // Link Control (OGF 0x01)
    case disconnect = 0x0406
    case readRemoteVersionInformation = 0x041D
    // Controller & Baseband (OGF 0x03)
    case setEventMask = 0x0C01
    case reset = 0x0C03
    case setEventMaskPage2 = 0x0C63
    case writeLEHostSupport = 0x0C6D
    // Informational (OGF 0x04)
    case readLocalVersionInformation = 0x1001
    case readLocalSupportedCommands = 0x1002
    case readLocalSupportedFeatures = 0x1003
    case readBufferSize = 0x1005
    case readBDAddr = 0x1009
    // Status (OGF 0x05)
    case readRSSI = 0x1405
    // LE Controller (OGF 0x08)
    case leSetEventMask = 0x2001
    case leReadBufferSize = 0x2002
    case leReadLocalSupportedFeatures = 0x2003
    case leSetRandomAddress = 0x2005
    case leSetAdvertisingParameters = 0x2006
    case leReadAdvertisingPhysicalChannelTxPower = 0x2007
    case leSetAdvertisingData = 0x2008
    case leSetScanResponseData = 0x2009
    case leSetAdvertisingEnable = 0x200A
    case leSetScanParameters = 0x200B
    case leSetScanEnable = 0x200C
    case leCreateConnection = 0x200D
    case leCreateConnectionCancel = 0x200E
    case leReadFilterAcceptListSize = 0x200F
    case leClearFilterAcceptList = 0x2010
    case leAddDeviceToFilterAcceptList = 0x2011
    case leRemoveDeviceFromFilterAcceptList = 0x2012
    case leConnectionUpdate = 0x2013
    case leReadRemoteFeatures = 0x2016
    case leEncrypt = 0x2017
    case leRand = 0x2018
    case leEnableEncryption = 0x2019
    case leLongTermKeyRequestReply = 0x201A
    case leLongTermKeyRequestNegativeReply = 0x201B
    case leReadSupportedStates = 0x201C
    case leRemoteConnectionParameterRequestReply = 0x2020
    case leRemoteConnectionParameterRequestNegativeReply = 0x2021
    case leSetDataLength = 0x2022
    case leReadSuggestedDefaultDataLength = 0x2023
    case leWriteSuggestedDefaultDataLength = 0x2024
    case leAddDeviceToResolvingList = 0x2027
    case leClearResolvingList = 0x2029
    case leReadResolvingListSize = 0x202A
    case leSetAddressResolutionEnable = 0x202D
    case leReadMaximumDataLength = 0x202F
    case leReadPHY = 0x2030
    case leSetDefaultPHY = 0x2031
    case leSetPHY = 0x2032
    case leReadBufferSizeV2 = 0x2060

    public var ogf: UInt16 { rawValue >> 10 }
    public var ocf: UInt16 { rawValue & 0x03FF }

    /// Octet and bit of this command in the Supported_Commands bitmap (Core Vol 4 Part E §6.27);
    /// nil for the commands every controller must support and the table leaves out.
    public var supportedCommandsBit: (octet: Int, bit: Int)? {
        switch self {
        case .disconnect: (0, 5)
        case .readRemoteVersionInformation: (2, 7)
        case .setEventMask: (5, 6)
        case .reset: (5, 7)
        case .setEventMaskPage2: (22, 2)
        case .writeLEHostSupport: (24, 6)
        case .readLocalVersionInformation: (14, 3)
        case .readLocalSupportedCommands: nil
        case .readLocalSupportedFeatures: (14, 5)
        case .readBufferSize: (14, 7)
        case .readBDAddr: (15, 1)
        case .readRSSI: (15, 5)
        case .leSetEventMask: (25, 0)
        case .leReadBufferSize: (25, 1)
        case .leReadLocalSupportedFeatures: (25, 2)
        case .leSetRandomAddress: (25, 4)
        case .leSetAdvertisingParameters: (25, 5)
        case .leReadAdvertisingPhysicalChannelTxPower: (25, 6)
        case .leSetAdvertisingData: (25, 7)
        case .leSetScanResponseData: (26, 0)
        case .leSetAdvertisingEnable: (26, 1)
        case .leSetScanParameters: (26, 2)
        case .leSetScanEnable: (26, 3)
        case .leCreateConnection: (26, 4)
        case .leCreateConnectionCancel: (26, 5)
        case .leReadFilterAcceptListSize: (26, 6)
        case .leClearFilterAcceptList: (26, 7)
        case .leAddDeviceToFilterAcceptList: (27, 0)
        case .leRemoveDeviceFromFilterAcceptList: (27, 1)
        case .leConnectionUpdate: (27, 2)
        case .leReadRemoteFeatures: (27, 5)
        case .leEncrypt: (27, 6)
        case .leRand: (27, 7)
        case .leEnableEncryption: (28, 0)
        case .leLongTermKeyRequestReply: (28, 1)
        case .leLongTermKeyRequestNegativeReply: (28, 2)
        case .leReadSupportedStates: (28, 3)
        case .leRemoteConnectionParameterRequestReply: (33, 4)
        case .leRemoteConnectionParameterRequestNegativeReply: (33, 5)
        case .leSetDataLength: (33, 6)
        case .leReadSuggestedDefaultDataLength: (33, 7)
        case .leWriteSuggestedDefaultDataLength: (34, 0)
        case .leAddDeviceToResolvingList: (34, 3)
        case .leClearResolvingList: (34, 5)
        case .leReadResolvingListSize: (34, 6)
        case .leSetAddressResolutionEnable: (35, 1)
        case .leReadMaximumDataLength: (35, 3)
        case .leReadPHY: (35, 4)
        case .leSetDefaultPHY: (35, 5)
        case .leSetPHY: (35, 6)
        case .leReadBufferSizeV2: (41, 5)
        }
    }
}

/// HCI event codes (Core Vol 4 Part E §7.7).
public enum HCIEventCode: UInt8, Sendable {
    case disconnectionComplete = 0x05
    case encryptionChange = 0x08
    case readRemoteVersionInformationComplete = 0x0C
    case commandComplete = 0x0E
    case commandStatus = 0x0F
    case hardwareError = 0x10
    case numberOfCompletedPackets = 0x13
    case dataBufferOverflow = 0x1A
    case encryptionKeyRefreshComplete = 0x30
    case leMeta = 0x3E

    /// Bit in the Set_Event_Mask mask (event code minus one); nil for events no mask can stop.
    public var maskBit: Int? {
        switch self {
        case .commandComplete, .commandStatus, .numberOfCompletedPackets: nil
        default: Int(rawValue) - 1
        }
    }
}

/// LE Meta event subevent codes (Core Vol 4 Part E §7.7.65); the LE event mask bit is the code minus one.
public enum LESubevent: UInt8, Sendable {
    case connectionComplete = 0x01
    case advertisingReport = 0x02
    case connectionUpdateComplete = 0x03
    case readRemoteFeaturesComplete = 0x04
    case longTermKeyRequest = 0x05
    case remoteConnectionParameterRequest = 0x06
    case dataLengthChange = 0x07
    case enhancedConnectionComplete = 0x0A
    case phyUpdateComplete = 0x0C
    case extendedAdvertisingReport = 0x0D
}
