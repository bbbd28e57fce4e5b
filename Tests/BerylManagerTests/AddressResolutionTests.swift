import BerylCore
import BerylManager
import XCTest

/// `beryl gatt --peer F0:F0:F0:F0:F0:01` means the device the user just saw, whatever its type.
final class AddressResolutionTests: XCTestCase {
    let bits = BDAddress("F0:F0:F0:F0:F0:01")!
    var bare: AddressQuery { AddressQuery(bits, type: nil) }
    var publicOne: DeviceAddress { DeviceAddress(bits, type: .public) }
    var randomOne: DeviceAddress { DeviceAddress(bits, type: .random) }

    func testABareAddressHeardOnlyAsRandomMeansTheRandomDevice() {
        XCTAssertEqual(try AddressResolution.resolve(bare, known: [(randomOne, true)]).get(), randomOne)
    }

    func testAHeardDeviceWinsOverOneOnlyNamedBefore() {
        XCTAssertEqual(try AddressResolution.resolve(bare, known: [(publicOne, false), (randomOne, true)]).get(), randomOne)
    }

    func testABareAddressNobodyHeardIsPublicAsBefore() {
        XCTAssertEqual(try AddressResolution.resolve(bare, known: []).get(), publicOne)
        XCTAssertEqual(try AddressResolution.resolve(bare, known: [(DeviceAddress(BDAddress("F0:F0:F0:F0:F0:02")!, type: .random), true)]).get(),
                       publicOne, "another device's bits do not count")
    }

    func testBothTypesHeardIsRefusedNamingBoth() {
        guard case .failure(let ambiguous) = AddressResolution.resolve(bare, known: [(randomOne, true), (publicOne, true)]) else {
            return XCTFail("two devices heard with the same bits must not be guessed between")
        }
        XCTAssertEqual(ambiguous.candidates, [publicOne, randomOne])
        XCTAssertTrue(ambiguous.description.contains("F0:F0:F0:F0:F0:01 and F0:F0:F0:F0:F0:01/random"), ambiguous.description)
    }

    func testATypedAddressMeansItselfWhateverWasHeard() {
        let typed = AddressQuery(bits, type: .public)
        XCTAssertEqual(try AddressResolution.resolve(typed, known: [(randomOne, true)]).get(), publicOne)
        XCTAssertEqual(AddressQuery("F0:F0:F0:F0:F0:01/random"), AddressQuery(bits, type: .random))
        XCTAssertEqual(AddressQuery("F0:F0:F0:F0:F0:01"), bare)
        XCTAssertNil(AddressQuery("F0:F0:F0:F0:F0:01/other"))
    }
}
