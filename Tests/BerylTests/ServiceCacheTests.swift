@testable import Beryl
import XCTest

/// What a primary service discovery leaves in `peripheral.services`, without processes: the discovery is the truth
/// for what it looked for.
final class ServiceCacheTests: XCTestCase {
    private let thermostat = BluetoothUUID("7E570001-0000-1000-8000-00805F9B34FB")!
    private let battery = BluetoothUUID(0x180F)

    private func service(_ uuid: BluetoothUUID, _ range: ClosedRange<UInt32>, primary: Bool = true) -> Service {
        Service(uuid: uuid, isPrimary: primary, range: range, peripheral: nil)
    }

    /// The fault suite's failure (kill -9 managerd on the peripheral side, seeds 9001 and 11004): the thermostat's
    /// service moved from 14–19 to 20–25 and the Service Changed for 14–19 crossed the app's discovery, which kept
    /// the stale copy first in `services`; the app subscribed through it and heard Invalid Handle, never a value.
    func testAServiceTheDiscoveryLookedForAndDidNotFindIsGone() {
        let stale = service(thermostat, 14...19)
        let kept = service(battery, 1...5)
        let moved = service(thermostat, 20...25)
        let merged = Peripheral.merged([kept, stale], found: [moved], lookingFor: [thermostat])
        XCTAssertEqual(merged.map(\.range), [1...5, 20...25], "the battery service was not looked for, so it stays")
        XCTAssertTrue(merged.last === moved)
    }

    func testAServiceFoundAgainKeepsItsObject() {
        let known = service(thermostat, 14...19)
        let merged = Peripheral.merged([known], found: [service(thermostat, 14...19)], lookingFor: [thermostat])
        XCTAssertEqual(merged.count, 1)
        XCTAssertTrue(merged[0] === known, "the app's references (and their characteristics) stay valid")
    }

    func testADiscoveryOfEveryServiceIsTheTruthForAllButSecondaryOnes() {
        let secondary = service(battery, 30...33, primary: false)
        let gone = service(battery, 1...5)
        let merged = Peripheral.merged([gone, secondary], found: [service(thermostat, 14...19)], lookingFor: nil)
        XCTAssertEqual(merged.map(\.range), [14...19, 30...33])
        XCTAssertEqual(Peripheral.merged([gone], found: [], lookingFor: []).count, 0, "an empty list is every service, as nil")
    }
}
