import BerylGATT
import XCTest

/// A client's write without response, planned before anything is sent (Core Vol 3 Part F §3.4.5.3, §3.4.5.4;
/// Part G §4.9.2): the size each form carries, the link's queue, and signing only where the link is not encrypted.
final class WriteCommandTests: XCTestCase {
    func testAPlainWriteCommandCarriesAtMostMTUMinusThree() {
        XCTAssertEqual(WriteCommand.plan(length: 20, mtu: 23, signedAsked: false, encrypted: false, hasRoom: true), .success(.plain))
        XCTAssertEqual(WriteCommand.plan(length: 21, mtu: 23, signedAsked: false, encrypted: false, hasRoom: true),
                       .failure(.tooLong(maximum: 20, signed: false)))
        XCTAssertEqual(WriteCommand.plan(length: 244, mtu: 247, signedAsked: false, encrypted: false, hasRoom: true), .success(.plain))
    }

    func testASignedWriteLeavesRoomForItsSignatureAndIsPlainOnAnEncryptedLink() {
        XCTAssertEqual(WriteCommand.plan(length: 8, mtu: 23, signedAsked: true, encrypted: false, hasRoom: true), .success(.signed))
        XCTAssertEqual(WriteCommand.plan(length: 9, mtu: 23, signedAsked: true, encrypted: false, hasRoom: true),
                       .failure(.tooLong(maximum: 8, signed: true)))
        XCTAssertEqual(WriteCommand.plan(length: 20, mtu: 23, signedAsked: true, encrypted: true, hasRoom: true), .success(.plain),
                       "encrypted already: a Write Without Response is used instead")
    }

    func testAFullQueueRefusesBeforeAnythingIsSigned() {
        XCTAssertEqual(WriteCommand.plan(length: 8, mtu: 23, signedAsked: true, encrypted: false, hasRoom: false), .failure(.queueFull),
                       "a SignCounter is never spent on a write that is not sent")
        XCTAssertEqual(WriteCommand.plan(length: 30, mtu: 23, signedAsked: false, encrypted: false, hasRoom: false),
                       .failure(.tooLong(maximum: 20, signed: false)), "a write too long for any queue says so first")
    }
}
