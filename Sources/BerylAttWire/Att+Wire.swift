import BerylCore
import BerylGATT
import BerylHCI
import BerylSMP
import BerylWire
import FoundationEssentials
import Glibc

// attd's proto ⇄ core translation: what its GATT client found, and what its security manager says, as the
// messages its clients read. Stateless, so each is a round-trip test away from the cores' values.

extension Beryl_Ipc_V1_GattDatabase {
    /// A whole discovery: each service with its included services, characteristics and their descriptors.
    public init(_ trees: [DiscoveredServiceTree]) {
        self = .with { database in
            database.services = trees.map { tree in
                .with {
                    $0.uuid = tree.service.uuid.description
                    $0.startHandle = UInt32(tree.service.start)
                    $0.endHandle = UInt32(tree.service.end)
                    $0.included = tree.included.map(Self.include)
                    $0.characteristics = tree.characteristics.map { found in
                        var characteristic = Self.characteristic(found.characteristic)
                        characteristic.descriptors = found.descriptors.map(Self.descriptor)
                        return characteristic
                    }
                }
            }
        }
    }

    /// The included services of the one service spanning `range`; the service's own UUID stays empty, since the app
    /// asked about a service it already knows (discoverIncludedServices), as for the depths below.
    public init(included: [DiscoveredInclude], in range: ClosedRange<UInt16>) {
        self = .with { $0.services = [.with {
            $0.startHandle = UInt32(range.lowerBound)
            $0.endHandle = UInt32(range.upperBound)
            $0.included = included.map(Self.include)
        }] }
    }

    /// The characteristics of the one service spanning `range`, without descriptors.
    public init(characteristics: [DiscoveredCharacteristic], in range: ClosedRange<UInt16>) {
        self = .with { $0.services = [.with {
            $0.startHandle = UInt32(range.lowerBound)
            $0.endHandle = UInt32(range.upperBound)
            $0.characteristics = characteristics.map(Self.characteristic)
        }] }
    }

    /// One characteristic's descriptors, as that service's one characteristic.
    public init(descriptors: [DiscoveredDescriptor]) {
        self = .with { $0.services = [.with { $0.characteristics = [.with { $0.descriptors = descriptors.map(Self.descriptor) }] }] }
    }

    private static func include(_ include: DiscoveredInclude) -> Beryl_Ipc_V1_GattIncludedService {
        .with { $0.uuid = include.uuid.description; $0.startHandle = UInt32(include.start); $0.endHandle = UInt32(include.end) }
    }

    private static func characteristic(_ found: DiscoveredCharacteristic) -> Beryl_Ipc_V1_GattCharacteristicInfo {
        .with {
            $0.uuid = found.uuid.description
            $0.properties = UInt32(found.properties.rawValue)
            $0.valueHandle = UInt32(found.valueHandle)
        }
    }

    private static func descriptor(_ descriptor: DiscoveredDescriptor) -> Beryl_Ipc_V1_GattDescriptorInfo {
        .with { $0.uuid = descriptor.uuid.description; $0.handle = UInt32(descriptor.handle) }
    }
}

extension Beryl_Ipc_V1_Paired {
    public init(_ summary: SecuritySummary) {
        self = .with {
            $0.encrypted = summary.level.encrypted
            $0.authenticated = summary.level.authenticated
            $0.bonded = summary.level.bonded
            $0.secureConnections = summary.secureConnections
            $0.keySize = UInt32(summary.keySize)
            $0.identity = summary.identity?.description ?? ""
        }
    }
}

extension RemoteDetail {
    /// The failure's codes for the wire: the SMP reason and who sent it, or the HCI status (PIN or Key Missing is
    /// Core Bluetooth's "peer removed pairing information").
    public init(_ failure: SecurityFailure) {
        switch failure {
        case .pairing(.local(let reason)): self.init(smpReason: reason.rawValue)
        case .pairing(.remote(let reason)): self.init(smpReason: reason.rawValue, smpReasonFromPeer: true)
        case .pairing(.timeout): self.init(bluetoothError: .encryptionTimedOut)
        case .encryption(let status):
            self.init(bluetoothError: status == HCIStatus.pinOrKeyMissing.rawValue ? .peerRemovedPairingInformation : .unspecified, hciStatus: status)
        case .linkClosed: self.init(bluetoothError: .peripheralDisconnected)
        }
    }
}

extension Beryl_Ipc_V1_KeyEncryption {
    public init(_ outcome: KeyEncryptionOutcome) {
        self = .with {
            switch outcome {
            case .encrypted: $0.outcome = .encrypted
            case .keyMissing: $0.outcome = .keyMissing; $0.hciCode = UInt32(HCIStatus.pinOrKeyMissing.rawValue)
            case .failed(let status): $0.outcome = .failed; $0.hciCode = UInt32(status)
            case .linkClosed(let reason): $0.outcome = .linkClosed; $0.hciCode = UInt32(reason ?? 0)
            }
        }
    }
}

extension Beryl_Ipc_V1_PairingPrompt {
    public init(link: UInt16, peer: DeviceAddress, _ prompt: PairingPrompt) {
        self = .with {
            $0.connectionHandle = UInt32(link)
            $0.peer = peer.description
            switch prompt {
            case .displayPasskey(let number): $0.kind = .displayPasskey; $0.number = number
            case .enterPasskey: $0.kind = .enterPasskey
            case .confirmNumber(let number): $0.kind = .confirmNumber; $0.number = number
            case .confirmPairing: $0.kind = .confirmPairing
            }
        }
    }
}

extension Beryl_Ipc_V1_PairingFinished {
    /// A failure's reason is the SMP reason (Core Vol 3 Part H §3.5.5); 0xFF stands for the SMP timeout (§3.4).
    public init(link: UInt16, peer: DeviceAddress, _ result: Result<SecuritySummary, SMPFailure>) {
        self = .with {
            $0.connectionHandle = UInt32(link)
            $0.peer = peer.description
            switch result {
            case .success(let summary): $0.success = true; $0.result = Beryl_Ipc_V1_Paired(summary)
            case .failure(.local(let reason)): $0.reason = UInt32(reason.rawValue)
            case .failure(.remote(let reason)): $0.reason = UInt32(reason.rawValue); $0.remote = true
            case .failure(.timeout): $0.reason = 0xFF
            }
        }
    }
}

extension Beryl_Ipc_V1_BondInfo {
    public init(_ bond: Bond, subscriptions: Int, keyEncryptions: KeyEncryptionTally?) {
        self = .with {
            $0.identity = bond.identity.description
            $0.authenticated = bond.authenticated
            $0.secureConnections = bond.secureConnections
            $0.keySize = UInt32(bond.keySize)
            $0.irkKnown = bond.irk != nil
            $0.csrkKnown = bond.csrk != nil
            $0.subscriptions = UInt32(clamping: subscriptions)
            if let keyEncryptions {
                $0.keyEncryptions = UInt32(clamping: keyEncryptions.started)
                if let last = keyEncryptions.last { $0.lastKeyEncryption = Beryl_Ipc_V1_KeyEncryption(last) }
            }
        }
    }
}

extension SecurityFailure {
    /// The message an app's or a lab's error carries beside the typed detail.
    public var message: String {
        switch self {
        case .pairing(.local(let reason)): "pairing failed: we sent Pairing Failed, \(reason) (0x\(String(reason.rawValue, radix: 16)))"
        case .pairing(.remote(let reason)): "pairing failed: the peer sent Pairing Failed, \(reason) (0x\(String(reason.rawValue, radix: 16)))"
        case .pairing(.timeout): "pairing timed out (30 s without the next step)"
        case .encryption(let status): "encryption failed with HCI status 0x\(String(status, radix: 16))"
        case .linkClosed: "the link closed"
        }
    }
}

extension WireFailure {
    /// A security manager's refusal as the requester hears it; `link` and `identity` name what was asked about.
    public init(_ error: SecurityRequestError, link: UInt32 = 0, identity: String = "") {
        let linkName = "link 0x\(String(link, radix: 16))"
        switch error {
        case .noLink: self.init(.notFound, "no link with handle 0x\(String(link, radix: 16))", field: "connection_handle")
        case .noPairingUnderWay: self.init(.notFound, "no pairing is under way on \(linkName)", field: "connection_handle")
        case .pairingUnderWay:
            self.init(.busy, "pairing is under way on \(linkName)", field: "local_address", detail: RemoteDetail(managerReason: .pairingUnderWay))
        case .identityUnknown: self.init(.notReady, "the controller's identity is not known yet")
        case .noBond: self.init(.notFound, "no bond with \(identity)", field: "identity")
        case .storage(let message): self.init(.internal, "bond store: \(message)")
        case .crypto(let message): self.init(.internal, message)
        }
    }
}

/// SetLinkPairing with its addresses read: for a link that is up, or for the next link in a role (with a peer).
public struct LinkPairingOptions: Equatable, Sendable {
    public var options: Beryl_Ipc_V1_SetLinkPairing
    public var peer: DeviceAddress?
    public var localAddress: DeviceAddress?

    public init(wire options: Beryl_Ipc_V1_SetLinkPairing) throws(WireFailure) {
        self.options = options
        func address(_ text: String, field: String) throws(WireFailure) -> DeviceAddress? {
            guard !text.isEmpty else { return nil }
            guard let address = DeviceAddress(text) else {
                throw WireFailure(.invalidArgument, "'\(text)' is not an address like AA:BB:CC:DD:EE:FF[/random]", field: field)
            }
            return address
        }
        peer = options.forNextLink ? try address(options.peer, field: "peer") : nil
        localAddress = try address(options.localAddress, field: "local_address")
    }
}
