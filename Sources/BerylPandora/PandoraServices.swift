import GRPCCore
import PandoraInterfaces

/// Every Pandora service beryl-pandora serves over one lab session, and the desk that answers pairing prompts when
/// no OnPairing stream is open (run it beside the server, for as long as the lab session lasts).
public struct PandoraServices: Sendable {
    public let lab: LabClient
    public let desk = PairingDesk()
    public let deviceName: String

    public init(lab: LabClient, deviceName: String) {
        self.lab = lab
        self.deviceName = deviceName
    }

    public var all: [any RegistrableRPCService] {
        [HostService(lab: lab, deviceName: deviceName), SecurityService(lab: lab, desk: desk), SecurityStorageService(lab: lab), L2CAPService()]
    }

    public func runPairingDesk() async { await desk.run(lab) }
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
