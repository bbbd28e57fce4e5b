import BerylCore
import BerylGAP
import BerylHCI
import BerylManager
import XCTest

/// The core's one clock: `nextDeadline` is the earliest of its parts' deadlines, and `tick` runs what came due, so
/// that the shell keeps a single timer.
final class ManagerCoreClockTests: XCTestCase {
    private typealias Core = ManagerCore<String>
    private let lock = DeviceAddress("C0:FF:EE:00:00:01/random")!
    private let plainApp = "com.example.plain"

    private func suspension(in outputs: [Core.Output]) -> (String, Duration)? {
        for output in outputs { if case .suspended(let appID, let after) = output { return (appID, after) } }
        return nil
    }

    func testOneDeadlineForEveryPartAndATickRunsOnlyWhatCameDue() {
        var core = Core(suspendAfter: .seconds(5))
        _ = core.connections.controller(poweredOn: true)
        // A foreground-only app (no manifest) goes to the background at 10 s: it is suspended at 15 s.
        _ = core.hello(3, appID: plainApp, uid: 1003, restoreID: "", role: .central)
        _ = core.setLifecycle(plainApp, .background, at: .seconds(10))
        XCTAssertEqual(core.nextDeadline, .seconds(15))

        // A connection attempt the controller refuses at 12 s is made again a second later: the earlier deadline.
        let attempt = core.connections.connect(ManagerKey(session: 3, manager: 1), identifier: "L", address: lock)
        guard case .controller(let action)? = attempt.last else { return XCTFail("no attempt: \(attempt)") }
        XCTAssertTrue(core.connections.answered(action, status: 0x0C, at: .seconds(12)), "Command Disallowed")
        XCTAssertEqual(core.nextDeadline, .seconds(13))

        XCTAssertTrue(core.tick(at: .milliseconds(12_999)).isEmpty, "nothing is due early")
        let retry = core.tick(at: .seconds(13))
        let retried: [CentralConnections.Output] = retry.compactMap { if case .connections(let output) = $0 { output } else { nil } }
        XCTAssertEqual(retried, [.controller(action)])
        XCTAssertNil(suspension(in: retry), "the suspension is not due yet")
        XCTAssertEqual(core.nextDeadline, .seconds(15))

        let suspended = core.tick(at: .seconds(15))
        XCTAssertEqual(suspension(in: suspended)?.0, plainApp)
        XCTAssertEqual(suspension(in: suspended)?.1, .seconds(5))
        XCTAssertEqual(core.lifecycle(of: plainApp), .suspended)
        XCTAssertNil(core.nextDeadline, "nothing waits any more")
        XCTAssertTrue(core.tick(at: .seconds(30)).isEmpty, "and nothing comes twice")
    }

    private func advertisingData(_ plan: AdvertisingRotation.Plan) -> [UInt8]? {
        guard case .advertise(let commands, _) = plan else { return nil }
        return commands.first { $0.opcode == HCIOpcode.leSetAdvertisingData.rawValue }?.parameters
    }

    /// Two advertising apps take turns of a second on the controller's one advertiser: the turn's end is the core's
    /// deadline (managerd kept a timer of its own for it), and one advertiser alone keeps it with none.
    func testAnAdvertisersTurnEndsOnTheCoresClock() {
        var core = Core()
        let heartRate = ManagerKey(session: 1, manager: 1), battery = ManagerKey(session: 2, manager: 1)
        _ = core.startAdvertising(Advertiser(localName: "HR", serviceUUIDs: [BluetoothUUID(0x180D)]), for: heartRate)
        _ = core.startAdvertising(Advertiser(localName: "Battery", serviceUUIDs: [BluetoothUUID(0x180F)]), for: battery)

        let first = core.planAdvertising(lab: nil, poweredOn: true, ownAddressRandom: false, at: .seconds(2))
        XCTAssertEqual(advertisingData(first), HCICommands.leSetAdvertisingData(AdvertisingPayload(localName: "HR", serviceUUIDs: [BluetoothUUID(0x180D)]).advertising).parameters)
        XCTAssertEqual(core.nextDeadline, .seconds(3), "the turn's second")
        XCTAssertTrue(core.tick(at: .milliseconds(2_999)).isEmpty)
        let turned = core.tick(at: .seconds(3))
        XCTAssertTrue(turned.contains { if case .advertisingChanged = $0 { true } else { false } }, "\(turned)")
        XCTAssertNil(core.nextDeadline, "until the shell plans the next turn")
        let second = core.planAdvertising(lab: nil, poweredOn: true, ownAddressRandom: false, at: .seconds(3))
        XCTAssertEqual(advertisingData(second), HCICommands.leSetAdvertisingData(AdvertisingPayload(localName: "Battery", serviceUUIDs: [BluetoothUUID(0x180F)]).advertising).parameters)
        XCTAssertEqual(core.nextDeadline, .seconds(4))

        // The battery app stops in the middle of its turn: the one left advertises without turns.
        _ = core.stopAdvertising(for: battery)
        guard case .advertise(_, let rotates) = core.planAdvertising(lab: nil, poweredOn: true, ownAddressRandom: false, at: .milliseconds(3_500)) else {
            return XCTFail("the heart-rate app still advertises")
        }
        XCTAssertFalse(rotates)
        XCTAssertNil(core.nextDeadline, "one advertiser alone needs no turns")
        XCTAssertTrue(core.tick(at: .seconds(10)).isEmpty)
    }
}
