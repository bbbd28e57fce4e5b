import BerylCore
import BerylHCI

extension SimController {
    func runConnectionCommand(_ opcode: HCIOpcode, _ reader: inout ByteReader) throws(DecodeError) {
        switch opcode {
        case .leCreateConnection:
            let scanInterval = try reader.u16()
            let scanWindow = try reader.u16()
            let policy = try reader.u8()
            let peerType = try reader.u8()
            let peer = BDAddress(wire: try reader.take(6))
            let ownType = try reader.u8()
            let intervalMin = try reader.u16()
            let intervalMax = try reader.u16()
            let latency = try reader.u16()
            let timeout = try reader.u16()
            _ = try reader.u32()  // minimum and maximum CE length
            guard initiating == nil, !initiationWedged else { return status(opcode, .commandDisallowed) }
            guard Self.validConnectionParameters(intervalMin, intervalMax, latency, timeout), scanWindow <= scanInterval,
                  (0x0004...0x4000).contains(scanInterval), policy <= 1, peerType <= 3, ownType <= 3 else {
                return status(opcode, .invalidParameters)
            }
            guard ownType & 1 == 0 || randomAddress != nil else { return status(opcode, .invalidParameters) }
            if policy == 0, links.values.contains(where: { $0.other(than: self).advertisingAddress.address == peer }) {
                return status(opcode, .connectionAlreadyExists)
            }
            initiating = InitiatingParameters(
                scanInterval: scanInterval, scanWindow: scanWindow, useFilterAcceptList: policy == 1,
                peer: DeviceAddress(peer, type: peerType & 1 == 1 ? .random : .public), ownAddressType: ownType,
                intervalMin: intervalMin, intervalMax: intervalMax, latency: latency, supervisionTimeout: timeout)
            initiatingStartedAt = air.now
            status(opcode, .success)
        case .leCreateConnectionCancel:
            guard initiating != nil else { return complete(opcode, .commandDisallowed) }
            initiating = nil
            complete(opcode, .success)
            if wedgesConnectionCancel {
                initiationWedged = true
                return
            }
            // Core Vol 4 Part E §7.8.13: the cancelled attempt ends with a connection complete event, status Unknown Connection Identifier.
            emitConnectionComplete(status: .unknownConnectionIdentifier, handle: 0, role: 0, peer: DeviceAddress(.zero, type: .public),
                                   interval: 0, latency: 0, timeout: 0)
        case .disconnect:
            let handle = try reader.u16()
            let reason = try reader.u8()
            guard let link = links[handle] else { return status(opcode, .unknownConnectionIdentifier) }
            // Core Vol 4 Part E §7.1.6: the reasons a host may give.
            guard [0x05, 0x13, 0x14, 0x15, 0x1A, 0x29, 0x3B].contains(reason) else { return status(opcode, .invalidParameters) }
            guard link.pendingTerminate == nil else { return status(opcode, .commandDisallowed) }
            link.pendingTerminate = (self, reason)
            status(opcode, .success)
        case .leConnectionUpdate:
            let handle = try reader.u16()
            let (intervalMin, intervalMax, latency, timeout) = try Self.connectionParameters(&reader)
            guard let link = links[handle] else { return status(opcode, .unknownConnectionIdentifier) }
            guard Self.validConnectionParameters(intervalMin, intervalMax, latency, timeout) else { return status(opcode, .invalidParameters) }
            status(opcode, .success)
            air.requestParameterUpdate(link, from: self, intervalMin: intervalMin, intervalMax: intervalMax, latency: latency, timeout: timeout)
        case .leRemoteConnectionParameterRequestReply:
            let handle = try reader.u16()
            let (intervalMin, intervalMax, latency, timeout) = try Self.connectionParameters(&reader)
            var body = ByteWriter()
            body.u16(handle)
            guard let link = links[handle], link.awaitingParameterReply else { return complete(opcode, .unknownConnectionIdentifier, body.bytes) }
            guard Self.validConnectionParameters(intervalMin, intervalMax, latency, timeout) else { return complete(opcode, .invalidParameters, body.bytes) }
            link.awaitingParameterReply = false
            complete(opcode, .success, body.bytes)
            air.scheduleParameterUpdate(link, interval: intervalMin, latency: latency, timeout: timeout)
        case .leRemoteConnectionParameterRequestNegativeReply:
            let handle = try reader.u16()
            let reason = try reader.u8()
            var body = ByteWriter()
            body.u16(handle)
            guard let link = links[handle], link.awaitingParameterReply else { return complete(opcode, .unknownConnectionIdentifier, body.bytes) }
            link.awaitingParameterReply = false
            complete(opcode, .success, body.bytes)
            link.peripheral.emitConnectionUpdateComplete(link, status: HCIStatus(rawValue: reason) ?? .unacceptableConnectionParameters)
        case .leReadRemoteFeatures:
            let handle = try reader.u16()
            guard let link = links[handle] else { return status(opcode, .unknownConnectionIdentifier) }
            status(opcode, .success)
            air.atNextEvent(of: link) { [weak self] in
                guard let self, self.links[handle] === link else { return }
                var body = ByteWriter()
                body.u8(0)
                body.u16(handle)
                body.append(Self.leFeatures)
                self.emitLE(.readRemoteFeaturesComplete, body.bytes)
            }
        case .readRemoteVersionInformation:
            let handle = try reader.u16()
            guard let link = links[handle] else { return status(opcode, .unknownConnectionIdentifier) }
            status(opcode, .success)
            air.atNextEvent(of: link) { [weak self] in
                guard let self, self.links[handle] === link else { return }
                self.emit(HCIEventPacket(.readRemoteVersionInformationComplete, parameters: [0, UInt8(handle & 0xFF), UInt8(handle >> 8), 0x0D, 0xFF, 0xFF, 0x01, 0x00]))
            }
        case .leSetDataLength:
            let handle = try reader.u16()
            let octets = try reader.u16()
            let time = try reader.u16()
            var body = ByteWriter()
            body.u16(handle)
            guard let link = links[handle] else { return complete(opcode, .unknownConnectionIdentifier, body.bytes) }
            guard (27...251).contains(octets), (328...17040).contains(time) else { return complete(opcode, .invalidParameters, body.bytes) }
            complete(opcode, .success, body.bytes)
            air.changeDataLength(link, from: self, octets: Int(octets))
        case .leReadPHY:
            let handle = try reader.u16()
            var body = ByteWriter()
            body.u16(handle)
            guard let link = links[handle] else { return complete(opcode, .unknownConnectionIdentifier, body.bytes) }
            let direction = link.direction(from: self)
            body.u8(UInt8(link.phy[direction]))
            body.u8(UInt8(link.phy[1 - direction]))
            complete(opcode, .success, body.bytes)
        case .leSetPHY:
            let handle = try reader.u16()
            let allPHYs = try reader.u8()
            let txPHYs = try reader.u8()
            let rxPHYs = try reader.u8()
            _ = try reader.u16()
            guard let link = links[handle] else { return status(opcode, .unknownConnectionIdentifier) }
            status(opcode, .success)
            // 2M when the host allows it both ways (or expresses no preference); Coded PHY is not supported.
            let wants2M = (allPHYs & 1 != 0 || txPHYs & 0b10 != 0) && (allPHYs & 2 != 0 || rxPHYs & 0b10 != 0)
            air.atNextEvent(of: link) { [weak link, weak self] in
                guard let link, let self, link.isOpen else { return }
                let phy = wants2M ? [2, 2] : [1, 1]
                // The asking host always hears how it ended; the peer's only of a PHY that changed (Core Vol 4 Part E §7.7.65.12).
                let changed = link.phy != phy
                link.phy = phy
                for end in [link.central, link.peripheral] where end !== link.deadEnd && (changed || end === self) {
                    var body = ByteWriter()
                    body.u8(0)
                    body.u16(link.handle(at: end))
                    body.u8(UInt8(link.phy[0]))
                    body.u8(UInt8(link.phy[0]))
                    end.emitLE(.phyUpdateComplete, body.bytes)
                }
            }
        case .readRSSI:
            let handle = try reader.u16()
            var body = ByteWriter()
            body.u16(handle)
            guard let link = links[handle] else { return complete(opcode, .unknownConnectionIdentifier, body.bytes) }
            body.i8(air.rssi(between: self, and: link.other(than: self)))
            complete(opcode, .success, body.bytes)
        default:
            answerInvalid(opcode)
        }
    }

    /// Interval min/max, latency and supervision timeout, then the minimum and maximum CE lengths (ignored),
    /// as LE Connection Update and the Remote Connection Parameter Request Reply both carry them.
    static func connectionParameters(_ reader: inout ByteReader) throws(DecodeError) -> (UInt16, UInt16, UInt16, UInt16) {
        let parameters = (try reader.u16(), try reader.u16(), try reader.u16(), try reader.u16())
        _ = try reader.u32()
        return parameters
    }

    /// Core Vol 4 Part E §7.8.12: interval 6–3200 (×1.25 ms), latency ≤ 499, timeout 10–3200 (×10 ms),
    /// and the timeout longer than (1 + latency) × interval_max × 2.
    static func validConnectionParameters(_ intervalMin: UInt16, _ intervalMax: UInt16, _ latency: UInt16, _ timeout: UInt16) -> Bool {
        guard (6...3200).contains(intervalMin), (6...3200).contains(intervalMax), intervalMin <= intervalMax,
              latency <= 499, (10...3200).contains(timeout) else { return false }
        return Int(timeout) * 10_000 > (1 + Int(latency)) * Int(intervalMax) * 1250 * 2
    }

    func emitConnectionComplete(status: HCIStatus, handle: UInt16, role: UInt8, peer: DeviceAddress,
                                interval: UInt16, latency: UInt16, timeout: UInt16) {
        var body = ByteWriter()
        body.u8(status.rawValue)
        body.u16(handle)
        body.u8(role)
        body.u8(peer.type.isRandom ? 1 : 0)
        body.append(peer.address.bytes)
        // Core Vol 4 Part E §7.7.65.10: when the enhanced event is unmasked it replaces the legacy one.
        let enhanced = isLEEventEnabled(.enhancedConnectionComplete)
        if enhanced { body.append([UInt8](repeating: 0, count: 12)) }  // local and peer resolvable private addresses: none
        body.u16(interval)
        body.u16(latency)
        body.u16(timeout)
        body.u8(0)  // central clock accuracy: 500 ppm
        emitLE(enhanced ? .enhancedConnectionComplete : .connectionComplete, body.bytes)
    }

    func emitConnectionUpdateComplete(_ link: SimLink, status: HCIStatus) {
        var body = ByteWriter()
        body.u8(status.rawValue)
        body.u16(link.handle(at: self))
        body.u16(UInt16(link.interval.microseconds / 1250))
        body.u16(link.latency)
        body.u16(UInt16(link.supervisionTimeout.microseconds / 10_000))
        emitLE(.connectionUpdateComplete, body.bytes)
    }

    func emitDataLengthChange(_ link: SimLink) {
        let direction = link.direction(from: self)
        var body = ByteWriter()
        body.u16(link.handle(at: self))
        for octets in [link.maxOctets[direction], link.maxOctets[1 - direction]] {
            body.u16(UInt16(octets))
            body.u16(UInt16(AirTime.pduDuration(payload: octets, phy: 1, encrypted: true).microseconds))
        }
        emitLE(.dataLengthChange, body.bytes)
    }
}
