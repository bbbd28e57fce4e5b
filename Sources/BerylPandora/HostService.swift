import BerylIPC
import Foundation
import GRPCCore
import PandoraInterfaces
import SwiftProtobuf

/// pandora.Host over a lab session: LE only. The BR/EDR RPCs answer UNIMPLEMENTED at once.
public struct HostService: Pandora_Host.SimpleServiceProtocol {
    let lab: LabClient
    /// What include_*_local_name advertises.
    let deviceName: String

    public init(lab: LabClient, deviceName: String) {
        self.lab = lab
        self.deviceName = deviceName
    }

    public func factoryReset(request: Google_Protobuf_Empty, context: ServerContext) async throws -> Google_Protobuf_Empty {
        try await lab.call { $0.labFactoryReset = .init() }
        return .init()
    }

    /// A power cycle as the lab sees it: its work ends, its bonds stay.
    public func reset(request: Google_Protobuf_Empty, context: ServerContext) async throws -> Google_Protobuf_Empty {
        try await lab.call { $0.labFactoryReset.keepBonds = true }
        return .init()
    }

    public func readLocalAddress(request: Google_Protobuf_Empty, context: ServerContext) async throws -> Pandora_ReadLocalAddressResponse {
        // After a reset the controller is back only once hcid has brought it up: wait for that (within the deadline).
        while true {
            let info = try await lab.call { $0.labGetInfo = .init() }.labWelcome
            if info.state == .poweredOn, let (bytes, _) = PandoraAddress.bytes(info.publicAddress) { return .with { $0.address = bytes } }
            try await Task.sleep(for: .milliseconds(100))
        }
    }

    public func connectLE(request: Pandora_ConnectLERequest, context: ServerContext) async throws -> Pandora_ConnectLEResponse {
        let address: String
        switch request.address {
        case .public(let bytes)?, .publicIdentity(let bytes)?: address = try PandoraAddress.text(bytes, random: false, field: "address")
        case .random(let bytes)?, .randomStaticIdentity(let bytes)?: address = try PandoraAddress.text(bytes, random: true, field: "address")
        case nil: throw RPCError(code: .invalidArgument, message: "address: one of public, random, public_identity, random_static_identity is needed")
        }
        let ownAddressType = try ownAddress(request.ownAddressType)
        // A connection request never times out by itself; the caller's deadline (or its cancel) withdraws it.
        let lab = self.lab
        let withdraw: @Sendable () -> Void = { Task { try? await lab.call { $0.labCancelConnect = .init() } } }
        let outcome: Result<Beryl_Ipc_V1_ManagerResponse, RPCError> = await withTaskCancellationHandler {
            await withRPCCancellationHandler {
                do throws(RPCError) {
                    return .success(try await lab.call {
                        $0.labConnect = .with {
                            $0.address = address
                            $0.ownAddressType = ownAddressType
                        }
                    })
                } catch {
                    return .failure(error)
                }
            } onCancelRPC: {
                withdraw()
            }
        } onCancel: {
            withdraw()
        }
        switch outcome {
        case .success(let response):
            return .with { $0.connection = ConnectionCookie.make(response.labLink.handle) }
        case .failure(let error) where error.code == .alreadyExists:
            return .with { $0.connectionAlreadyExists = .init() }
        case .failure(let error):
            throw error
        }
    }

    public func disconnect(request: Pandora_DisconnectRequest, context: ServerContext) async throws -> Google_Protobuf_Empty {
        let handle = try ConnectionCookie.handle(request.connection)
        let events = lab.events()
        do throws(RPCError) {
            try await lab.call { $0.labDisconnect.handle = handle }
        } catch {
            if error.code == .notFound { return .init() }  // gone already: what the caller wanted
            throw error
        }
        // Answered once the link is down, so that the next RPC sees it gone.
        try await untilRPCEnds {
            for await event in events {
                if case .linkDown(let down)? = event.kind, down.handle == handle { break }
            }
        }
        return .init()
    }

    public func waitDisconnection(request: Pandora_WaitDisconnectionRequest, context: ServerContext) async throws -> Google_Protobuf_Empty {
        let handle = try ConnectionCookie.handle(request.connection)
        let events = lab.events()
        guard try await lab.links().contains(where: { $0.handle == handle }) else { return .init() }
        try await untilRPCEnds {
            for await event in events {
                if case .linkDown(let down)? = event.kind, down.handle == handle { break }
            }
        }
        return .init()
    }

    public func getConnectionParameters(request: Pandora_GetConnectionParametersRequest, context: ServerContext) async throws -> Pandora_GetConnectionParametersResponse {
        let handle = try ConnectionCookie.handle(request.connection)
        guard let link = try await lab.links().first(where: { $0.handle == handle }) else { return .with { $0.connectionNotFound = .init() } }
        return .with { $0.connectionParameters = Self.parameters(link) }
    }

    public func waitConnectionUpdate(request: Pandora_WaitConnectionUpdateRequest, context: ServerContext) async throws -> Pandora_WaitConnectionUpdateResponse {
        let handle = try ConnectionCookie.handle(request.connection)
        let events = lab.events()
        guard try await lab.links().contains(where: { $0.handle == handle }) else { return .with { $0.connectionNotFound = .init() } }
        return try await untilRPCEnds {
            for await event in events {
                switch event.kind {
                case .linkUpdated(let link)? where link.handle == handle: return .with { $0.connectionParameters = Self.parameters(link) }
                case .linkDown(let down)? where down.handle == handle: return .with { $0.connectionNotFound = .init() }
                default: continue
                }
            }
            throw RPCError(code: .unavailable, message: "the lab session ended")
        }
    }

    public func advertise(request: Pandora_AdvertiseRequest, response: RPCWriter<Pandora_AdvertiseResponse>, context: ServerContext) async throws {
        // Legacy advertising whatever `legacy` says: Pandora's false means "extended if the stack can", and Beryl's
        // managerd drives legacy advertising only.
        let advertise = try labAdvertise(request)
        let events = lab.events()
        try await lab.call { $0.labAdvertise = advertise }
        // The caller's cancel ends the loop and stops advertising.
        let connectable = request.connectable
        _ = try? await untilRPCEnds {
            for await event in events {
                if case .linkUp(let link)? = event.kind, !link.central, connectable {
                    try await response.write(.with { $0.connection = ConnectionCookie.make(link.handle) })
                }
            }
        }
        _ = try? await lab.call { $0.labStopAdvertising = .init() }
    }

    public func scan(request: Pandora_ScanRequest, response: RPCWriter<Pandora_ScanningResponse>, context: ServerContext) async throws {
        let ownAddressType = try ownAddress(request.ownAddressType)
        let events = lab.events()
        try await lab.call {
            $0.labScan = .with {
                $0.passive = request.passive
                $0.ownAddressType = ownAddressType
            }
        }
        let active = !request.passive
        _ = try? await untilRPCEnds {
            var merger = ScanReportMerger(active: active)
            for await event in events {
                guard case .scanReport(let report)? = event.kind, let kind = ScanReportMerger.Kind(rawValue: report.eventType) else { continue }
                for advertisement in merger.take(.init(address: report.address, kind: kind, rssi: report.rssi, data: Array(report.data))) {
                    try await response.write(Self.scanningResponse(advertisement))
                }
            }
        }
        _ = try? await lab.call { $0.labStopScan = .init() }
    }

    // MARK: BR/EDR: not a Beryl transport

    public func connect(request: Pandora_ConnectRequest, context: ServerContext) async throws -> Pandora_ConnectResponse { throw brEdr("Connect") }
    public func waitConnection(request: Pandora_WaitConnectionRequest, context: ServerContext) async throws -> Pandora_WaitConnectionResponse {
        throw brEdr("WaitConnection")
    }
    public func inquiry(request: Google_Protobuf_Empty, response: RPCWriter<Pandora_InquiryResponse>, context: ServerContext) async throws {
        throw brEdr("Inquiry")
    }
    public func setDiscoverabilityMode(request: Pandora_SetDiscoverabilityModeRequest, context: ServerContext) async throws -> Google_Protobuf_Empty {
        throw brEdr("SetDiscoverabilityMode")
    }
    public func setConnectabilityMode(request: Pandora_SetConnectabilityModeRequest, context: ServerContext) async throws -> Google_Protobuf_Empty {
        throw brEdr("SetConnectabilityMode")
    }

    // MARK: Translation

    private func brEdr(_ rpc: String) -> RPCError {
        RPCError(code: .unimplemented, message: "\(rpc) is BR/EDR; Beryl is an LE-only stack")
    }

    private func ownAddress(_ type: Pandora_OwnAddressType) throws(RPCError) -> Beryl_Ipc_V1_OwnAddressType {
        switch type {
        case .public: .public
        case .random: .random
        case .resolvableOrPublic: .resolvableOrPublic
        case .resolvableOrRandom: .resolvableOrRandom
        case .UNRECOGNIZED(let value): throw RPCError(code: .invalidArgument, message: "own_address_type: \(value) is not an address type")
        }
    }

    func labAdvertise(_ request: Pandora_AdvertiseRequest) throws(RPCError) -> Beryl_Ipc_V1_LabAdvertise {
        var advertise = Beryl_Ipc_V1_LabAdvertise()
        do {
            advertise.data = Data(try DataTypesCodec.encode(request.data, deviceName: deviceName))
            advertise.scanResponse = Data(try DataTypesCodec.encode(request.scanResponseData, deviceName: deviceName))
        } catch {
            throw RPCError(code: .invalidArgument, message: "\(error)")
        }
        advertise.connectable = request.connectable
        advertise.scannable = request.hasScanResponseData
        advertise.ownAddressType = try ownAddress(request.ownAddressType)
        switch request.target {
        case .public(let bytes)?: advertise.directedTo = try PandoraAddress.text(bytes, random: false, field: "target")
        case .random(let bytes)?: advertise.directedTo = try PandoraAddress.text(bytes, random: true, field: "target")
        case nil: break
        }
        // Pandora's interval is in milliseconds; HCI's in 0.625 ms units (Core Vol 4 Part E §7.8.5).
        if request.interval < 0 || request.interval > 10_240 {
            throw RPCError(code: .invalidArgument, message: "interval: \(request.interval) ms is outside 20 ms to 10.24 s")
        }
        advertise.interval = UInt32((request.interval / 0.625).rounded())
        return advertise
    }

    static func scanningResponse(_ advertisement: ScanReportMerger.Advertisement) -> Pandora_ScanningResponse {
        var out = Pandora_ScanningResponse()
        out.legacy = true
        out.connectable = advertisement.connectable
        out.scannable = advertisement.scannable
        out.truncated = false
        out.primaryPhy = .primary1M
        out.secondaryPhy = .secondaryNone
        out.txPower = 127  // not reported by a legacy advertising report (Core Vol 4 Part E §7.7.65.13 "not available")
        out.rssi = advertisement.rssi
        out.data = DataTypesCodec.decode(advertisement.data)
        if let (bytes, random) = PandoraAddress.bytes(advertisement.address) {
            if random { out.random = bytes } else { out.public = bytes }
        }
        return out
    }

    private static func parameters(_ link: Beryl_Ipc_V1_LabLink) -> Pandora_ConnectionParameters {
        .with {
            $0.connectionInterval = link.interval
            $0.peripheralLatency = link.latency
            $0.supervisionTimeout = link.supervisionTimeout
        }
    }
}
