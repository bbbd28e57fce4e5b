import BerylCore
import BerylGAP
import BerylStore
import Foundation
import XCTest

final class PeripheralStoreTests: XCTestCase {
    func testIdentifiersAreStableAcrossReopening() throws {
        let path = NSTemporaryDirectory() + "beryl-peripherals-\(UUID().uuidString).sqlite"
        defer { try? FileManager.default.removeItem(atPath: path) }
        let address = DeviceAddress("C0:00:00:00:00:01/random")!
        let identifier: String
        do {
            let store = try PeripheralStore(path: path)
            identifier = store.seen(address, name: "Lock", at: 1000).identifier
            XCTAssertEqual(store.seen(address, at: 1001).identifier, identifier)
            XCTAssertNotNil(UUID(uuidString: identifier))
            XCTAssertNotEqual(store.seen(DeviceAddress("C0:00:00:00:00:01")!, at: 1002).identifier, identifier, "public and random are different devices")
        }
        let reopened = try PeripheralStore(path: path)
        XCTAssertEqual(reopened.device(identifier)?.address, address)
        XCTAssertEqual(reopened.device(identifier)?.name, "Lock")
        XCTAssertEqual(reopened.count, 2)
    }
}
