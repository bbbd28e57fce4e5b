import BerylCore
import BerylHCI

extension SimController {
    func runDiscoveryCommand(_ opcode: HCIOpcode, _ reader: inout ByteReader) throws(DecodeError) {
        switch opcode {
        case .leSetAdvertisingParameters:
            var parameters = AdvertisingParameters()
            parameters.intervalMin = try reader.u16()
            parameters.intervalMax = try reader.u16()
            parameters.type = try reader.u8()
            parameters.ownAddressType = try reader.u8()
            let peerType = try reader.u8()
            let peerAddress = BDAddress(wire: try reader.take(6))
            parameters.channelMap = try reader.u8()
            parameters.filterPolicy = try reader.u8()
            guard !advertisingEnabled else { return complete(opcode, .commandDisallowed) }
            // Core Vol 4 Part E §7.8.5: intervals 0x0020–0x4000 (ignored for high duty cycle directed), a channel, known types.
            let intervalsValid = parameters.type == 1
                || ((0x0020...0x4000).contains(parameters.intervalMin) && (0x0020...0x4000).contains(parameters.intervalMax)
                    && parameters.intervalMin <= parameters.intervalMax)
            guard intervalsValid, parameters.type <= 4, parameters.ownAddressType <= 3, peerType <= 1,
                  parameters.channelMap & 0x07 != 0, parameters.filterPolicy <= 3 else {
                return complete(opcode, .invalidParameters)
            }
            parameters.peer = DeviceAddress(peerAddress, type: peerType == 1 ? .random : .public)
            advertisingParameters = parameters
            complete(opcode, .success)
        case .leSetAdvertisingData, .leSetScanResponseData:
            let length = Int(try reader.u8())
            let data = try reader.take(31)
            guard length <= 31 else { return complete(opcode, .invalidParameters) }
            if opcode == .leSetAdvertisingData { advertisingData = Array(data.prefix(length)) } else { scanResponseData = Array(data.prefix(length)) }
            complete(opcode, .success)
        case .leSetAdvertisingEnable:
            let enable = try reader.u8()
            guard enable <= 1 else { return complete(opcode, .invalidParameters) }
            if enable == 1 {
                guard advertisingParameters.ownAddressType & 1 == 0 || randomAddress != nil else {
                    return complete(opcode, .invalidParameters)
                }
                if !advertisingEnabled { air.startAdvertising(self) }
            } else {
                advertisingEnabled = false
                advertisingGeneration += 1
            }
            complete(opcode, .success)
        case .leSetScanParameters:
            var parameters = ScanParameters()
            let type = try reader.u8()
            parameters.interval = try reader.u16()
            parameters.window = try reader.u16()
            parameters.ownAddressType = try reader.u8()
            parameters.filterPolicy = try reader.u8()
            guard !scanEnabled else { return complete(opcode, .commandDisallowed) }
            guard type <= 1, (0x0004...0x4000).contains(parameters.interval), (0x0004...0x4000).contains(parameters.window),
                  parameters.window <= parameters.interval, parameters.ownAddressType <= 3, parameters.filterPolicy <= 3 else {
                return complete(opcode, .invalidParameters)
            }
            parameters.active = type == 1
            scanParameters = parameters
            complete(opcode, .success)
        case .leSetScanEnable:
            let enable = try reader.u8()
            let duplicates = try reader.u8()
            guard enable <= 1, duplicates <= 1 else { return complete(opcode, .invalidParameters) }
            if enable == 1 {
                guard scanParameters.ownAddressType & 1 == 0 || randomAddress != nil else { return complete(opcode, .invalidParameters) }
                if !scanEnabled {
                    scanEnabled = true
                    scanStartedAt = air.now
                    reportedDuplicates.removeAll()
                }
                filterDuplicates = duplicates == 1
            } else {
                scanEnabled = false
            }
            complete(opcode, .success)
        case .leClearFilterAcceptList, .leAddDeviceToFilterAcceptList, .leRemoveDeviceFromFilterAcceptList:
            var entry: DeviceAddress?
            if opcode != .leClearFilterAcceptList {
                let type = try reader.u8()
                let address = BDAddress(wire: try reader.take(6))
                guard type <= 1 else { return complete(opcode, .invalidParameters) }
                entry = DeviceAddress(address, type: type == 1 ? .random : .public)
            }
            // Core Vol 4 Part E §7.8.15: the list may not change while advertising, scanning or initiating uses it.
            let inUse = (advertisingEnabled && advertisingParameters.filterPolicy != 0) || (scanEnabled && scanParameters.filterPolicy & 1 != 0)
                || (initiating?.useFilterAcceptList ?? false)
            guard !inUse else { return complete(opcode, .commandDisallowed) }
            switch opcode {
            case .leClearFilterAcceptList:
                filterAcceptList.removeAll()
            case .leAddDeviceToFilterAcceptList:
                guard let entry else { break }
                if !filterAcceptList.contains(entry) {
                    guard filterAcceptList.count < air.config.filterAcceptListSize else { return complete(opcode, .memoryCapacityExceeded) }
                    filterAcceptList.append(entry)
                }
            default:
                filterAcceptList.removeAll { $0 == entry }
            }
            complete(opcode, .success)
        default:
            answerInvalid(opcode)
        }
    }

    /// Reports one received advertising PDU (or scan response) to the host, applying duplicate filtering.
    func reportAdvertisement(eventType: UInt8, from address: DeviceAddress, data: [UInt8], rssi: Int8) {
        if filterDuplicates {
            let key = [eventType, address.type.rawValue] + address.address.bytes
            guard reportedDuplicates.insert(key).inserted else { return }
        }
        var writer = ByteWriter()
        writer.u8(1)
        writer.u8(eventType)
        writer.u8(address.type.isRandom ? 1 : 0)
        writer.append(address.address.bytes)
        writer.u8(UInt8(data.count))
        writer.append(data)
        writer.i8(rssi)
        emitLE(.advertisingReport, writer.bytes)
    }

    /// Whether this controller's scanner or initiator is listening at `time` (scan window within scan interval).
    func isListening(at time: Duration, interval: UInt16, window: UInt16, since start: Duration) -> Bool {
        let intervalMicroseconds = Duration.units625us(interval).microseconds
        let phase = (time - start).microseconds % max(intervalMicroseconds, 1)
        return phase < Duration.units625us(window).microseconds
    }
}
