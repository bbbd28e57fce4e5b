import BerylCore
import BerylCrypto
import BerylSMP
import XCTest

/// Two security managers wired back to back, with the controllers' part (encryption start) played in between.
private final class PairingBench {
    let central: SMPSession
    let peripheral: SMPSession
    var centralOutputs: [SMPOutput] = []
    var peripheralOutputs: [SMPOutput] = []
    var wire: [(fromCentral: Bool, bytes: [UInt8])] = []
    var now: Duration = .zero
    /// Tamper with PDUs in flight (for the bad-input tests).
    var rewrite: ((Bool, [UInt8]) -> [UInt8]?)?

    static let centralAddress = DeviceAddress(BDAddress("C0:00:00:00:00:01")!, type: .public)
    static let peripheralAddress = DeviceAddress(BDAddress("D0:00:00:00:00:02")!, type: .random)

    init(central centralConfig: SecurityConfiguration, peripheral peripheralConfig: SecurityConfiguration) {
        central = SMPSession(isInitiator: true, configuration: centralConfig,
                             identity: LocalIdentity(address: Self.centralAddress, irk: [UInt8](repeating: 0xC1, count: 16)),
                             localAddress: Self.centralAddress, peerAddress: Self.peripheralAddress)
        peripheral = SMPSession(isInitiator: false, configuration: peripheralConfig,
                                identity: LocalIdentity(address: Self.peripheralAddress, irk: [UInt8](repeating: 0xD2, count: 16)),
                                localAddress: Self.peripheralAddress, peerAddress: Self.centralAddress)
    }

    /// Delivers outputs until both sides are quiet.
    func run(_ first: [SMPOutput], fromCentral: Bool) {
        var queue: [(Bool, SMPOutput)] = first.map { (fromCentral, $0) }
        while !queue.isEmpty {
            let (isCentral, output) = queue.removeFirst()
            if isCentral { centralOutputs.append(output) } else { peripheralOutputs.append(output) }
            switch output {
            case .send(let bytes):
                guard let delivered = rewrite.map({ $0(isCentral, bytes) }) ?? bytes else { continue }
                wire.append((isCentral, delivered))
                let receiver = isCentral ? peripheral : central
                queue += receiver.receive(delivered, at: now).map { (!isCentral, $0) }
            case .startEncryption(let ltk, let ediv, let rand):
                // The peripheral's controller asks its host for the key; the link encrypts only if both agree.
                let key = peripheral.keyForEncryption(ediv: ediv, rand: rand)
                let agreed = key == ltk
                queue += peripheral.encryptionChanged(enabled: agreed, at: now).map { (false, $0) }
                queue += central.encryptionChanged(enabled: agreed, at: now).map { (true, $0) }
            default:
                continue
            }
        }
    }

    func start() { run(central.startPairing(at: now), fromCentral: true) }

    func prompts(central isCentral: Bool) -> [PairingPrompt] {
        (isCentral ? centralOutputs : peripheralOutputs).compactMap { if case .prompt(let prompt) = $0 { prompt } else { nil } }
    }

    func result(central isCentral: Bool) -> PairingResult? {
        for case .completed(let result) in (isCentral ? centralOutputs : peripheralOutputs) { return result }
        return nil
    }

    func failure(central isCentral: Bool) -> SMPFailure? {
        for case .failed(let failure) in (isCentral ? centralOutputs : peripheralOutputs) { return failure }
        return nil
    }
}

final class SMPPairingTests: XCTestCase {
    /// SM/CEN/SCJW/BV-01-C and SM/PER/SCJW/BV-02-C: LE Secure Connections, Just Works, bonding with identity keys.
    func testSecureConnectionsJustWorksBondsWithIdentityKeys() throws {
        let bench = PairingBench(central: SecurityConfiguration(), peripheral: SecurityConfiguration())
        bench.start()
        let central = try XCTUnwrap(bench.result(central: true))
        let peripheral = try XCTUnwrap(bench.result(central: false))
        XCTAssertTrue(central.secureConnections)
        XCTAssertFalse(central.authenticated, "Just Works gives no MITM protection")
        XCTAssertTrue(central.bonded)
        XCTAssertEqual(central.peerLTK, peripheral.localLTK)
        XCTAssertEqual(central.peerLTK?.count, 16)
        XCTAssertEqual(central.peerIdentity, PairingBench.peripheralAddress)
        XCTAssertEqual(central.peerIRK, [UInt8](repeating: 0xD2, count: 16))
        XCTAssertEqual(peripheral.peerIdentity, PairingBench.centralAddress)
        XCTAssertEqual(peripheral.peerCSRK, central.localCSRK)
        XCTAssertEqual(bench.wire.map { $0.bytes[0] }.prefix(8), [0x01, 0x02, 0x0C, 0x0C, 0x03, 0x04, 0x04, 0x0D])
        XCTAssertTrue(bench.prompts(central: true).isEmpty)
    }

    /// SM/CEN/SCPK/BV-01-C: Passkey Entry, the peripheral displays and the central's user types it (20 rounds).
    func testSecureConnectionsPasskeyEntry() throws {
        let bench = PairingBench(central: SecurityConfiguration(ioCapability: .keyboardOnly), peripheral: SecurityConfiguration(ioCapability: .displayOnly))
        bench.start()
        guard case .displayPasskey(let shown)? = bench.prompts(central: false).first else { return XCTFail("the peripheral shows nothing") }
        XCTAssertEqual(bench.prompts(central: true), [.enterPasskey])
        bench.run(bench.central.passkeyEntered(shown, at: .zero), fromCentral: true)
        let central = try XCTUnwrap(bench.result(central: true))
        XCTAssertTrue(central.authenticated)
        XCTAssertEqual(central.peerLTK, bench.result(central: false)?.localLTK)
        XCTAssertEqual(bench.wire.filter { $0.bytes[0] == 0x03 }.count, 40, "20 rounds of confirms from each side")
    }

    /// A responder that sends its confirm and random before the initiator's user has typed the passkey (and so
    /// before the initiator committed) is out of turn: pairing fails with Unspecified Reason. It crashed attd.
    func testAConfirmOutOfTurnInPasskeyEntryIsRefused() {
        let bench = PairingBench(central: SecurityConfiguration(ioCapability: .keyboardOnly), peripheral: SecurityConfiguration(ioCapability: .displayOnly))
        bench.start()
        XCTAssertEqual(bench.prompts(central: true), [.enterPasskey])
        let outputs = bench.central.receive([0x03] + [UInt8](repeating: 0x33, count: 16), at: .zero)
            + bench.central.receive([0x04] + [UInt8](repeating: 0x44, count: 16), at: .zero)
        XCTAssertEqual(outputs.first, .send([0x05, 0x08]), "\(outputs)")
        XCTAssertFalse(bench.central.isPairing)
    }

    /// SM/PER/SCPK/BI-03-C: a wrong passkey fails with Confirm Value Failed on both sides.
    func testWrongPasskeyFailsWithConfirmValueFailedOnBothSides() throws {
        let bench = PairingBench(central: SecurityConfiguration(ioCapability: .keyboardOnly), peripheral: SecurityConfiguration(ioCapability: .displayOnly))
        bench.start()
        guard case .displayPasskey(let shown)? = bench.prompts(central: false).first else { return XCTFail() }
        bench.run(bench.central.passkeyEntered((shown + 1) % 1_000_000, at: .zero), fromCentral: true)
        XCTAssertNil(bench.result(central: true))
        XCTAssertEqual(bench.failure(central: false), .local(.confirmValueFailed))
        XCTAssertEqual(bench.failure(central: true), .remote(.confirmValueFailed))
    }

    /// SM/CEN/SCNC/BV-01-C: Numeric Comparison: both users see the same six digits.
    func testNumericComparison() throws {
        let bench = PairingBench(central: SecurityConfiguration(ioCapability: .displayYesNo), peripheral: SecurityConfiguration(ioCapability: .keyboardDisplay))
        bench.start()
        guard case .confirmNumber(let a)? = bench.prompts(central: true).first, case .confirmNumber(let b)? = bench.prompts(central: false).first else {
            return XCTFail("no numbers to compare")
        }
        XCTAssertEqual(a, b)
        XCTAssertLessThan(a, 1_000_000)
        bench.run(bench.peripheral.numberConfirmed(true, at: .zero), fromCentral: false)
        XCTAssertNil(bench.result(central: true), "the central's user has not answered yet")
        bench.run(bench.central.numberConfirmed(true, at: .zero), fromCentral: true)
        XCTAssertEqual(bench.result(central: true)?.authenticated, true)
        XCTAssertNotNil(bench.result(central: false))
    }

    func testNumericComparisonRejectedByTheUser() {
        let bench = PairingBench(central: SecurityConfiguration(ioCapability: .displayYesNo), peripheral: SecurityConfiguration(ioCapability: .displayYesNo))
        bench.start()
        bench.run(bench.central.numberConfirmed(false, at: .zero), fromCentral: true)
        XCTAssertEqual(bench.failure(central: true), .local(.numericComparisonFailed))
        XCTAssertEqual(bench.failure(central: false), .remote(.numericComparisonFailed))
    }

    /// A device-lab harness answers Just Works (Secure Connections) too: each side asked for consent waits for it, the
    /// peer's DHKey check held meanwhile, and the pairing completes once both said yes (in either order).
    func testJustWorksWithConsentWaitsForBothAnswers() throws {
        let bench = PairingBench(central: SecurityConfiguration(), peripheral: SecurityConfiguration())
        bench.central.asksJustWorksConsent = true
        bench.peripheral.asksJustWorksConsent = true
        bench.start()
        XCTAssertEqual(bench.prompts(central: true), [.confirmPairing])
        XCTAssertEqual(bench.prompts(central: false), [.confirmPairing])
        XCTAssertTrue(bench.central.wantsNumberConfirmation)
        bench.run(bench.central.numberConfirmed(true, at: .zero), fromCentral: true)
        XCTAssertNil(bench.result(central: false), "the peripheral's user has not answered: its DHKey check waits")
        bench.run(bench.peripheral.numberConfirmed(true, at: .zero), fromCentral: false)
        let central = try XCTUnwrap(bench.result(central: true))
        XCTAssertFalse(central.authenticated, "consent is not MITM protection")
        XCTAssertEqual(central.peerLTK, bench.result(central: false)?.localLTK)
    }

    func testJustWorksRefusedByTheLabFailsOnBothSides() {
        let bench = PairingBench(central: SecurityConfiguration(), peripheral: SecurityConfiguration())
        bench.peripheral.asksJustWorksConsent = true
        bench.start()
        XCTAssertTrue(bench.prompts(central: true).isEmpty, "a side not asked for consent pairs as before")
        bench.run(bench.peripheral.numberConfirmed(false, at: .zero), fromCentral: false)
        XCTAssertEqual(bench.failure(central: false), .local(.numericComparisonFailed))
        XCTAssertEqual(bench.failure(central: true), .remote(.numericComparisonFailed))
        XCTAssertNil(bench.result(central: true))
    }

    /// SM/CEN/JW/BV-05-C: legacy Just Works; the peripheral hands over its LTK, EDIV and Rand.
    func testLegacyJustWorksDistributesTheLongTermKeys() throws {
        let legacy = SecurityConfiguration(secureConnections: false)
        let bench = PairingBench(central: SecurityConfiguration(), peripheral: legacy)
        bench.start()
        let central = try XCTUnwrap(bench.result(central: true))
        let peripheral = try XCTUnwrap(bench.result(central: false))
        XCTAssertFalse(central.secureConnections)
        XCTAssertEqual(central.peerLTK, peripheral.localLTK)
        XCTAssertEqual(central.peerEDIV, peripheral.localEDIV)
        XCTAssertEqual(central.peerRand, peripheral.localRand)
        XCTAssertEqual(peripheral.peerLTK, central.localLTK, "the central's own LTK, for when roles swap")
        XCTAssertNotEqual(central.peerLTK, central.localLTK)
        XCTAssertFalse(bench.wire.contains { $0.bytes[0] == 0x0C }, "no public keys in legacy pairing")
    }

    /// SM/CEN/PKE/BV-01-C: legacy Passkey Entry, and a wrong passkey in legacy pairing.
    func testLegacyPasskeyEntry() throws {
        let bench = PairingBench(central: SecurityConfiguration(ioCapability: .keyboardOnly, secureConnections: false),
                                 peripheral: SecurityConfiguration(ioCapability: .displayOnly))
        bench.start()
        guard case .displayPasskey(let shown)? = bench.prompts(central: false).first else { return XCTFail() }
        bench.run(bench.central.passkeyEntered(shown, at: .zero), fromCentral: true)
        XCTAssertEqual(bench.result(central: true)?.authenticated, true)

        let wrong = PairingBench(central: SecurityConfiguration(ioCapability: .keyboardOnly, secureConnections: false),
                                 peripheral: SecurityConfiguration(ioCapability: .displayOnly))
        wrong.start()
        guard case .displayPasskey(let other)? = wrong.prompts(central: false).first else { return XCTFail() }
        wrong.run(wrong.central.passkeyEntered((other + 7) % 1_000_000, at: .zero), fromCentral: true)
        XCTAssertEqual(wrong.failure(central: false), .local(.confirmValueFailed))
        XCTAssertEqual(wrong.failure(central: true), .remote(.confirmValueFailed))
    }

    func testSecureConnectionsOnlyRefusesALegacyPeer() {
        let bench = PairingBench(central: SecurityConfiguration(secureConnections: false), peripheral: SecurityConfiguration(secureConnectionsOnly: true))
        bench.start()
        XCTAssertEqual(bench.failure(central: false), .local(.authenticationRequirements))
        XCTAssertEqual(bench.failure(central: true), .remote(.authenticationRequirements))
    }

    func testMITMRequiredRefusesJustWorks() {
        let bench = PairingBench(central: SecurityConfiguration(requireMITM: true), peripheral: SecurityConfiguration())
        bench.start()
        XCTAssertEqual(bench.failure(central: true), .local(.authenticationRequirements))
    }

    func testSecurityRequestReachesTheCentralsShell() {
        let bench = PairingBench(central: SecurityConfiguration(), peripheral: SecurityConfiguration())
        bench.run(bench.peripheral.requestSecurity(), fromCentral: false)
        XCTAssertEqual(bench.centralOutputs, [.securityRequested([.bonding, .secureConnections, .ct2])])
    }
}

final class SMPBadInputTests: XCTestCase {
    private func responder() -> SMPSession {
        SMPSession(isInitiator: false, configuration: SecurityConfiguration(),
                   identity: LocalIdentity(address: PairingBench.peripheralAddress, irk: [UInt8](repeating: 1, count: 16)),
                   localAddress: PairingBench.peripheralAddress, peerAddress: PairingBench.centralAddress)
    }

    /// SM/PER/GEN/BI-01-C style: malformed, unknown and out-of-order commands get the right Pairing Failed reason.
    func testMalformedUnknownAndOutOfOrderCommands() {
        XCTAssertEqual(responder().receive([0x01, 0x03, 0x00, 0x01, 0x10, 0x07], at: .zero).first, .send([0x05, 0x0A]), "one byte short")
        XCTAssertEqual(responder().receive([0x01, 0x03, 0x00, 0x01, 0x06, 0x07, 0x07], at: .zero).first, .send([0x05, 0x0A]), "key size 6")
        XCTAssertEqual(responder().receive([0x01, 0x09, 0x00, 0x01, 0x10, 0x07, 0x07], at: .zero).first, .send([0x05, 0x0A]), "reserved IO capability")
        XCTAssertEqual(responder().receive([0x2F], at: .zero).first, .send([0x05, 0x07]))
        XCTAssertEqual(responder().receive([], at: .zero), [.log("empty SMP PDU dropped")])
        let session = responder()
        _ = session.receive([0x01, 0x03, 0x00, 0x09, 0x10, 0x07, 0x07], at: .zero)
        XCTAssertEqual(session.receive([0x04] + [UInt8](repeating: 0, count: 16), at: .zero).first, .send([0x05, 0x08]), "a Random before any public key")
        XCTAssertFalse(session.isPairing)
    }

    /// A public key that is not on P-256 fails with DHKey Check Failed; our own key reflected back is refused too.
    func testInvalidAndReflectedPublicKeys() {
        let session = responder()
        _ = session.receive([0x01, 0x03, 0x00, 0x09, 0x10, 0x07, 0x07], at: .zero)
        let outputs = session.receive([0x0C] + [UInt8](repeating: 0x01, count: 64), at: .zero)
        XCTAssertTrue(outputs.contains(.send([0x05, 0x0B])), "\(outputs)")
        XCTAssertTrue(outputs.contains(.failed(.local(.dhKeyCheckFailed))))

        let fixed = try! P256KeyPair.generate()
        let reflecting = SMPSession(isInitiator: false, configuration: SecurityConfiguration(),
                                    identity: LocalIdentity(address: PairingBench.peripheralAddress, irk: [UInt8](repeating: 1, count: 16)),
                                    localAddress: PairingBench.peripheralAddress, peerAddress: PairingBench.centralAddress,
                                    makeKeyPair: { fixed })
        _ = reflecting.receive([0x01, 0x03, 0x00, 0x09, 0x10, 0x07, 0x07], at: .zero)
        let reflected = reflecting.receive([0x0C] + fixed.publicX.reversed() + fixed.publicY.reversed(), at: .zero)
        XCTAssertTrue(reflected.contains(.send([0x05, 0x0A])), "\(reflected)")
    }

    /// Core Vol 3 Part H §3.4: 30 s without progress ends pairing, and the link carries no more SMP.
    func testThePairingTimeout() {
        let session = responder()
        _ = session.receive([0x01, 0x03, 0x00, 0x09, 0x10, 0x07, 0x07], at: .seconds(5))
        XCTAssertTrue(session.isPairing)
        XCTAssertEqual(session.tick(at: .seconds(34)), [])
        XCTAssertEqual(session.tick(at: .seconds(35)).first, .failed(.timeout))
        XCTAssertTrue(session.isTimedOut)
        XCTAssertEqual(session.receive([0x01, 0x03, 0x00, 0x09, 0x10, 0x07, 0x07], at: .seconds(36)), [.log("SMP PDU after the pairing timeout dropped")])
    }

    func testKeysOutsideTheNegotiatedSetAreRefused() {
        let bench = PairingBench(central: SecurityConfiguration(), peripheral: SecurityConfiguration())
        // The peripheral slips in an extra Encryption Information, which Secure Connections never distributes.
        bench.rewrite = { fromCentral, bytes in
            if !fromCentral, bytes.first == 0x08 { return [0x06] + [UInt8](repeating: 9, count: 16) }
            return bytes
        }
        bench.start()
        XCTAssertEqual(bench.failure(central: true), .local(.unspecifiedReason))
        XCTAssertNil(bench.result(central: true))
    }

    func testRepeatedAttemptsWaitDoubles() throws {
        var guardian = RepeatedAttemptsGuard()
        let peer = try XCTUnwrap(BDAddress("11:22:33:44:55:66"))
        XCTAssertTrue(guardian.allows(peer, at: .zero))
        guardian.failed(peer, at: .zero)
        XCTAssertFalse(guardian.allows(peer, at: .seconds(1)))
        XCTAssertTrue(guardian.allows(peer, at: .seconds(2)))
        guardian.failed(peer, at: .seconds(2))
        XCTAssertFalse(guardian.allows(peer, at: .seconds(5)))
        XCTAssertTrue(guardian.allows(peer, at: .seconds(6)))
        guardian.succeeded(peer)
        XCTAssertTrue(guardian.allows(peer, at: .seconds(6)))
    }

    func testResolvablePrivateAddressesResolveWithTheirIRK() throws {
        let irk = SecureRandom.bytes(16)
        let address = try AddressResolution.make(irk: irk)
        XCTAssertEqual(address.randomKind, .resolvablePrivate)
        XCTAssertTrue(AddressResolution.resolves(address, irk: irk))
        XCTAssertFalse(AddressResolution.resolves(address, irk: SecureRandom.bytes(16)))
        // Appendix D.7 as an address: prand 708194, hash 0dfbaa, IRK ec0234a3... (wire order reversed).
        let sample = try XCTUnwrap(BDAddress("70:81:94:0D:FB:AA"))
        XCTAssertTrue(AddressResolution.resolves(sample, irk: Array(Hex.decode("ec0234a357c8ad05341010a60a397d9b")!.reversed())))
    }
}
