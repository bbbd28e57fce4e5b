import BerylCore
import BerylGAP
import BerylHCI
import BerylManager
import XCTest

/// Who advertises on a controller with one advertiser, and how, by the apps' lifecycle states.
final class AdvertisingRotationTests: XCTestCase {
    private let heartRate = BluetoothUUID(0x180D)
    private let battery = BluetoothUUID(0x180F)

    private func candidate(_ session: UInt64, _ name: String, _ uuid: BluetoothUUID, _ state: LifecycleState, modes: Set<BackgroundMode> = [.peripheral]) -> AdvertisingRotation.Candidate {
        AdvertisingRotation.Candidate(key: ManagerKey(session: session, manager: 1),
                                      advertiser: Advertiser(payload: AdvertisingPayload(localName: name, serviceUUIDs: [uuid]), localName: name, serviceUUIDs: [uuid]),
                                      policy: .of(state, modes: modes))
    }

    private func advertisingData(_ plan: AdvertisingRotation.Plan) -> [UInt8]? {
        guard case .advertise(let commands, _) = plan else { return nil }
        return commands.first { $0.opcode == HCIOpcode.leSetAdvertisingData.rawValue }?.parameters
    }

    func testOneAdvertiserStaysOnAndSeveralTakeTurnsOfASecond() {
        var rotation = AdvertisingRotation()
        let alone = rotation.plan([candidate(1, "HR", heartRate, .foreground)], lab: nil, poweredOn: true, ownAddressRandom: false, at: .zero)
        guard case .advertise(let commands, let rotates) = alone else { return XCTFail("\(alone)") }
        XCTAssertFalse(rotates)
        XCTAssertEqual(commands.first, HCICommands.leSetAdvertisingEnable(false), "parameters change only with advertising off (§7.8.5)")
        XCTAssertEqual(commands.last, HCICommands.leSetAdvertisingEnable(true))

        let both = [candidate(2, "Battery", battery, .foreground), candidate(1, "HR", heartRate, .foreground)]
        let first = rotation.plan(both, lab: nil, poweredOn: true, ownAddressRandom: false, at: .zero)
        guard case .advertise(_, true) = first else { return XCTFail("\(first)") }
        XCTAssertTrue(rotation.tick(at: AdvertisingRotation.turnLength))
        let second = rotation.plan(both, lab: nil, poweredOn: true, ownAddressRandom: false, at: .zero)
        XCTAssertTrue(rotation.tick(at: AdvertisingRotation.turnLength))
        let third = rotation.plan(both, lab: nil, poweredOn: true, ownAddressRandom: false, at: .zero)
        XCTAssertNotEqual(advertisingData(first), advertisingData(second))
        XCTAssertEqual(advertisingData(first), advertisingData(third), "round and round, in session order")
        XCTAssertEqual(advertisingData(first), HCICommands.leSetAdvertisingData(AdvertisingPayload(localName: "HR", serviceUUIDs: [heartRate]).advertising).parameters,
                       "session 1 first, whatever order they were given in")
        XCTAssertEqual(advertisingData(second), HCICommands.leSetAdvertisingData(AdvertisingPayload(localName: "Battery", serviceUUIDs: [battery]).advertising).parameters)
    }

    func testASuspendedAppIsSkippedAndABackgroundOneAdvertisesTheBackgroundForm() throws {
        var rotation = AdvertisingRotation()
        let plan = rotation.plan([candidate(1, "HR", heartRate, .suspended), candidate(2, "Battery", battery, .background)],
                                 lab: nil, poweredOn: true, ownAddressRandom: true, at: .zero)
        guard case .advertise(let commands, let rotates) = plan else { return XCTFail("\(plan)") }
        XCTAssertFalse(rotates, "the suspended app takes no turn")
        let background = AdvertisingPayload.background(serviceUUIDs: [battery])
        XCTAssertEqual(commands[1], HCICommands.leSetAdvertisingParameters(interval: 0x0640, ownAddressRandom: true), "1 s in the background")
        XCTAssertEqual(commands[2], HCICommands.leSetAdvertisingData(background.advertising), "no name, the UUID in the overflow area")
        XCTAssertEqual(commands[3], HCICommands.leSetAdvertisingData(background.scanResponse, scanResponse: true))
        XCTAssertFalse(String(decoding: commands[2].parameters + commands[3].parameters, as: UTF8.self).contains("Battery"), "no local name")
    }

    func testALabSessionTakesTheTurnAfterTheApps() {
        var rotation = AdvertisingRotation()
        let lab = [HCICommands.leSetAdvertisingEnable(false), HCICommands.leSetAdvertisingEnable(true)]
        let apps = [candidate(1, "HR", heartRate, .foreground)]
        guard case .advertise(let first, true) = rotation.plan(apps, lab: lab, poweredOn: true, ownAddressRandom: false, at: .zero) else { return XCTFail() }
        XCTAssertEqual(first.count, 5)
        XCTAssertTrue(rotation.tick(at: AdvertisingRotation.turnLength))
        XCTAssertEqual(rotation.plan(apps, lab: lab, poweredOn: true, ownAddressRandom: false, at: .zero), .advertise(lab, rotates: true))
        XCTAssertEqual(rotation.plan([], lab: lab, poweredOn: true, ownAddressRandom: false, at: .zero), .advertise(lab, rotates: false))
    }

    func testOffIsSentOnlyForAdvertisingThisRotationStarted() {
        var rotation = AdvertisingRotation()
        XCTAssertEqual(rotation.plan([], lab: nil, poweredOn: true, ownAddressRandom: false, at: .zero), .off(disable: false, wanted: false),
                       "a tool's advertising through hcid is left alone")
        _ = rotation.plan([candidate(1, "HR", heartRate, .foreground)], lab: nil, poweredOn: true, ownAddressRandom: false, at: .zero)
        XCTAssertEqual(rotation.plan([candidate(1, "HR", heartRate, .suspended)], lab: nil, poweredOn: true, ownAddressRandom: false, at: .zero),
                       .off(disable: true, wanted: false))
        XCTAssertEqual(rotation.plan([], lab: nil, poweredOn: true, ownAddressRandom: false, at: .zero), .off(disable: false, wanted: false), "once")
        XCTAssertEqual(rotation.plan([candidate(1, "HR", heartRate, .foreground)], lab: nil, poweredOn: false, ownAddressRandom: false, at: .zero),
                       .off(disable: false, wanted: true), "wanted, but the controller is off")
        _ = rotation.plan([candidate(1, "HR", heartRate, .foreground)], lab: nil, poweredOn: true, ownAddressRandom: false, at: .zero)
        rotation.controllerForgot()
        XCTAssertEqual(rotation.plan([], lab: nil, poweredOn: true, ownAddressRandom: false, at: .zero), .off(disable: false, wanted: false),
                       "a reset controller advertises nothing to turn off")
    }
}
