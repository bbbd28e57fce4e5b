/// A typed refusal as a request's error answer carries it: the code, the field it names, the Bluetooth detail.
public struct WireFailure: Error, Equatable, Sendable {
    public var code: IPCErrorCode
    public var message: String
    public var field: String
    public var detail: RemoteDetail

    public init(_ code: IPCErrorCode, _ message: String, field: String = "", detail: RemoteDetail = RemoteDetail()) {
        self.code = code
        self.message = message
        self.field = field
        self.detail = detail
    }
}

extension Beryl_Ipc_V1_BluetoothErrorCode {
    /// Core Bluetooth's CBError code for this: the wire's is Apple's plus one (0 there means "not one of these").
    public var coreBluetoothCode: Int? { rawValue > 0 ? rawValue - 1 : nil }
}
