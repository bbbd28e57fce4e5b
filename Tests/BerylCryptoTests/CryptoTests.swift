import BerylCore
import BerylCrypto
import XCTest

final class CryptoTests: XCTestCase {
    // RFC 4493 §4 examples.
    func testAESCMACMatchesRFC4493() throws {
        let key = try XCTUnwrap(Hex.decode("2b7e151628aed2a6abf7158809cf4f3c"))
        XCTAssertEqual(Hex.encode(try AES.cmac(key: key, message: [])), "bb1d6929e95937287fa37d129b756746")
        let block = try XCTUnwrap(Hex.decode("6bc1bee22e409f96e93d7e117393172a"))
        XCTAssertEqual(Hex.encode(try AES.cmac(key: key, message: block)), "070a16b46b4d4144f79bdd9dd04a287c")
        let forty = try XCTUnwrap(Hex.decode("6bc1bee22e409f96e93d7e117393172aae2d8a571e03ac9c9eb76fac45af8e5130c81c46a35ce411"))
        XCTAssertEqual(Hex.encode(try AES.cmac(key: key, message: forty)), "dfa66747de9ae63030ca32611497c827")
    }

    func testKeyLengthsAreChecked() {
        XCTAssertThrowsError(try AES.cmac(key: [1, 2, 3], message: [])) { XCTAssertEqual($0 as? CryptoError, .invalidLength(expected: 16, got: 3)) }
        XCTAssertThrowsError(try AES.encrypt(key: [UInt8](repeating: 0, count: 16), block: [0])) {
            XCTAssertEqual($0 as? CryptoError, .invalidLength(expected: 16, got: 1))
        }
    }

    func testECDHAgreesBetweenTwoFreshKeyPairs() throws {
        let alice = try P256KeyPair.generate()
        let bob = try P256KeyPair.generate()
        XCTAssertNotEqual(alice.privateKey, bob.privateKey)
        let one = try alice.sharedSecret(peerX: bob.publicX, peerY: bob.publicY)
        let other = try bob.sharedSecret(peerX: alice.publicX, peerY: alice.publicY)
        XCTAssertEqual(one, other)
        XCTAssertEqual(one.count, 32)
        // The public key is recomputed from the private one exactly.
        let again = try P256KeyPair(privateKey: alice.privateKey)
        XCTAssertEqual(again.publicX, alice.publicX)
        XCTAssertEqual(again.publicY, alice.publicY)
    }

    func testAPointOffTheCurveIsRefused() throws {
        let mine = try P256KeyPair.generate()
        var badY = mine.publicY
        badY[31] ^= 0x01
        XCTAssertThrowsError(try mine.sharedSecret(peerX: mine.publicX, peerY: badY)) { XCTAssertEqual($0 as? CryptoError, .invalidPublicKey) }
    }
}
