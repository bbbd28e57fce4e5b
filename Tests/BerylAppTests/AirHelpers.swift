import Beryl
import BerylIPC
import BerylStack
import Foundation
import XCTest

extension CentralManager {
    /// The first peripheral a scan for `service` hears (the async face of scanForPeripherals), or nil if the scan ends.
    func firstDiscovery(of service: BluetoothUUID) async -> Discovery? {
        for await discovery in scan(withServices: [service]) { return discovery }
        return nil
    }
}

/// hcid's monitor on one stack: the ATT PDUs its host sends, as they go to the controller.
final class ATTMonitor {
    private let client: IPCClient

    init(hcidSocket: String) throws {
        client = try IPCClient(path: hcidSocket)
        var subscribe = Request()
        subscribe.hci.subscribe.monitor = true
        _ = try client.call(subscribe)
    }

    /// The PDUs sent within `duration`, stopping early after the first that `done` accepts.
    func sentPDUs(within duration: Duration, until done: ([UInt8]) -> Bool = { _ in false }) -> [[UInt8]] {
        var found: [[UInt8]] = []
        let deadline = ContinuousClock.now + duration
        while ContinuousClock.now < deadline {
            guard let envelope = try? client.receive(timeout: .milliseconds(100)), case .event(let event)? = envelope.body,
                  case .monitor(let packet)? = event.hci.kind, !packet.received else { continue }
            let h4 = Array(packet.h4)
            // H4 ACL (0x02), handle and length (4), L2CAP length and CID 0x0004 (ATT), then the PDU.
            guard h4.count >= 10, h4[0] == 0x02, h4[7] == 0x04, h4[8] == 0x00 else { continue }
            found.append(Array(h4[9...]))
            if done(found[found.count - 1]) { break }
        }
        return found
    }
}
