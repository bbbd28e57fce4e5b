import BerylCore
import BerylCrypto
import BerylSMP
import XCTest

/// Two security managers on one link, with both controllers played in between: SMP PDUs cross over, LE Enable
/// Encryption asks the peripheral's host for the key, and the link encrypts only when both keys agree (else the
/// central hears PIN or Key Missing, Core Vol 6 Part B §5.1.3.1). Time is virtual.
private final class SecurityBench {
    static let centralIdentity = DeviceAddress(BDAddress("C0:00:00:00:00:01")!, type: .public)
    static let peripheralIdentity = DeviceAddress(BDAddress("D0:00:00:00:00:02")!, type: .random)
    static let link: UInt16 = 0x40

    let central: SecurityManager
    let peripheral: SecurityManager
    let centralStorage: InMemoryBondStorage
    let peripheralStorage: InMemoryBondStorage
    var centralOutputs: [SecurityOutput] = []
    var peripheralOutputs: [SecurityOutput] = []
    var wire: [(fromCentral: Bool, bytes: [UInt8])] = []
    var now: Duration = .seconds(100)
    /// The address the central uses on the air this time (its identity, or a private address).
    var centralAddress = centralIdentity

    init(central centralConfig: SecurityConfiguration = SecurityConfiguration(), peripheral peripheralConfig: SecurityConfiguration = SecurityConfiguration(),
         centralStorage: InMemoryBondStorage = InMemoryBondStorage(), peripheralStorage: InMemoryBondStorage = InMemoryBondStorage()) throws {
        self.centralStorage = centralStorage
        self.peripheralStorage = peripheralStorage
        central = try SecurityManager(configuration: centralConfig, storage: centralStorage)
        peripheral = try SecurityManager(configuration: peripheralConfig, storage: peripheralStorage)
        _ = central.learnIdentity(Self.centralIdentity)
        _ = peripheral.learnIdentity(Self.peripheralIdentity)
    }

    /// Paired and bonded on a first link, then connected again with nothing said yet on the second.
    static func reconnectedAfterBonding() throws -> SecurityBench {
        let bench = try SecurityBench()
        bench.connect()
        bench.secureFromCentral(1)
        bench.disconnect()
        bench.connect()
        bench.forgetOutputs()
        return bench
    }

    func connect() {
        run(central.linkOpened(Self.link, isCentral: true, peer: Self.peripheralIdentity, at: now), fromCentral: true)
        run(peripheral.linkOpened(Self.link, isCentral: false, peer: centralAddress, at: now), fromCentral: false)
    }

    func disconnect() {
        run(central.linkClosed(Self.link), fromCentral: true)
        run(peripheral.linkClosed(Self.link), fromCentral: false)
    }

    /// Delivers outputs, and what they cause, until both sides are quiet.
    func run(_ first: [SecurityOutput], fromCentral: Bool) {
        var queue: [(Bool, SecurityOutput)] = first.map { (fromCentral, $0) }
        while !queue.isEmpty {
            let (isCentral, output) = queue.removeFirst()
            if isCentral { centralOutputs.append(output) } else { peripheralOutputs.append(output) }
            switch output {
            case .sendSMP(let link, let bytes):
                wire.append((isCentral, bytes))
                let receiver = isCentral ? peripheral : central
                queue += receiver.receive(bytes, on: link, at: now).map { (!isCentral, $0) }
            case .enableEncryption(let link, let rand, let ediv, let ltk):
                let answer = peripheral.longTermKeyRequested(link, rand: rand, ediv: ediv)
                peripheralOutputs += answer
                guard case .longTermKeyReply(_, let key)? = answer.last else { return XCTFail("no LTK reply in \(answer)") }
                if let key, key == ltk {
                    queue += peripheral.encryptionChanged(link, status: 0, enabled: true, at: now).map { (false, $0) }
                    queue += central.encryptionChanged(link, status: 0, enabled: true, at: now).map { (true, $0) }
                } else {
                    queue += central.encryptionChanged(link, status: 0x06, enabled: false, at: now).map { (true, $0) }
                }
            default:
                continue
            }
        }
    }

    func secureFromCentral(_ waiter: UInt64) { run(central.secure(Self.link, for: SecurityWaiter(waiter), at: now), fromCentral: true) }

    func told(central isCentral: Bool) -> [(waiters: [SecurityWaiter], result: Result<SecuritySummary, SecurityFailure>, afterKeys: Bool)] {
        (isCentral ? centralOutputs : peripheralOutputs).compactMap {
            if case .secured(let waiters, let result, let afterKeys) = $0 { (waiters, result, afterKeys) } else { nil }
        }
    }

    func pdus(fromCentral: Bool) -> [UInt8] { wire.filter { $0.fromCentral == fromCentral }.map { $0.bytes[0] } }

    func forgetOutputs() {
        centralOutputs = []
        peripheralOutputs = []
        wire = []
    }
}

final class SecurityManagerTests: XCTestCase {
    func testPairingBondsBothSidesAndTellsEveryWaiterOnceAfterTheKeys() throws {
        let bench = try SecurityBench()
        bench.connect()
        let first = bench.central.secure(SecurityBench.link, for: SecurityWaiter(1), at: bench.now)
        XCTAssertTrue(bench.central.secure(SecurityBench.link, for: SecurityWaiter(2), at: bench.now).isEmpty, "one pairing however many wait")
        bench.run(first, fromCentral: true)
        XCTAssertEqual(bench.pdus(fromCentral: true).filter { $0 == 0x01 }.count, 1)
        let told = bench.told(central: true)
        XCTAssertEqual(told.count, 1)
        XCTAssertEqual(told.first?.waiters, [SecurityWaiter(1), SecurityWaiter(2)])
        XCTAssertEqual(told.first?.afterKeys, true, "our last keys went to the controller just before")
        guard case .success(let summary)? = told.first?.result else { return XCTFail("\(told)") }
        XCTAssertEqual(summary.level, LinkSecurity(encrypted: true, authenticated: false, bonded: true))
        XCTAssertEqual(summary.identity, SecurityBench.peripheralIdentity)
        XCTAssertEqual(try bench.centralStorage.bonds().map(\.identity), [SecurityBench.peripheralIdentity])
        XCTAssertEqual(try bench.peripheralStorage.bonds().map(\.identity), [SecurityBench.centralIdentity])
        XCTAssertEqual(bench.peripheral.level(of: SecurityBench.link), LinkSecurity(encrypted: true, authenticated: false, bonded: true))
        XCTAssertTrue(bench.peripheralOutputs.contains { if case .peerSigning(_, let key?) = $0 { key.csrk.count == 16 } else { false } },
                      "the central's CSRK checks its signed writes from now on")
    }

    func testSubscriptionsMadeBeforePairingBelongToTheBondAndComeBack() throws {
        let bench = try SecurityBench()
        bench.connect()
        _ = bench.peripheral.clientStateChanged(on: SecurityBench.link, configurations: [0x0012: 1], features: [1])
        XCTAssertTrue(try bench.peripheralStorage.bonds().isEmpty)
        bench.secureFromCentral(1)
        XCTAssertEqual(try bench.peripheralStorage.clientState(SecurityBench.centralIdentity).configurations, [0x0012: 1])
        bench.disconnect()
        bench.forgetOutputs()
        bench.connect()
        XCTAssertTrue(bench.peripheralOutputs.contains(.restoreClientState(link: SecurityBench.link, configurations: [0x0012: 1], features: [1])))
        XCTAssertTrue(bench.peripheralOutputs.contains(.levelChanged(link: SecurityBench.link, LinkSecurity(encrypted: false, authenticated: false, bonded: true))))
    }

    /// Core Vol 3 Part G §2.5.2 and §7.1 on the client's side: where the peer's Service Changed is, found before the
    /// bond existed, belongs to the bond; the next link to the bonded peer starts knowing it, before any discovery.
    func testThePeersServiceChangedFoundBeforePairingComesBackOnTheNextLink() throws {
        let bench = try SecurityBench()
        bench.connect()
        XCTAssertTrue(bench.central.peerServiceChangedFound(0x0009, on: SecurityBench.link).isEmpty)
        XCTAssertTrue(try bench.centralStorage.bonds().isEmpty)
        bench.secureFromCentral(1)
        XCTAssertEqual(try bench.centralStorage.peerServiceChanged(SecurityBench.peripheralIdentity), 0x0009)
        bench.disconnect()
        bench.forgetOutputs()
        bench.connect()
        XCTAssertTrue(bench.centralOutputs.contains(.peerServiceChanged(link: SecurityBench.link, valueHandle: 0x0009)), "\(bench.centralOutputs)")
        // Found again at another handle (the peer's database changed): the bond keeps the latest.
        _ = bench.central.peerServiceChangedFound(0x000C, on: SecurityBench.link)
        XCTAssertEqual(try bench.centralStorage.peerServiceChanged(SecurityBench.peripheralIdentity), 0x000C)
        XCTAssertFalse(bench.peripheralOutputs.contains { if case .peerServiceChanged = $0 { true } else { false } },
                       "the peripheral's client found nothing")
    }

    func testABondedCentralEncryptsWithItsStoredKeyWithoutPairing() throws {
        let bench = try SecurityBench()
        bench.connect()
        bench.secureFromCentral(1)
        bench.disconnect()
        bench.forgetOutputs()
        bench.connect()
        bench.secureFromCentral(2)
        XCTAssertTrue(bench.wire.isEmpty, "no SMP on a reconnection with a bond: \(bench.wire)")
        guard case .success(let summary)? = bench.told(central: true).first?.result else { return XCTFail("\(bench.centralOutputs)") }
        XCTAssertEqual(summary.level, LinkSecurity(encrypted: true, authenticated: false, bonded: true))
        XCTAssertEqual(bench.told(central: true).first?.afterKeys, false)
        XCTAssertEqual(bench.central.keyEncryptions, [SecurityBench.peripheralIdentity: KeyEncryptionTally(started: 1, last: .encrypted)],
                       "pairing is not counted; the reconnection's encryption with the key is")
        XCTAssertEqual(bench.peripheral.keyEncryptions, [SecurityBench.centralIdentity: KeyEncryptionTally(started: 1, last: .encrypted)])
    }

    /// The peripheral lost its bond: the stored key is refused with PIN or Key Missing and the central pairs again,
    /// as iOS does after "Peer removed pairing information"; the waiter hears only of the final success.
    func testAKeyRefusedAsMissingMakesTheCentralPairAgain() throws {
        let bench = try SecurityBench()
        bench.connect()
        bench.secureFromCentral(1)
        let firstBond = try XCTUnwrap(bench.centralStorage.bonds().first)
        bench.disconnect()
        _ = try bench.peripheral.removeBond(SecurityBench.centralIdentity)
        bench.forgetOutputs()
        bench.connect()
        bench.secureFromCentral(2)
        XCTAssertTrue(bench.centralOutputs.contains { if case .encryptionChanged(_, _, 0x06) = $0 { true } else { false } })
        XCTAssertEqual(bench.pdus(fromCentral: true).first, 0x01, "a fresh Pairing Request after the refusal")
        XCTAssertEqual(bench.told(central: true).count, 1)
        guard case .success? = bench.told(central: true).first?.result else { return XCTFail("\(bench.told(central: true))") }
        XCTAssertNotEqual(try bench.centralStorage.bonds().first?.peerLTK, firstBond.peerLTK, "the new pairing replaced the keys")
        XCTAssertEqual(try bench.peripheralStorage.bonds().map(\.identity), [SecurityBench.centralIdentity])
        XCTAssertEqual(bench.central.keyEncryptions[SecurityBench.peripheralIdentity], KeyEncryptionTally(started: 1, last: .keyMissing))
    }

    func testAnEncryptionFailureOtherThanAMissingKeyFailsTheWaiters() throws {
        let bench = try SecurityBench.reconnectedAfterBonding()
        bench.run(bench.central.secure(SecurityBench.link, for: SecurityWaiter(7), at: bench.now).filter {
            if case .enableEncryption = $0 { false } else { true }
        }, fromCentral: true)
        bench.run(bench.central.encryptionChanged(SecurityBench.link, status: 0x3D, enabled: false, at: bench.now), fromCentral: true)
        XCTAssertEqual(bench.told(central: true).first?.result, .failure(.encryption(status: 0x3D)))
        XCTAssertTrue(bench.wire.isEmpty, "a MIC failure is not a lost bond: no pairing")
        XCTAssertEqual(bench.central.keyEncryptions[SecurityBench.peripheralIdentity], KeyEncryptionTally(started: 1, last: .failed(status: 0x3D)))
    }

    /// berylsim (as a controller may) ends the link with MIC Failure when the keys differ, before any Encryption Change:
    /// the waiter fails as for a closed link, and the bond's tally keeps the reason.
    func testALinkEndedDuringEncryptionWithTheKeyIsTalliedWithItsReason() throws {
        let bench = try SecurityBench.reconnectedAfterBonding()
        let started = bench.central.secure(SecurityBench.link, for: SecurityWaiter(8), at: bench.now)
        XCTAssertTrue(started.contains { if case .enableEncryption = $0 { true } else { false } }, "\(started)")
        XCTAssertEqual(bench.central.linkClosed(SecurityBench.link, reason: 0x3D),
                       [.secured([SecurityWaiter(8)], .failure(.linkClosed), afterKeysDelivered: false)])
        XCTAssertEqual(bench.central.keyEncryptions[SecurityBench.peripheralIdentity], KeyEncryptionTally(started: 1, last: .linkClosed(reason: 0x3D)))
        _ = try bench.central.removeBond(SecurityBench.peripheralIdentity)
        XCTAssertNil(bench.central.keyEncryptions[SecurityBench.peripheralIdentity], "a removed bond's tally is not the next bond's")
    }

    func testWaitersFailWhenTheLinkClosesMidPairing() throws {
        let bench = try SecurityBench()
        bench.connect()
        // Only the Pairing Request goes out: the peripheral never answers.
        let outputs = bench.central.secure(SecurityBench.link, for: SecurityWaiter(1), at: bench.now)
        let sent: [UInt8] = outputs.compactMap { output -> UInt8? in
            if case .sendSMP(_, let pdu) = output { return pdu.first }
            return nil
        }
        XCTAssertEqual(sent, [0x01])
        XCTAssertTrue(bench.central.secure(SecurityBench.link, for: SecurityWaiter(2), at: bench.now).isEmpty)
        XCTAssertEqual(bench.central.linkClosed(SecurityBench.link),
                       [.secured([SecurityWaiter(1), SecurityWaiter(2)], .failure(.linkClosed), afterKeysDelivered: false)])
        XCTAssertEqual(bench.central.secure(SecurityBench.link, for: SecurityWaiter(3), at: bench.now),
                       [.secured([SecurityWaiter(3)], .failure(.linkClosed), afterKeysDelivered: false)], "no link, told at once")
    }

    /// Core Vol 3 Part H §3.4: after the 30-second SMP timeout the link carries no more SMP, so a later request for
    /// security fails at once instead of waiting for a link close, on either side.
    func testAfterTheSMPTimeoutAskingForSecurityFailsAtOnce() throws {
        let bench = try SecurityBench()
        bench.connect()
        _ = bench.central.secure(SecurityBench.link, for: SecurityWaiter(1), at: bench.now)
        _ = bench.peripheral.receive([0x01, 0x03, 0x00, 0x01, 0x10, 0x07, 0x07], on: SecurityBench.link, at: bench.now)
        bench.now += .seconds(31)
        let timedOut: [Result<SecuritySummary, SecurityFailure>] = bench.central.tick(at: bench.now).compactMap {
            if case .secured(_, let result, _) = $0 { result } else { nil }
        }
        XCTAssertEqual(timedOut, [.failure(.pairing(.timeout))])
        _ = bench.peripheral.tick(at: bench.now)
        bench.forgetOutputs()
        XCTAssertEqual(bench.central.secure(SecurityBench.link, for: SecurityWaiter(2), at: bench.now),
                       [.secured([SecurityWaiter(2)], .failure(.pairing(.timeout)), afterKeysDelivered: false)])
        XCTAssertEqual(bench.peripheral.secure(SecurityBench.link, for: SecurityWaiter(3), at: bench.now),
                       [.secured([SecurityWaiter(3)], .failure(.pairing(.timeout)), afterKeysDelivered: false)])
    }

    /// A central that returns from a resolvable private address its IRK makes is the bonded peer; one from another
    /// IRK's address is not (Core Vol 3 Part C §10.8.2.3).
    func testAResolvablePrivateAddressMatchesTheBondWhoseIRKMadeIt() throws {
        let bench = try SecurityBench()
        bench.connect()
        bench.secureFromCentral(1)
        bench.disconnect()
        let centralIRK = try XCTUnwrap(bench.peripheralStorage.bonds().first?.irk)
        bench.centralAddress = DeviceAddress(try AddressResolution.make(irk: centralIRK), type: .random)
        bench.forgetOutputs()
        bench.connect()
        XCTAssertEqual(bench.peripheral.bondIdentity(of: SecurityBench.link), SecurityBench.centralIdentity)
        bench.disconnect()
        bench.centralAddress = DeviceAddress(try AddressResolution.make(irk: [UInt8](repeating: 0x77, count: 16)), type: .random)
        bench.connect()
        XCTAssertNil(bench.peripheral.bondIdentity(of: SecurityBench.link))
        XCTAssertEqual(bench.peripheral.level(of: SecurityBench.link)?.bonded, false)
    }

    /// Core Vol 3 Part H §2.3.6: after a pairing the verifier (here the peripheral, whose user said no) ended, the
    /// same claimant's next Pairing Request is refused with Repeated Attempts until the wait is over; the central asks
    /// (the wait is not its to keep), and the refusal itself does not lengthen the wait.
    func testRepeatedAttemptsAreRefusedByTheVerifierUntilTheWaitIsOver() throws {
        let bench = try SecurityBench(central: SecurityConfiguration(ioCapability: .displayYesNo), peripheral: SecurityConfiguration(ioCapability: .displayYesNo))
        bench.connect()
        bench.secureFromCentral(1)
        bench.run(try bench.peripheral.answerPrompt(SecurityBench.link, accept: false, passkey: 0, at: bench.now), fromCentral: false)
        XCTAssertEqual(bench.told(central: true).first?.result, .failure(.pairing(.remote(.numericComparisonFailed))))
        bench.forgetOutputs()
        bench.now += .seconds(1)
        bench.secureFromCentral(2)
        XCTAssertTrue(bench.pdus(fromCentral: true).contains(0x01), "the central asks again")
        XCTAssertEqual(bench.pdus(fromCentral: false), [0x05])
        XCTAssertEqual(bench.told(central: true).first?.result, .failure(.pairing(.remote(.repeatedAttempts))), "the peripheral refuses")
        bench.forgetOutputs()
        bench.now += .seconds(1)
        bench.secureFromCentral(3)
        XCTAssertTrue(bench.peripheralOutputs.contains { if case .prompt(_, _, .confirmNumber) = $0 { true } else { false } },
                      "two seconds after the failure the peer may pair again: \(bench.peripheralOutputs)")
    }

    /// A claimant that gives up itself proved nothing wrong: the central's user says no, and the central may ask
    /// again at once, the peripheral answering as if nothing had failed (Avatar's 'rejected' pairing cases, back to back).
    func testAClaimantThatGaveUpItselfIsNotHeldBack() throws {
        let bench = try SecurityBench(central: SecurityConfiguration(ioCapability: .displayYesNo), peripheral: SecurityConfiguration(ioCapability: .displayYesNo))
        bench.connect()
        bench.secureFromCentral(1)
        bench.run(try bench.central.answerPrompt(SecurityBench.link, accept: false, passkey: 0, at: bench.now), fromCentral: true)
        XCTAssertEqual(bench.told(central: true).first?.result, .failure(.pairing(.local(.numericComparisonFailed))))
        bench.forgetOutputs()
        bench.secureFromCentral(2)
        XCTAssertEqual(bench.pdus(fromCentral: true).first, 0x01, "the central's own failure does not hold the central back")
        XCTAssertFalse(bench.pdus(fromCentral: false).contains(0x05), "nor does it hold the peripheral's answer back")
        XCTAssertTrue(bench.peripheralOutputs.contains { if case .prompt(_, _, .confirmNumber) = $0 { true } else { false } },
                      "\(bench.peripheralOutputs)")
    }

    func testAPeripheralAsksTheCentralForSecurity() throws {
        let bench = try SecurityBench()
        bench.connect()
        bench.run(bench.peripheral.secure(SecurityBench.link, for: SecurityWaiter(9), at: bench.now), fromCentral: false)
        XCTAssertEqual(bench.pdus(fromCentral: false).first, 0x0B, "Security Request")
        XCTAssertEqual(bench.pdus(fromCentral: true).first, 0x01, "the central pairs on its own")
        XCTAssertTrue(bench.told(central: true).isEmpty, "the central's own wait is nobody's to hear")
        guard case .success(let summary)? = bench.told(central: false).first?.result else { return XCTFail("\(bench.peripheralOutputs)") }
        XCTAssertTrue(summary.level.bonded)
    }

    /// A central that dropped our Security Request (a busy host, nothing listening yet) is asked again, and pairs.
    func testAPeripheralAsksAgainWhenTheCentralDroppedItsSecurityRequest() throws {
        let bench = try SecurityBench()
        bench.connect()
        let dropped = bench.peripheral.secure(SecurityBench.link, for: SecurityWaiter(9), at: bench.now)
        let droppedOpcodes: [UInt8] = dropped.compactMap { output -> UInt8? in
            if case .sendSMP(_, let bytes) = output { return bytes.first }
            return nil
        }
        XCTAssertEqual(droppedOpcodes, [0x0B])
        bench.now += .milliseconds(900)
        XCTAssertTrue(bench.peripheral.tick(at: bench.now).isEmpty, "not before a second")
        bench.now += .milliseconds(100)
        bench.run(bench.peripheral.tick(at: bench.now), fromCentral: false)
        XCTAssertEqual(bench.pdus(fromCentral: false).first, 0x0B, "Security Request again")
        XCTAssertEqual(bench.pdus(fromCentral: true).first, 0x01, "the central pairs this time")
        guard case .success? = bench.told(central: false).first?.result else { return XCTFail("\(bench.peripheralOutputs)") }
        bench.forgetOutputs()
        for _ in 0..<20 {
            bench.now += .seconds(1)
            bench.run(bench.peripheral.tick(at: bench.now), fromCentral: false)
        }
        XCTAssertTrue(bench.wire.isEmpty, "an encrypted link is not asked again: \(bench.wire)")
    }

    /// A central that ignores every Security Request hears four more, 1, 2, 4 and 8 seconds apart, then no more.
    func testAPeripheralAsksAnIgnoringCentralFourTimesMoreThenStops() throws {
        let bench = try SecurityBench()
        bench.connect()
        func securityRequests(_ outputs: [SecurityOutput]) -> Int {
            outputs.filter { if case .sendSMP(_, let bytes) = $0 { bytes.first == 0x0B } else { false } }.count
        }
        var sentAt: [Duration] = []
        let start = bench.now
        if securityRequests(bench.peripheral.secure(SecurityBench.link, for: SecurityWaiter(9), at: bench.now)) == 1 { sentAt.append(.zero) }
        for _ in 0..<60 {
            bench.now += .milliseconds(500)
            if securityRequests(bench.peripheral.tick(at: bench.now)) == 1 { sentAt.append(bench.now - start) }
        }
        XCTAssertEqual(sentAt, [.zero, .seconds(1), .seconds(3), .seconds(7), .seconds(15)])
    }

    /// Core Vol 3 Part H §2.4.6: no Security Request while pairing is under way.
    func testAPeripheralDoesNotAskAgainWhilePairing() throws {
        let bench = try SecurityBench(central: SecurityConfiguration(ioCapability: .displayYesNo),
                                      peripheral: SecurityConfiguration(ioCapability: .displayYesNo))
        bench.connect()
        bench.run(bench.peripheral.secure(SecurityBench.link, for: SecurityWaiter(9), at: bench.now), fromCentral: false)
        XCTAssertTrue(bench.peripheralOutputs.contains { if case .prompt = $0 { true } else { false } }, "waiting for the user")
        bench.forgetOutputs()
        for _ in 0..<20 {
            bench.now += .seconds(1)
            bench.run(bench.peripheral.tick(at: bench.now), fromCentral: false)
        }
        XCTAssertFalse(bench.pdus(fromCentral: false).contains(0x0B), "\(bench.wire)")
    }

    /// Core Vol 3 Part G §7.1: a bonded client subscribed to Service Changed that is away when the database changes
    /// is told the merged range when it returns; one not subscribed is not.
    func testAnAbsentSubscribedBondHearsOfTheChangeWhenItReturns() throws {
        let bench = try SecurityBench()
        let serviceChanged: UInt16 = 0x0003
        bench.connect()
        _ = bench.peripheral.clientStateChanged(on: SecurityBench.link, configurations: [serviceChanged + 1: 2], features: [1])
        bench.secureFromCentral(1)
        XCTAssertTrue(bench.peripheral.databaseChanged(0x0020...0x0030, serviceChangedValueHandle: serviceChanged).isEmpty)
        bench.disconnect()
        _ = bench.peripheral.databaseChanged(0x0020...0x0030, serviceChangedValueHandle: serviceChanged)
        _ = bench.peripheral.databaseChanged(0x0040...0x0048, serviceChangedValueHandle: serviceChanged)
        bench.forgetOutputs()
        bench.connect()
        XCTAssertTrue(bench.peripheralOutputs.contains(.indicateServiceChanged(link: SecurityBench.link, 0x0020...0x0048)), "\(bench.peripheralOutputs)")
        bench.disconnect()
        bench.forgetOutputs()
        bench.connect()
        XCTAssertFalse(bench.peripheralOutputs.contains { if case .indicateServiceChanged = $0 { true } else { false } }, "told once")

        // Unsubscribed: nothing is kept for it.
        bench.disconnect()
        _ = bench.peripheral.clientStateChanged(on: SecurityBench.link, configurations: [:], features: [1])
        bench.connect()
        _ = bench.peripheral.clientStateChanged(on: SecurityBench.link, configurations: [:], features: [1])
        bench.disconnect()
        _ = bench.peripheral.databaseChanged(0x0050...0x0058, serviceChangedValueHandle: serviceChanged)
        bench.forgetOutputs()
        bench.connect()
        XCTAssertFalse(bench.peripheralOutputs.contains { if case .indicateServiceChanged = $0 { true } else { false } })
    }

    func testAStoreThatCannotSaveLeavesTheLinkEncryptedButUnbonded() throws {
        let bench = try SecurityBench()
        bench.peripheralStorage.failing = true
        bench.connect()
        bench.secureFromCentral(1)
        XCTAssertTrue(bench.peripheralOutputs.contains { if case .log(.error, let message) = $0 { message.contains("cannot save the bond") } else { false } })
        XCTAssertEqual(bench.peripheral.level(of: SecurityBench.link), LinkSecurity(encrypted: true, authenticated: false, bonded: false))
        bench.peripheralStorage.failing = false
        XCTAssertTrue(try bench.peripheralStorage.bonds().isEmpty)
        XCTAssertTrue(bench.peripheral.bonds.isEmpty, "what was not stored is not believed")
    }

    func testWithoutAnIdentityPairingIsRefusedAsNotSupported() throws {
        let manager = try SecurityManager(configuration: SecurityConfiguration(), storage: nil)
        _ = manager.linkOpened(1, isCentral: false, peer: SecurityBench.centralIdentity, at: .zero)
        let request: [UInt8] = [0x01, 0x03, 0x00, 0x0D, 0x10, 0x07, 0x07]
        XCTAssertEqual(manager.receive(request, on: 1, at: .zero).first, .sendSMP(link: 1, [0x05, 0x05]))
        XCTAssertTrue(manager.receive([0x05, 0x08], on: 1, at: .zero).isEmpty, "a Pairing Failed is never answered")
        XCTAssertFalse(manager.canSecure(1))
        XCTAssertEqual(manager.longTermKeyRequested(1, rand: [UInt8](repeating: 0, count: 8), ediv: 0).last, .longTermKeyReply(link: 1, ltk: nil))
    }

    func testSignedWritesSpendTheCounterAndNeedOurCSRK() throws {
        let bench = try SecurityBench()
        bench.connect()
        XCTAssertEqual(bench.central.takeSigningKey(for: SecurityBench.link).map(\.counter), .failure(.noKey))
        bench.secureFromCentral(1)
        XCTAssertEqual(bench.central.takeSigningKey(for: SecurityBench.link).map(\.counter), .success(0))
        XCTAssertEqual(bench.central.takeSigningKey(for: SecurityBench.link).map(\.counter), .success(1))
        _ = bench.peripheral.peerSignCounterAccepted(1, on: SecurityBench.link)
        bench.disconnect()
        bench.forgetOutputs()
        bench.connect()
        XCTAssertTrue(bench.peripheralOutputs.contains { if case .peerSigning(_, let key?) = $0 { key.lastCounter == 1 } else { false } },
                      "the last counter accepted survives the link")
    }
}
