import Beryl
import BerylIPC
import Foundation
import XCTest

extension CentralManager {
    /// The first peripheral a scan for `service` hears (the async face of scanForPeripherals), or nil if the scan ends.
    func firstDiscovery(of service: BluetoothUUID) async -> Discovery? {
        for await discovery in scan(withServices: [service]) { return discovery }
        return nil
    }

    /// The first peripheral offering `service`, connected and discovered whole (its delegate set first), with its
    /// `characteristic`.
    func connectedCharacteristic(_ characteristic: BluetoothUUID, in service: BluetoothUUID,
                                 delegate: PeripheralDelegate) async throws -> (Peripheral, Characteristic) {
        let discovery = await firstDiscovery(of: service)
        let found = try XCTUnwrap(discovery)
        found.peripheral.delegate = delegate
        try await connected(to: found.peripheral)
        let services = try await found.peripheral.services(discovering: nil)
        let value = try XCTUnwrap(services.flatMap { $0.characteristics ?? [] }.first { $0.uuid == characteristic })
        return (found.peripheral, value)
    }
}

/// hcid's monitor on one stack: what its host sends to the controller and what the controller sends up.
final class HCIMonitor {
    private let client: IPCClient

    init(hcidSocket: String) throws {
        client = try IPCClient(path: hcidSocket)
        var subscribe = Request()
        subscribe.hci.subscribe.monitor = true
        _ = try client.call(subscribe)
    }

    /// The H4 packets in one direction within `duration`, stopping early after the first that `done` accepts.
    private func packets(received: Bool, within duration: Duration, until done: ([UInt8]) -> Bool) -> [[UInt8]] {
        var found: [[UInt8]] = []
        let deadline = ContinuousClock.now + duration
        while ContinuousClock.now < deadline {
            guard let envelope = try? client.receive(timeout: .milliseconds(100)), case .event(let event)? = envelope.body,
                  case .monitor(let packet)? = event.hci.kind, packet.received == received else { continue }
            found.append(Array(packet.h4))
            if done(found[found.count - 1]) { break }
        }
        return found
    }

    /// The ATT PDUs sent: H4 ACL (0x02), handle and length (4), L2CAP length and CID 0x0004, then the PDU.
    func sentPDUs(within duration: Duration, until done: ([UInt8]) -> Bool = { _ in false }) -> [[UInt8]] {
        func pdu(_ h4: [UInt8]) -> [UInt8]? { h4.count >= 10 && h4[0] == 0x02 && h4[7] == 0x04 && h4[8] == 0x00 ? Array(h4[9...]) : nil }
        return packets(received: false, within: duration) { pdu($0).map(done) ?? false }.compactMap(pdu)
    }

    /// The first LE Meta event with this subevent code the controller sent up, from the subevent code on; nil if none.
    func leEvent(_ subevent: UInt8, within duration: Duration) -> [UInt8]? {
        func matches(_ h4: [UInt8]) -> Bool { h4.count > 3 && h4[0] == 0x04 && h4[1] == 0x3E && h4[3] == subevent }
        return packets(received: true, within: duration, until: matches).last(where: matches).map { Array($0[3...]) }
    }
}

extension PeripheralManager {
    /// Publishes one primary service holding `characteristic` and advertises it under `name`.
    func publishAndAdvertise(_ characteristic: MutableCharacteristic, in service: BluetoothUUID, as name: String) async throws {
        let published = MutableService(type: service, primary: true)
        published.characteristics = [characteristic]
        try await add(published)
        startAdvertising(AdvertisingOptions(localName: name, serviceUUIDs: [service]))
    }
}
