import Beryl
import BerylDaemonKit
import BerylSupervisor
import BerylTestSupport
import BerylWire
import Dispatch
import Foundation
import XCTest

private final class StateRecorder: PeripheralManagerDelegate, Sendable {
    let recorder = Recorder()
    func peripheralManagerDidUpdateState(_ peripheral: PeripheralManager) { recorder.note("state \(peripheral.state)") }
}

/// attd's restart closes every data channel; an app whose session with managerd stays asks managerd for a new one
/// (RenewDataChannel), and its values go on that, not through managerd.
final class DataChannelRenewalTests: TwoStacksTestCase {
    private func counters() throws -> Beryl_Ipc_V1_DataPlaneCounters {
        try IPCClient(path: "\(scratch.root)/run1/attd.sock").call(.with { $0.getStatus = .init() }).status.dataPlane
    }

    private func publishAndUpdate(_ manager: PeripheralManager) async throws {
        let characteristic = MutableCharacteristic(type: BluetoothUUID(0xFFF1), properties: .notify, value: nil, permissions: .readable)
        let service = MutableService(type: BluetoothUUID(0xFFE0), primary: true)
        service.characteristics = [characteristic]
        try await manager.add(service)
        XCTAssertTrue(manager.updateValue(Data([1]), for: characteristic, onSubscribedCentrals: nil))
    }

    func testAnAppGetsANewChannelWhenAttdRestartsAndItsValuesGoOnIt() async throws {
        let app = StateRecorder()
        let manager = PeripheralManager(delegate: app, queue: DispatchQueue(label: "app"), socketPath: socket(1))
        XCTAssertNotNil(app.recorder.wait(for: "state poweredOn"))
        try await publishAndUpdate(manager)
        XCTAssertTrue(eventually { ((try? self.counters())?.channelValues ?? 0) == 1 }, "the value went on the data channel")

        let run = "\(scratch.root)/run1"
        let before = app.recorder.all.count
        try scratch.crash("attd1", socket: run + "/attd.sock")
        XCTAssertTrue(eventually { app.recorder.all.dropFirst(before).contains { $0.hasPrefix("state ") && $0 != "state poweredOn" } },
                      "the app hears the stack reset: \(app.recorder.all)")
        try scratch.start("attd1-again", [Executables.path("attd"), "--runtime-dir", run, "--state-dir", "\(scratch.root)/state1"],
                          socket: run + "/attd.sock")
        XCTAssertTrue(eventually(.seconds(15)) { app.recorder.all.dropFirst(before).contains("state poweredOn") }, "\(app.recorder.all)")
        XCTAssertTrue(eventually { ((try? self.counters())?.channels ?? 0) == 1 }, "the app's session asked the new attd for a channel")

        // As Core Bluetooth's rule after a reset: the app adds its service again, and updates.
        try await publishAndUpdate(manager)
        XCTAssertTrue(eventually { ((try? self.counters())?.channelValues ?? 0) == 1 }, "on the new channel: \(String(describing: try? counters()))")
        XCTAssertEqual(try counters().publisherValues, 0, "not through managerd")
        withExtendedLifetime(manager) {}
    }
}
