/// HCI error codes (Core Vol 1 Part F §1.3).
public enum HCIStatus: UInt8, Sendable, Error {
    case success = 0x00
    case unknownCommand = 0x01
    case unknownConnectionIdentifier = 0x02
    case hardwareFailure = 0x03
    case authenticationFailure = 0x05
    case pinOrKeyMissing = 0x06
    case memoryCapacityExceeded = 0x07
    case connectionTimeout = 0x08
    case connectionLimitExceeded = 0x09
    case connectionAlreadyExists = 0x0B
    case commandDisallowed = 0x0C
    case unsupportedFeatureOrParameterValue = 0x11
    case invalidParameters = 0x12
    case remoteUserTerminatedConnection = 0x13
    case remoteLowResources = 0x14
    case remotePowerOff = 0x15
    case connectionTerminatedByLocalHost = 0x16
    case unsupportedRemoteFeature = 0x1A
    case unspecifiedError = 0x1F
    case unsupportedLLParameterValue = 0x20
    case llResponseTimeout = 0x22
    case instantPassed = 0x28
    case pairingWithUnitKeyNotSupported = 0x29
    case controllerBusy = 0x3A
    case unacceptableConnectionParameters = 0x3B
    case advertisingTimeout = 0x3C
    case connectionTerminatedDueToMICFailure = 0x3D
    case connectionFailedToBeEstablished = 0x3E
}
