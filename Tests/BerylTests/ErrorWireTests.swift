@testable import Beryl
import BerylIPC
import XCTest

/// Every error the library can be given crosses the wire as bytes and comes back as the same typed error, from its
/// typed fields alone: the message is replaced by one that names nothing, so no code can come from text.
final class ErrorWireTests: XCTestCase {
    private static let opaque = "(message withheld)"

    private func roundTrip(_ code: IPCErrorCode, field: String = "", _ detail: RemoteDetail = RemoteDetail(), file: StaticString = #filePath,
                           line: UInt = #line) throws -> BerylError {
        // As the library's session takes an answer: through the correlator, then to BerylError.
        var pending = PendingRequests<Void>()
        let id = pending.add(())
        let sent = Envelope.response(.error(code, Self.opaque, field: field, detail: detail), to: id)
        let received = try Envelope(serializedBytes: sent.serializedBytes() as [UInt8])
        XCTAssertEqual(received.requestID, id, file: file, line: line)
        guard let (_, outcome) = pending.answer(received), case .failure(let error) = outcome.mapError(BerylError.init) else {
            XCTFail("not an error: \(received)", file: file, line: line)
            throw CancellationError()
        }
        return error
    }

    func testEveryCoreBluetoothCode() throws {
        for code in BluetoothError.Code.allCases {
            let wire = try XCTUnwrap(Beryl_Ipc_V1_BluetoothErrorCode(rawValue: code.rawValue + 1))
            let error = try roundTrip(.notFound, RemoteDetail(bluetoothError: wire))
            XCTAssertEqual(error, .bluetooth(code, Self.opaque))
            XCTAssertEqual((error.coreBluetoothError as? BluetoothError)?.code, code)
        }
    }

    func testEveryATTCodeIncludingTheApplicationRange() throws {
        for byte in UInt8(1)...UInt8(0xFF) {
            let error = try roundTrip(.invalidArgument, field: "att_error", RemoteDetail(attError: byte))
            XCTAssertEqual(error, .att(code: byte, message: Self.opaque))
            XCTAssertEqual((error.coreBluetoothError as? ATTError)?.code.rawValue, Int(byte))
        }
    }

    func testEverySMPReasonFromEitherSide() throws {
        for reason in UInt8(1)...UInt8(0x0F) {
            for byPeer in [false, true] {
                let error = try roundTrip(.securityFailed, RemoteDetail(smpReason: reason, smpReasonFromPeer: byPeer))
                XCTAssertEqual(error, .pairingFailed(reason: reason, byPeer: byPeer, Self.opaque))
                XCTAssertEqual((error.coreBluetoothError as? ATTError)?.code, .insufficientAuthentication)
                // Core Bluetooth's userInfo keeps the failure beneath: the reason survives for whoever looks.
                XCTAssertEqual((error.coreBluetoothError as? ATTError)?.underlyingError, .pairingFailed(reason: reason, byPeer: byPeer, Self.opaque))
            }
        }
    }

    func testAnEncryptionFailureKeepsItsHCIStatusAndALostBondIsCoreBluetooths() throws {
        let encryption = try roundTrip(.securityFailed, RemoteDetail(hciStatus: 0x3D))
        XCTAssertEqual(encryption, .encryptionFailed(status: 0x3D, Self.opaque))
        XCTAssertEqual((encryption.coreBluetoothError as? ATTError)?.underlyingError, encryption)
        XCTAssertEqual(try roundTrip(.notReady, RemoteDetail(hciStatus: 0x0C)), .notPoweredOn, "a status outside a security failure is not an encryption failure")
        let lost = try roundTrip(.securityFailed, RemoteDetail(bluetoothError: .peerRemovedPairingInformation, hciStatus: 0x06))
        XCTAssertEqual(lost, .bluetooth(.peerRemovedPairingInformation, Self.opaque))
    }

    func testEveryControllerReason() throws {
        let expected: [(Beryl_Ipc_V1_ControllerReason, BerylError.ControllerFailure)] = [
            (.unresponsive, .unresponsive), (.resetting, .resetting), (.notReady, .notReady), (.reservedCommand, .reservedCommand),
        ]
        XCTAssertEqual(expected.count, Beryl_Ipc_V1_ControllerReason.allCases.count - 1, "a new reason needs a case here")
        for (wire, failure) in expected {
            XCTAssertEqual(try roundTrip(.timeout, RemoteDetail(controllerReason: wire)), .controller(failure, Self.opaque))
        }
    }

    /// managerd's reasons are broken API rules, whatever field they name; pairing under way is only a busy link.
    func testEveryManagerReasonIsMisuseButPairingUnderWay() throws {
        XCTAssertEqual(try roundTrip(.busy, RemoteDetail(managerReason: .pairingUnderWay)), .busy(Self.opaque))
        for reason in Beryl_Ipc_V1_ManagerReason.allCases where reason != .unspecified && reason != .pairingUnderWay {
            XCTAssertEqual(try roundTrip(.notFound, field: "anything", RemoteDetail(managerReason: reason)), .apiMisuse(Self.opaque))
        }
        XCTAssertEqual(try roundTrip(.notFound, field: "id"), .failed("notFound: \(Self.opaque)"), "a field name alone decides nothing")
    }

    func testTheIPCCodesThatStandAlone() throws {
        XCTAssertEqual(try roundTrip(.notReady), .notPoweredOn)
        XCTAssertEqual(try roundTrip(.permissionDenied), .permissionDenied(Self.opaque))
        XCTAssertEqual(try roundTrip(.busy), .busy(Self.opaque))
        XCTAssertEqual(try roundTrip(.invalidArgument, field: "value"), .invalidArgument(Self.opaque))
        XCTAssertEqual(try roundTrip(.missingField, field: "peripheral"), .invalidArgument(Self.opaque))
        XCTAssertEqual(try roundTrip(.internal), .failed("internal: \(Self.opaque)"))
    }
}
