import GRPCCore
import PandoraInterfaces

/// Every Pandora service beryl-pandora serves over one lab session.
public enum PandoraServices {
    public static func all(lab: LabClient, deviceName: String) -> [any RegistrableRPCService] {
        [HostService(lab: lab, deviceName: deviceName), L2CAPService()]
    }
}

/// LE credit-based channels are not in the stack yet: every RPC answers UNIMPLEMENTED at once, never hangs.
struct L2CAPService: Pandora_L2cap_L2CAP.SimpleServiceProtocol {
    private func unimplemented(_ rpc: String) -> RPCError {
        RPCError(code: .unimplemented, message: "L2CAP.\(rpc): Beryl has no LE credit-based channels yet")
    }

    func connect(request: Pandora_L2cap_ConnectRequest, context: ServerContext) async throws -> Pandora_L2cap_ConnectResponse { throw unimplemented("Connect") }
    func waitConnection(request: Pandora_L2cap_WaitConnectionRequest, context: ServerContext) async throws -> Pandora_L2cap_WaitConnectionResponse {
        throw unimplemented("WaitConnection")
    }
    func disconnect(request: Pandora_L2cap_DisconnectRequest, context: ServerContext) async throws -> Pandora_L2cap_DisconnectResponse { throw unimplemented("Disconnect") }
    func waitDisconnection(request: Pandora_L2cap_WaitDisconnectionRequest, context: ServerContext) async throws -> Pandora_L2cap_WaitDisconnectionResponse {
        throw unimplemented("WaitDisconnection")
    }
    func receive(request: Pandora_L2cap_ReceiveRequest, response: RPCWriter<Pandora_L2cap_ReceiveResponse>, context: ServerContext) async throws {
        throw unimplemented("Receive")
    }
    func send(request: Pandora_L2cap_SendRequest, context: ServerContext) async throws -> Pandora_L2cap_SendResponse { throw unimplemented("Send") }
}
