import BerylCore
import BerylCrypto
import XCTest

/// Core Vol 3 Part H Appendix D sample data (and the worked c1/s1 examples of §2.2.3–2.2.4), most significant octet first.
final class SMPToolboxTests: XCTestCase {
    private func h(_ text: String) -> [UInt8] { Hex.decode(text.replacingOccurrences(of: " ", with: ""))! }

    private let publicAX = "20b003d2 f297be2c 5e2c83a7 e9f9a5b9 eff49111 acf4fddb cc030148 0e359de6"
    private let privateB = "55188b3d 32f6bb9a 900afcfb eed4e72a 59cb9ac2 f19d7cfb 6b4fdd49 f47fc5fd"
    private let dhKey = "ec0234a3 57c8ad05 341010a6 0a397d9b 99796b13 b4f866f1 868d34f3 73bfa698"
    private let n1 = "d5cb8454 d177733e ffffb2ec 712baeab"
    private let n2 = "a6e8e7cc 25a75f6e 216583f7 ff3dc4cf"
    private let a1 = "00561237 37bfce"
    private let a2 = "00a71370 2dcfc1"

    func testD2_f4() throws {
        XCTAssertEqual(Hex.encode(try SMPToolbox.f4(u: h(publicAX), v: h(privateB), x: h(n1), z: 0)), "f2c916f107a9bd1cf1eda1bea974872d")
    }

    func testD3_f5() throws {
        let keys = try SMPToolbox.f5(w: h(dhKey), n1: h(n1), n2: h(n2), a1: h(a1), a2: h(a2))
        XCTAssertEqual(Hex.encode(keys.macKey), "2965f176a1084a02fd3f6a20ce636e20")
        XCTAssertEqual(Hex.encode(keys.ltk), "6986791169d7cd23980522b594750a38")
    }

    func testD4_f6() throws {
        let check = try SMPToolbox.f6(w: h("2965f176 a1084a02 fd3f6a20 ce636e20"), n1: h(n1), n2: h(n2), r: h("12a3343b b453bb54 08da42d2 0c2d0fc8"),
                                      ioCap: h("010102"), a1: h(a1), a2: h(a2))
        XCTAssertEqual(Hex.encode(check), "e3c473989cd0e8c5d26c0b09da958f61")
    }

    func testD5_g2() throws {
        let value = try SMPToolbox.g2(u: h(publicAX), v: h(privateB), x: h(n1), y: h(n2))
        XCTAssertEqual(value, 0x2f9e_d5ba)
        XCTAssertEqual(value % 1_000_000, 938_554, "the six digits both sides show")
    }

    func testD6_h6_and_D8_h7() throws {
        let key = h("ec0234a3 57c8ad05 341010a6 0a397d9b")
        XCTAssertEqual(Hex.encode(try SMPToolbox.h6(w: key, keyID: h("6c656272"))), "2d9ae102e76dc91ce8d3a9e280b16399")
        XCTAssertEqual(Hex.encode(try SMPToolbox.h7(salt: h("00000000 00000000 00000000 746D7031"), w: key)), "fb173597c6a3c0ecd2998c2a75a57011")
    }

    func testD7_ah() throws {
        XCTAssertEqual(Hex.encode(try SMPToolbox.ah(k: h("ec0234a3 57c8ad05 341010a6 0a397d9b"), r: h("708194"))), "0dfbaa")
    }

    func testLegacy_c1_and_s1() throws {
        let zero = [UInt8](repeating: 0, count: 16)
        let confirm = try SMPToolbox.c1(k: zero, r: h("5783D521 56AD6F0E 6388274E C6702EE0"), preq: h("07071000000101"), pres: h("05000800000302"),
                                        iat: 1, rat: 0, ia: h("A1A2A3A4A5A6"), ra: h("B1B2B3B4B5B6"))
        XCTAssertEqual(Hex.encode(confirm), "1e1e3fef878988ead2a74dc5bef13b86")
        let stk = try SMPToolbox.s1(k: zero, r1: h("000F0E0D 0C0B0A09 11223344 55667788"), r2: h("01020304 05060708 99AABBCC DDEEFF00"))
        XCTAssertEqual(Hex.encode(stk), "9a1fe1f0e8b0f49b5b4216ae796da062")
    }

    /// The P-256 sample data: private A is also the Secure Connections debug key (§2.3.5.6.1).
    func testP256SampleKeysAgreeOnTheSampleDHKey() throws {
        let a = try P256KeyPair(privateKey: h("3f49f6d4 a3c55f38 74c9b3e3 d2103f50 4aff607b eb40b799 5899b8a6 cd3c1abd"))
        XCTAssertEqual(Hex.encode(a.publicX), Hex.encode(h(publicAX)))
        XCTAssertEqual(Hex.encode(a.publicY), "dc809c49652aeb6d63329abf5a52155c766345c28fed3024741c8ed01589d28b")
        let shared = try a.sharedSecret(peerX: h("1ea1f0f0 1faf1d96 09592284 f19e4c00 47b58afd 8615a69f 559077b2 2faaa190"),
                                        peerY: h("4c55f33e 429dad37 7356703a 9ab85160 472d1130 e28e3676 5f89aff9 15b1214a"))
        XCTAssertEqual(Hex.encode(shared), Hex.encode(h(dhKey)))
    }

    func testWrongLengthsAreTypedErrors() {
        XCTAssertThrowsError(try SMPToolbox.f4(u: [1], v: [], x: [], z: 0)) { XCTAssertEqual($0 as? CryptoError, .invalidLength(expected: 32, got: 1)) }
        XCTAssertThrowsError(try SMPToolbox.ah(k: [UInt8](repeating: 0, count: 16), r: [1, 2])) {
            XCTAssertEqual($0 as? CryptoError, .invalidLength(expected: 3, got: 2))
        }
    }
}

/// The signing vectors BlueZ (unit/test-crypto.c) and Zephyr (smp.c's self test) share: RFC 4493's key and message,
/// the key in wire order, SignCounter 0.
final class DataSigningTests: XCTestCase {
    let csrk: [UInt8] = [0x3C, 0x4F, 0xCF, 0x09, 0x88, 0x15, 0xF7, 0xAB, 0xA6, 0xD2, 0xAE, 0x28, 0x16, 0x15, 0x7E, 0x2B]
    let message: [UInt8] = [
        0x6B, 0xC1, 0xBE, 0xE2, 0x2E, 0x40, 0x9F, 0x96, 0xE9, 0x3D, 0x7E, 0x11, 0x73, 0x93, 0x17, 0x2A,
        0xAE, 0x2D, 0x8A, 0x57, 0x1E, 0x03, 0xAC, 0x9C, 0x9E, 0xB7, 0x6F, 0xAC, 0x45, 0xAF, 0x8E, 0x51,
        0x30, 0xC8, 0x1C, 0x46, 0xA3, 0x5C, 0xE4, 0x11, 0xE5, 0xFB, 0xC1, 0x19, 0x1A, 0x0A, 0x52, 0xEF,
        0xF6, 0x9F, 0x24, 0x45, 0xDF, 0x4F, 0x9B, 0x17, 0xAD, 0x2B, 0x41, 0x7B, 0xE6, 0x6C, 0x37, 0x10,
    ]

    func testTheSharedVectors() throws {
        let expected: [(Int, [UInt8])] = [
            (0, [0xB3, 0xA8, 0x59, 0x41, 0x27, 0xEB, 0xC2, 0xC0]),
            (16, [0x27, 0x39, 0x74, 0xF4, 0x39, 0x2A, 0x23, 0x2A]),
            (40, [0xB7, 0xCA, 0x94, 0xAB, 0x87, 0xC7, 0x82, 0x18]),
            (64, [0x44, 0xE1, 0xE6, 0xCE, 0x1D, 0xF5, 0x13, 0x68]),
        ]
        for (length, mac) in expected {
            XCTAssertEqual(try DataSigning.signature(csrk: csrk, message: Array(message.prefix(length)), counter: 0), [0, 0, 0, 0] + mac, "\(length) octets")
        }
    }

    func testVerificationNeedsTheKeyTheMessageAndTheCounter() throws {
        let signed = try DataSigning.signature(csrk: csrk, message: Array(message.prefix(7)), counter: 0x0102_0304)
        XCTAssertEqual(Array(signed.prefix(4)), [0x04, 0x03, 0x02, 0x01], "the counter leads, least significant octet first")
        XCTAssertEqual(DataSigning.verify(csrk: csrk, message: Array(message.prefix(7)), signature: signed).valid, true)
        XCTAssertEqual(DataSigning.verify(csrk: csrk, message: Array(message.prefix(7)), signature: signed).counter, 0x0102_0304)
        XCTAssertFalse(DataSigning.verify(csrk: csrk, message: Array(message.prefix(6)), signature: signed).valid, "another message")
        XCTAssertFalse(DataSigning.verify(csrk: Array(csrk.reversed()), message: Array(message.prefix(7)), signature: signed).valid, "another key")
        var replayed = signed
        replayed[0] = 0x05
        XCTAssertFalse(DataSigning.verify(csrk: csrk, message: Array(message.prefix(7)), signature: replayed).valid, "the counter is signed")
        XCTAssertFalse(DataSigning.verify(csrk: csrk, message: [], signature: [1, 2]).valid, "short")
    }
}
