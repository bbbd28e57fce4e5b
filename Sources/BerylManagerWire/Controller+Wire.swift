import BerylWire

// How an HCI command managerd runs for an app's request (Read RSSI, a connection update, a lab's Disconnect) is
// answered: one shape for every such request, the controller's status carried typed rather than only in the text.

/// What an app's request that ran one HCI command through hcid came to.
public enum ControllerAnswer {
    /// The command's return parameters after its status when the controller took it (a Command Status has none);
    /// refused, the status in the detail with the Core Bluetooth error it reads as; hcid out of reach, not ready.
    public static func outcome(_ result: Result<[UInt8], IPCClientError>, of command: String) -> Result<ArraySlice<UInt8>, WireFailure> {
        switch result {
        case .success(let parameters) where parameters.first == 0:
            return .success(parameters.dropFirst())
        case .success(let parameters):
            let status = parameters.first ?? 0xFF
            // Unknown Connection Identifier: the link is gone (a lab's Disconnect racing its end reads it as gone already).
            let code: IPCErrorCode = status == 0x02 ? .notFound : .unsupported
            return .failure(WireFailure(code, "the controller refused \(command) (HCI status 0x\(String(status, radix: 16)))",
                                        detail: RemoteDetail(bluetoothError: .init(hciStatus: status), hciStatus: status)))
        case .failure(.remote(let code, let message, let field, let detail)):
            return .failure(WireFailure(code, "\(command): \(message)", field: field, detail: detail))
        case .failure(let error):
            return .failure(WireFailure(.notReady, "\(command) was not run: hcid \(error)"))
        }
    }
}

extension Beryl_Ipc_V1_BluetoothErrorCode {
    /// The CBError an app reads a controller's refusal as (statuses: Core Vol 1 Part F §1.3).
    public init(hciStatus status: UInt8) {
        switch status {
        case 0x02: self = .notConnected  // Unknown Connection Identifier: the link went meanwhile
        case 0x07, 0x09, 0x0D: self = .connectionLimitReached  // Memory Capacity, Connection Limit, Limited Resources
        case 0x01, 0x0C, 0x11, 0x1A, 0x20: self = .operationNotSupported  // unknown or disallowed command, unsupported feature or parameter
        case 0x12, 0x30, 0x3B: self = .invalidParameters  // Invalid Parameters, out of range, unacceptable connection parameters
        case 0x08, 0x22: self = .connectionTimeout
        default: self = .unknown
        }
    }
}
