import BerylIPC
import BerylPandora
import GRPCCore
import XCTest

/// managerd's typed errors as gRPC statuses: the code maps, and every typed code behind it travels as trailing
/// metadata, so a lab reads the SMP reason or ATT error as a number rather than out of the message.
final class LabErrorTests: XCTestCase {
    private func values(_ error: RPCError, _ key: String) -> [String] { Array(error.metadata[stringValues: key]) }

    func testAPairingFailureKeepsItsReasonAndWhoSentIt() {
        let error = RPCError(IPCClientError.remote(code: .securityFailed, message: "pairing failed", field: "",
                                                   detail: RemoteDetail(smpReason: 0x0C, smpReasonFromPeer: true)))
        XCTAssertEqual(error.code, .failedPrecondition)
        XCTAssertEqual(values(error, "beryl-smp-reason"), ["12"])
        XCTAssertEqual(values(error, "beryl-smp-from-peer"), ["true"])
        XCTAssertEqual(values(error, "beryl-ipc-code"), ["\(IPCErrorCode.securityFailed.rawValue)"])
        XCTAssertEqual(values(error, "beryl-att-error"), [], "codes that are not set are not sent")
        XCTAssertEqual(values(error, "beryl-field"), [])
    }

    func testEveryTypedCodeIsCarried() {
        let detail = RemoteDetail(attError: 0x0D, bluetoothError: .peerRemovedPairingInformation, hciStatus: 0x06,
                                  managerReason: .pairingUnderWay, controllerReason: .unresponsive)
        let error = RPCError(IPCClientError.remote(code: .busy, message: "no", field: "handle", detail: detail))
        XCTAssertEqual(error.code, .resourceExhausted)
        XCTAssertEqual(error.message, "no (handle)")
        XCTAssertEqual(values(error, "beryl-field"), ["handle"])
        XCTAssertEqual(values(error, "beryl-att-error"), ["13"])
        XCTAssertEqual(values(error, "beryl-bluetooth-error"), ["\(Beryl_Ipc_V1_BluetoothErrorCode.peerRemovedPairingInformation.rawValue)"])
        XCTAssertEqual(values(error, "beryl-hci-status"), ["6"])
        XCTAssertEqual(values(error, "beryl-manager-reason"), ["\(Beryl_Ipc_V1_ManagerReason.pairingUnderWay.rawValue)"])
        XCTAssertEqual(values(error, "beryl-controller-reason"), ["\(Beryl_Ipc_V1_ControllerReason.unresponsive.rawValue)"])
    }

    func testAStackThatIsNotThereIsUnavailable() {
        XCTAssertEqual(RPCError(IPCClientError.closed).code, .unavailable)
    }
}
