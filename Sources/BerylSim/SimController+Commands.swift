import BerylCore
import BerylHCI
import CBerylCrypto

extension SimController {
    static let leFeatures: [UInt8] = [
        // LE Encryption, Connection Parameters Request, Extended Reject Indication, Peripheral-initiated
        // Features Exchange, Data Packet Length Extension; LE 2M PHY (Core Vol 6 Part B §4.6).
        0b0010_1111, 0b0000_0001, 0, 0, 0, 0, 0, 0,
    ]

    static let supportedCommands: [UInt8] = {
        var bitmap = [UInt8](repeating: 0, count: 64)
        for opcode in HCIOpcode.allCases {
            if let (octet, bit) = opcode.supportedCommandsBit { bitmap[octet] |= 1 << bit }
        }
        return bitmap
    }()

    func execute(_ command: HCICommandPacket) {
        guard let opcode = HCIOpcode(rawValue: command.opcode) else {
            // Core Vol 4 Part E §4.5: an unsupported command is answered with Unknown HCI Command.
            emit(EventWriter.commandComplete(command.opcode, [HCIStatus.unknownCommand.rawValue]))
            return
        }
        var reader = ByteReader(command.parameters)
        do {
            try run(opcode, &reader, command)
        } catch {
            // Parameters too short for the command: Invalid HCI Command Parameters.
            answerInvalid(opcode)
        }
    }

    func answerInvalid(_ opcode: HCIOpcode) {
        if Self.completesWithStatus.contains(opcode) {
            emit(EventWriter.commandStatus(opcode.rawValue, .invalidParameters))
        } else {
            emit(EventWriter.commandComplete(opcode.rawValue, [HCIStatus.invalidParameters.rawValue]))
        }
    }

    /// Commands answered with Command Status, their outcome following in a later event.
    static let completesWithStatus: Set<HCIOpcode> = [
        .disconnect, .readRemoteVersionInformation, .leCreateConnection, .leConnectionUpdate, .leReadRemoteFeatures,
        .leEnableEncryption, .leSetPHY,
    ]

    func complete(_ opcode: HCIOpcode, _ status: HCIStatus, _ rest: [UInt8] = []) {
        emit(EventWriter.commandComplete(opcode.rawValue, [status.rawValue] + rest))
    }

    func status(_ opcode: HCIOpcode, _ status: HCIStatus) {
        emit(EventWriter.commandStatus(opcode.rawValue, status))
    }

    private func run(_ opcode: HCIOpcode, _ reader: inout ByteReader, _ command: HCICommandPacket) throws(DecodeError) {
        switch opcode {
        case .reset:
            resetState()
            complete(opcode, .success)
        case .setEventMask:
            eventMask = try reader.u64()
            complete(opcode, .success)
        case .leSetEventMask:
            leEventMask = try reader.u64()
            complete(opcode, .success)
        case .setEventMaskPage2, .writeLEHostSupport, .leSetDefaultPHY, .leClearResolvingList, .leSetAddressResolutionEnable:
            complete(opcode, .success)
        case .readLocalVersionInformation:
            // HCI/LMP version 0x0D (Core 5.4), manufacturer 0xFFFF (none: reserved for tests).
            complete(opcode, .success, [0x0D, 0x00, 0x00, 0x0D, 0xFF, 0xFF, 0x01, 0x00])
        case .readLocalSupportedCommands:
            complete(opcode, .success, Self.supportedCommands)
        case .readLocalSupportedFeatures:
            // Byte 4: bit 5 BR/EDR Not Supported, bit 6 LE Supported (Controller).
            complete(opcode, .success, [0, 0, 0, 0, 0b0110_0000, 0, 0, 0])
        case .readBufferSize:
            // LE-only by default: no BR/EDR buffers. With shared buffers, LE uses these (Core Vol 4 Part E §7.8.2).
            let shared = air.config.sharedBuffers
            let size = shared ? UInt16(air.config.aclBufferSize) : 0
            let count = shared ? UInt16(air.config.aclBufferCount) : 0
            complete(opcode, .success, [UInt8(size & 0xFF), UInt8(size >> 8), 0, UInt8(count & 0xFF), UInt8(count >> 8), 0, 0])
        case .readBDAddr:
            complete(opcode, .success, publicAddress.bytes)
        case .leReadBufferSize, .leReadBufferSizeV2:
            let size = air.config.sharedBuffers ? 0 : air.config.aclBufferSize
            let count = air.config.sharedBuffers ? 0 : air.config.aclBufferCount
            complete(opcode, .success, [UInt8(size & 0xFF), UInt8(size >> 8), UInt8(count)] + (opcode == .leReadBufferSizeV2 ? [0, 0, 0] : []))
        case .leReadLocalSupportedFeatures:
            complete(opcode, .success, Self.leFeatures)
        case .leReadSupportedStates:
            complete(opcode, .success, [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x03, 0, 0])
        case .leReadFilterAcceptListSize:
            complete(opcode, .success, [UInt8(air.config.filterAcceptListSize)])
        case .leReadResolvingListSize:
            // No controller-based privacy: hosts resolve private addresses themselves.
            complete(opcode, .success, [0])
        case .leAddDeviceToResolvingList:
            complete(opcode, .memoryCapacityExceeded)
        case .leReadSuggestedDefaultDataLength:
            var writer = ByteWriter()
            writer.u16(suggestedDataLength.octets)
            writer.u16(suggestedDataLength.time)
            complete(opcode, .success, writer.bytes)
        case .leWriteSuggestedDefaultDataLength:
            let octets = try reader.u16()
            let time = try reader.u16()
            guard (27...251).contains(octets), (328...17040).contains(time) else { return complete(opcode, .invalidParameters) }
            suggestedDataLength = (octets, time)
            complete(opcode, .success)
        case .leReadMaximumDataLength:
            complete(opcode, .success, [251, 0, 0x48, 0x08, 251, 0, 0x48, 0x08])
        case .leReadAdvertisingPhysicalChannelTxPower:
            complete(opcode, .success, [0])
        case .leRand:
            complete(opcode, .success, air.random.bytes(8))
        case .leEncrypt:
            let key = try reader.take(16)
            let plaintext = try reader.take(16)
            // HCI carries both little-endian; AES (FIPS-197) wants the most significant octet first.
            guard let ciphertext = Self.aes128(key: key.reversed(), plaintext: plaintext.reversed()) else {
                return complete(opcode, .unspecifiedError)
            }
            complete(opcode, .success, ciphertext.reversed())
        case .leSetRandomAddress:
            let address = BDAddress(wire: try reader.take(6))
            guard !advertisingEnabled, !scanEnabled, initiating == nil else { return complete(opcode, .commandDisallowed) }
            randomAddress = address
            complete(opcode, .success)
        case .leSetAdvertisingParameters, .leSetAdvertisingData, .leSetScanResponseData, .leSetAdvertisingEnable,
             .leSetScanParameters, .leSetScanEnable, .leClearFilterAcceptList, .leAddDeviceToFilterAcceptList,
             .leRemoveDeviceFromFilterAcceptList:
            try runDiscoveryCommand(opcode, &reader)
        case .leCreateConnection, .leCreateConnectionCancel, .disconnect, .leConnectionUpdate,
             .leRemoteConnectionParameterRequestReply, .leRemoteConnectionParameterRequestNegativeReply,
             .leReadRemoteFeatures, .readRemoteVersionInformation, .leSetDataLength, .leReadPHY, .leSetPHY, .readRSSI:
            try runConnectionCommand(opcode, &reader)
        case .leEnableEncryption, .leLongTermKeyRequestReply, .leLongTermKeyRequestNegativeReply:
            try runSecurityCommand(opcode, &reader)
        }
    }

    static func aes128(key: [UInt8], plaintext: [UInt8]) -> [UInt8]? {
        var output = [UInt8](repeating: 0, count: 16)
        let result = beryl_aes128_encrypt_block(key, plaintext, &output)
        return result == 0 ? output : nil
    }
}
