import BerylCore
import BerylHCI

/// Saturates one simulated link and measures what it carries, all in simulated time (no wall clock,
/// so the figure is exact and repeatable). The host side honours the controller's ACL credits.
public enum LinkThroughput {
    /// Link-layer payload bytes per second delivered central → peripheral.
    public static func measure(config: SimConfig, phy: Int, octets: Int, intervalUnits: UInt16, duration: Duration) -> Double {
        let air = SimAir(controllerCount: 2, seed: 1, config: config)
        var driver = Driver(air: air)
        for index in 0...1 {
            driver.command(index, .reset)
            driver.command(index, .setEventMask, [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x3F])
            driver.command(index, .leSetEventMask, [0xFF, 0x0D, 0, 0, 0, 0, 0, 0])
        }
        driver.send(1, HCICommands.leSetAdvertisingParameters(interval: 0x20))
        driver.command(1, .leSetAdvertisingEnable, [1])
        driver.send(0, HCICommands.leCreateConnection(peer: DeviceAddress(air.controllers[1].publicAddress, type: .public), scanInterval: 0x10,
                                                      scanWindow: 0x10, interval: intervalUnits, supervisionTimeout: 200))
        driver.settle(for: .seconds(1))
        guard let handle = air.controllers[0].connectionHandles.first else { return 0 }
        var dataLength = ByteWriter()
        dataLength.u16(handle)
        dataLength.u16(UInt16(octets))
        dataLength.u16(2120)
        driver.command(0, .leSetDataLength, dataLength.bytes)
        var setPHY = ByteWriter()
        setPHY.u16(handle)
        setPHY.append([0, phy == 2 ? 0b10 : 0b01, phy == 2 ? 0b10 : 0b01, 0, 0])
        driver.command(0, .leSetPHY, setPHY.bytes)
        driver.settle(for: .milliseconds(200))
        driver.received = 0

        let start = driver.now
        let end = start + duration
        let payload = [UInt8](repeating: 0xAB, count: octets)
        while driver.now < end {
            while air.controllers[0].aclBuffersInUse < config.aclBufferCount {
                let packet = HCIPacket.acl(ACLPacket(handle: handle, boundary: .firstNonFlushable, data: payload))
                air.receive(fromHost: packet.h4Bytes, controller: 0, at: driver.now)
            }
            guard let next = air.nextDeadline else { break }
            driver.advance(to: min(next, end))
        }
        return Double(driver.received) / (Double((driver.now - start).microseconds) / 1_000_000)
    }

    private struct Driver {
        let air: SimAir
        var now: Duration = .zero
        var framer = H4Framer()
        var received = 0

        init(air: SimAir) { self.air = air }

        mutating func command(_ index: Int, _ opcode: HCIOpcode, _ parameters: [UInt8] = []) {
            send(index, HCICommandPacket(opcode, parameters: parameters))
        }

        mutating func send(_ index: Int, _ command: HCICommandPacket) {
            air.receive(fromHost: HCIPacket.command(command).h4Bytes, controller: index, at: now)
            settle(for: .milliseconds(1))
        }

        mutating func settle(for duration: Duration) {
            let end = now + duration
            while let next = air.nextDeadline, next <= end { advance(to: next) }
            advance(to: end)
        }

        mutating func advance(to time: Duration) {
            now = max(now, time)
            air.advance(to: now)
            _ = air.takeOutput(controller: 0)
            for item in framer.feed(air.takeOutput(controller: 1)) {
                if case .packet(.acl(let acl)) = item { received += acl.data.count }
            }
        }
    }
}
