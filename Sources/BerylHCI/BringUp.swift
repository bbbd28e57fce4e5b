import BerylCore

/// The bring-up sequence (Core Vol 4 Part E §4, and what BlueZ and Zephyr do): reset, identify the
/// controller, size its buffers, set the event masks, size its lists, run the adapter profile's steps.
struct BringUp {
    enum Result {
        case continuing
        /// Nothing to send until `resume` after this long.
        case waiting(Duration)
        case done
        case failed(ControllerState)
    }

    private var remainingVendorSteps: [VendorStep]?
    private var currentStep: VendorStep?
    /// The last step that moved the UART, re-issued when patched firmware boots at the old speed.
    private var baudStep: VendorStep?
    private enum Relaunch { case none, booting, reissuingBaud, resetting }
    private var relaunch = Relaunch.none
    /// What LE Write Suggested Default Data Length asked for, learned once the controller took it.
    private var suggesting: DataLength?

    /// The event mask hcid asks for: Disconnection Complete, Encryption Change, Read Remote Version,
    /// Hardware Error, Data Buffer Overflow, Encryption Key Refresh Complete and LE Meta (Core Vol 4 Part E §7.3.1).
    static let eventMask: UInt64 = 1 << 4 | 1 << 7 | 1 << 11 | 1 << 15 | 1 << 25 | 1 << 47 | 1 << 61
    /// Every LE subevent through PHY Update Complete except the legacy/enhanced duplicate (enhanced is asked for), and
    /// the Extended Advertising Report, which some controllers send for legacy scanning too (Core Vol 4 Part E §7.8.1).
    static let leEventMask: UInt64 = 0b1_1111_1111_1111 & ~(1 << 0)

    mutating func handle(opcode: UInt16, event: HCIEventPacket, isComplete: Bool, host: HCIHost) -> Result {
        // Command Complete: parameters are credits(1), opcode(2), status(1), return parameters.
        let status = isComplete ? (event.parameters.count > 3 ? event.parameters[3] : 0xFF) : (event.parameters.first ?? 0xFF)
        let body = isComplete && event.parameters.count > 4 ? Array(event.parameters[4...]) : []
        guard let command = HCIOpcode(rawValue: opcode) else {
            return vendorStepAnswered(status: status, host: host)
        }
        // A controller may lack the optional list commands; everything else must succeed.
        let optional: Set<HCIOpcode> = [.leReadResolvingListSize, .leReadFilterAcceptListSize, .leReadBufferSizeV2, .readBufferSize,
                                        .leReadMaximumDataLength, .leWriteSuggestedDefaultDataLength]
        if status != 0, !optional.contains(command) {
            return .failed(.unsupported("\(command) failed with status 0x\(String(status, radix: 16))"))
        }
        var reader = ByteReader(body)
        switch command {
        case .reset:
            if relaunch == .resetting { relaunch = .none }
            host.issue(.readLocalVersionInformation)
        case .readLocalVersionInformation:
            let version = (try? reader.u8()) ?? 0
            _ = try? reader.u16()
            _ = try? reader.u8()
            let manufacturer = (try? reader.u16()) ?? 0
            host.learn { $0.hciVersion = version; $0.manufacturer = manufacturer }
            host.issue(.readLocalSupportedCommands)
        case .readLocalSupportedCommands:
            host.learn { $0.supportedCommands = body }
            host.issue(.readLocalSupportedFeatures)
        case .readLocalSupportedFeatures:
            // Bit 38 of the LMP features: LE Supported (Controller) (Core Vol 2 Part C §3.3).
            guard body.count >= 5, body[4] & (1 << 6) != 0 else { return .failed(.unsupported("the controller does not support LE")) }
            host.issue(.readBDAddr)
        case .readBDAddr:
            guard body.count >= 6 else { return .failed(.unsupported("Read BD_ADDR answered short")) }
            let address = BDAddress(wire: Array(body.prefix(6)))
            // No public address (simulators, some dongles): the host's static random identity (Core Vol 6 Part B
            // §1.3.2.1), set in the controller before anything advertises, scans or connects with it.
            if address == .zero, let identity = host.staticIdentity {
                host.learn { $0.address = identity; $0.addressIsRandom = true }
                host.issue(.leSetRandomAddress, identity.bytes)
                return .continuing
            }
            host.learn { $0.address = address; $0.addressIsRandom = false }
            host.issue(.leReadLocalSupportedFeatures)
        case .leSetRandomAddress:
            host.issue(.leReadLocalSupportedFeatures)
        case .leReadLocalSupportedFeatures:
            host.learn { $0.leFeatures = Array(body.prefix(8)) }
            if host.facts.supports(.leReadBufferSizeV2), !host.quirks.noReadBufferSizeV2 {
                host.issue(.leReadBufferSizeV2)
            } else {
                host.issue(.leReadBufferSize)
            }
        case .leReadBufferSizeV2, .leReadBufferSize:
            if status != 0 {
                host.issue(.leReadBufferSize)
                return .continuing
            }
            let mtu = Int((try? reader.u16()) ?? 0)
            let count = Int((try? reader.u8()) ?? 0)
            host.learn { $0.aclMTU = mtu; $0.aclBuffers = count; $0.aclBufferSource = command == .leReadBufferSizeV2 ? "LE v2" : "LE v1" }
            // Zero means LE shares the BR/EDR buffers (Core Vol 4 Part E §7.8.2).
            if mtu == 0 || count == 0 { host.issue(.readBufferSize) } else { host.issue(.setEventMask, Self.mask(Self.eventMask)) }
        case .readBufferSize:
            let mtu = Int((try? reader.u16()) ?? 0)
            _ = try? reader.u8()
            let count = Int((try? reader.u16()) ?? 0)
            guard status == 0, mtu > 0, count > 0 else { return .failed(.unsupported("the controller reports no ACL buffers")) }
            host.learn { $0.aclMTU = mtu; $0.aclBuffers = count; $0.aclBufferSource = "shared BR/EDR" }
            host.issue(.setEventMask, Self.mask(Self.eventMask))
        case .setEventMask:
            host.issue(.leSetEventMask, Self.mask(Self.leEventMask))
        case .leSetEventMask:
            host.issue(.leReadFilterAcceptListSize)
        case .leReadFilterAcceptListSize:
            host.learn { $0.filterAcceptListSize = status == 0 ? Int(body.first ?? 0) : 0 }
            host.issue(.leReadResolvingListSize)
        case .leReadResolvingListSize:
            host.learn { $0.resolvingListSize = status == 0 ? Int(body.first ?? 0) : 0 }
            return suggestDataLength(host: host)
        case .leReadMaximumDataLength:
            // Supported_Max_TX_Octets and _Time come first (Core Vol 4 Part E §7.8.46).
            let octets = status == 0 ? Int((try? reader.u16()) ?? 0) : 0
            let time = status == 0 ? Int((try? reader.u16()) ?? 0) : 0
            guard octets >= Self.minimumDataLength.octets, time >= Self.minimumDataLength.time else { return nextVendorStep(host: host) }
            suggest(DataLength(octets: min(Self.wantedDataLength.octets, octets), time: min(Self.wantedDataLength.time, time)), host: host)
        case .leWriteSuggestedDefaultDataLength:
            if status == 0, let suggesting { host.learn { $0.suggestedDataLength = suggesting } }
            suggesting = nil
            return nextVendorStep(host: host)
        default:
            return vendorStepAnswered(status: status, host: host)
        }
        return .continuing
    }

    /// A data PDU carries 27 octets in 328 µs unless the link layers agree on more (Core Vol 6 Part B §4.5.10).
    static let minimumDataLength = DataLength(octets: 27, time: 328)
    /// What new links start with when the controller has the Data Length Extension: a whole 251-octet PDU, 2120 µs on
    /// the 1M PHY, as BlueZ and Zephyr suggest, within what the controller supports.
    static let wantedDataLength = DataLength(octets: 251, time: 2120)

    /// LE Write Suggested Default Data Length (Core Vol 4 Part E §7.8.35), after reading what the controller supports
    /// (§7.8.46), when it has the Data Packet Length Extension (LE feature bit 5) and the profile does not forbid it.
    private mutating func suggestDataLength(host: HCIHost) -> Result {
        guard !host.quirks.noDataLengthExtension, host.facts.hasLEFeature(bit: 5), host.facts.supports(.leWriteSuggestedDefaultDataLength)
        else { return nextVendorStep(host: host) }
        if host.facts.supports(.leReadMaximumDataLength) {
            host.issue(.leReadMaximumDataLength)
        } else {
            suggest(Self.wantedDataLength, host: host)
        }
        return .continuing
    }

    private mutating func suggest(_ length: DataLength, host: HCIHost) {
        suggesting = length
        host.issue(.leWriteSuggestedDefaultDataLength, HCICommands.leWriteSuggestedDefaultDataLength(length).parameters)
    }

    private mutating func nextVendorStep(host: HCIHost) -> Result {
        if remainingVendorSteps == nil { remainingVendorSteps = host.vendorSteps }
        guard let step = remainingVendorSteps?.first else { return .done }
        remainingVendorSteps?.removeFirst()
        currentStep = step
        host.issue(raw: step)
        return .continuing
    }

    private mutating func vendorStepAnswered(status: UInt8, host: HCIHost) -> Result {
        guard status == 0 else { return .failed(.unsupported("adapter profile step failed with status 0x\(String(status, radix: 16))")) }
        if let step = currentStep, let baud = step.thenBaud {
            host.switchBaud(baud)
            baudStep = step
        }
        if relaunch == .reissuingBaud { return resetAfterRelaunch(host: host) }
        if currentStep?.opcode == VendorStep.broadcomLaunchRAM {
            // The patched firmware boots at the UART's boot speed: the host follows it there, waits for the boot, then
            // moves both back up and runs the standard bring-up again, since a boot forgets event masks and the rest.
            relaunch = .booting
            if baudStep != nil, let boot = host.transportBaud { host.switchBaud(boot) }
            host.note("patched firmware launched; waiting \(VendorStep.broadcomFirmwareBoot) for it to boot")
            return .waiting(VendorStep.broadcomFirmwareBoot)
        }
        return nextVendorStep(host: host)
    }

    /// The firmware had its time to boot.
    mutating func resume(host: HCIHost) -> Result {
        guard relaunch == .booting else { return .continuing }
        if let step = baudStep, host.transportBaud != nil {
            relaunch = .reissuingBaud
            currentStep = step
            host.issue(raw: step)
            return .continuing
        }
        return resetAfterRelaunch(host: host)
    }

    private mutating func resetAfterRelaunch(host: HCIHost) -> Result {
        relaunch = .resetting
        currentStep = nil
        host.issue(.reset)
        return .continuing
    }

    static func mask(_ value: UInt64) -> [UInt8] { (0..<8).map { UInt8(truncatingIfNeeded: value >> (8 * UInt64($0))) } }
}
