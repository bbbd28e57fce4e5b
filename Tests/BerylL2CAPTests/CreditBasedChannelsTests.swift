import BerylCore
import BerylL2CAP
import XCTest

/// A link's credit-based channels: what each request is answered, byte for byte (Core Vol 3 Part A §4.6–4.7,
/// §4.22–4.28), and what ends a channel.
final class CreditBasedChannelsTests: XCTestCase {
    private let settings = CreditBasedChannels.Settings(mtu: 512, mps: 247, window: 8, maxChannels: 4, minimumKeySize: 16)
    private let open = LinkSecurity()
    private let encrypted = LinkSecurity(encrypted: true, authenticated: false, bonded: true)

    private func listening(_ listeners: [CreditBasedChannels.Listener]) -> (UInt16) -> CreditBasedChannels.Listener? {
        { spsm in listeners.first { $0.spsm == spsm } }
    }

    private func receive(_ channels: inout CreditBasedChannels, _ signal: CreditBasedSignal, identifier: UInt8 = 9,
                         listeners: [CreditBasedChannels.Listener] = [.init(spsm: 0x80)], security: LinkSecurity? = nil,
                         keySize: Int = 16) -> [CreditBasedChannels.Output] {
        channels.receive(signal, identifier: identifier, listeners: listening(listeners), security: security ?? open, keySize: keySize)
    }

    private func leRequest(spsm: UInt16 = 0x80, source: UInt16 = 0x50, mtu: UInt16 = 100, mps: UInt16 = 50, credits: UInt16 = 3) -> CreditBasedSignal {
        .leConnectionRequest(spsm: spsm, sourceCID: source, mtu: mtu, mps: mps, credits: credits)
    }

    private func leRefusal(_ result: CreditBasedResult) -> [CreditBasedChannels.Output] {
        [.signal(CreditBasedSignal.leConnectionResponse(destinationCID: 0, mtu: 0, mps: 0, credits: 0, result: result.rawValue).packet(identifier: 9))]
    }

    /// A channel accepted from the peer on CID 0x0040 (peer's CID 0x50, MTU 100, MPS 50, 3 credits).
    private func accepted() -> CreditBasedChannels {
        var channels = CreditBasedChannels(settings: settings)
        _ = receive(&channels, leRequest())
        return channels
    }

    // MARK: Accepting (§4.22, §4.23)

    func testAListenedSPSMIsAcceptedWithThisEndsParameters() {
        var channels = CreditBasedChannels(settings: settings)
        XCTAssertEqual(receive(&channels, leRequest()), [
            .signal([0x15, 0x09, 0x0A, 0x00, 0x40, 0x00, 0x00, 0x02, 0xF7, 0x00, 0x08, 0x00, 0x00, 0x00]),
            .opened(.init(localCID: 0x40, spsm: 0x80, mode: .le, peerMTU: 100, request: nil)),
        ])
        XCTAssertEqual(channels.channel(0x40)?.remote, .init(cid: 0x50, mtu: 100, mps: 50))
        XCTAssertEqual(channels.channel(0x40)?.sendCredits, 3)
        XCTAssertTrue(channels.carries(0x40))
    }

    func testAnSPSMNobodyListensOnOrOutOfRangeIsNotSupported() {
        var channels = CreditBasedChannels(settings: settings)
        for spsm: UInt16 in [0x81, 0x0000, 0x0100] {
            XCTAssertEqual(receive(&channels, leRequest(spsm: spsm), listeners: [.init(spsm: 0x80), .init(spsm: 0x100)]),
                           leRefusal(.spsmNotSupported), "SPSM 0x\(String(spsm, radix: 16))")
        }
        XCTAssertEqual(channels.openCIDs, [])
    }

    /// The listener's security, as GAP asks it (Core Vol 3 Part C §10.3): a peer without keys pairs, one with keys
    /// encrypts; an unauthenticated key for an authenticated SPSM, a short key, or an owner that may not take it.
    func testSecurityAndAuthorizationRefusals() {
        var channels = CreditBasedChannels(settings: settings)
        let encryption = [CreditBasedChannels.Listener(spsm: 0x80, security: .encryption)]
        XCTAssertEqual(receive(&channels, leRequest(), listeners: encryption, security: open), leRefusal(.insufficientAuthentication))
        XCTAssertEqual(receive(&channels, leRequest(), listeners: encryption, security: LinkSecurity(bonded: true)), leRefusal(.insufficientEncryption))
        XCTAssertEqual(receive(&channels, leRequest(), listeners: [.init(spsm: 0x80, security: .authentication)], security: encrypted),
                       leRefusal(.insufficientAuthentication))
        XCTAssertEqual(receive(&channels, leRequest(), listeners: encryption, security: encrypted, keySize: 7), leRefusal(.encryptionKeySizeTooShort))
        XCTAssertEqual(receive(&channels, leRequest(), listeners: [.init(spsm: 0x80, authorized: false)]), leRefusal(.insufficientAuthorization))
        XCTAssertEqual(channels.openCIDs, [])
        XCTAssertEqual(receive(&channels, leRequest(), listeners: encryption, security: encrypted).count, 2, "encrypted with a full key: opened")
    }

    func testSourceCIDsParametersAndResources() {
        var channels = CreditBasedChannels(settings: .init(mtu: 512, mps: 247, window: 8, maxChannels: 1))
        XCTAssertEqual(receive(&channels, leRequest(source: 0x003F)), leRefusal(.invalidSourceCID), "below the dynamic range")
        XCTAssertEqual(receive(&channels, leRequest(source: 0x0080)), leRefusal(.invalidSourceCID), "above it")
        XCTAssertEqual(receive(&channels, leRequest(mtu: 22)), leRefusal(.unacceptableParameters), "an MTU below 23")
        XCTAssertEqual(receive(&channels, leRequest(mps: 65_534)), leRefusal(.unacceptableParameters), "an MPS above 65,533")
        XCTAssertEqual(receive(&channels, leRequest()).count, 2)
        XCTAssertEqual(receive(&channels, leRequest()), leRefusal(.sourceCIDAlreadyAllocated))
        XCTAssertEqual(receive(&channels, leRequest(source: 0x51)), leRefusal(.noResources), "one channel per link here")
    }

    /// §4.25, §4.26: channels are refused one by one for their CIDs; one result names the first refusal.
    func testAnEnhancedRequestOpensSomeChannelsAndSaysWhyNotTheRest() {
        var channels = CreditBasedChannels(settings: settings)
        let outputs = receive(&channels, .connectionRequest(spsm: 0x80, mtu: 100, mps: 64, credits: 2, sourceCIDs: [0x50, 0x20, 0x51, 0x50]))
        XCTAssertEqual(outputs.first, .signal(CreditBasedSignal.connectionResponse(mtu: 512, mps: 247, credits: 8, result: 0x0009,
                                                                                   destinationCIDs: [0x40, 0, 0x41, 0]).packet(identifier: 9)))
        XCTAssertEqual(outputs.dropFirst().count, 2)
        XCTAssertEqual(channels.openCIDs, [0x40, 0x41])
        XCTAssertEqual(receive(&channels, .connectionRequest(spsm: 0x80, mtu: 63, mps: 64, credits: 2, sourceCIDs: [0x52, 0x53])),
                       [.signal(CreditBasedSignal.connectionResponse(mtu: 0, mps: 0, credits: 0, result: 0x000C, destinationCIDs: [0, 0])
                           .packet(identifier: 9))], "an MTU below 64 refuses them all as invalid parameters")
    }

    // MARK: Connecting (§4.22–4.26)

    func testAnOutgoingLERequestOpensOnSuccessAndFailsOnARefusal() throws {
        var channels = CreditBasedChannels(settings: settings)
        let (request, sent) = try XCTUnwrap(channels.connect(spsm: 0x25, mode: .le))
        XCTAssertEqual(sent, [.signal([0x14, 0x01, 0x0A, 0x00, 0x25, 0x00, 0x40, 0x00, 0x00, 0x02, 0xF7, 0x00, 0x08, 0x00])])
        XCTAssertEqual(channels.outstandingIdentifiers, [1])
        XCTAssertEqual(receive(&channels, .leConnectionResponse(destinationCID: 0x70, mtu: 23, mps: 23, credits: 1, result: 0), identifier: 1),
                       [.opened(.init(localCID: 0x40, spsm: 0x25, mode: .le, peerMTU: 23, request: request))])
        XCTAssertEqual(channels.channel(0x40)?.remote, .init(cid: 0x70, mtu: 23, mps: 23))

        let (refused, _) = try XCTUnwrap(channels.connect(spsm: 0x26, mode: .le))
        XCTAssertEqual(receive(&channels, .leConnectionResponse(destinationCID: 0x71, mtu: 2048, mps: 2048, credits: 9, result: 0x0002), identifier: 2),
                       [.connectFailed(refused, .refused(.spsmNotSupported))], "a refusal's other fields are not looked at")
        let (unknown, _) = try XCTUnwrap(channels.connect(spsm: 0x26, mode: .le))
        XCTAssertEqual(receive(&channels, .leConnectionResponse(destinationCID: 0, mtu: 0, mps: 0, credits: 0, result: 0x00EE), identifier: 3),
                       [.connectFailed(unknown, .unknownResult(0x00EE))])
        XCTAssertEqual(channels.openCIDs, [0x40], "the refused requests' CIDs are free again")
        XCTAssertEqual(receive(&channels, .leConnectionResponse(destinationCID: 0x72, mtu: 23, mps: 23, credits: 1, result: 0), identifier: 3).count, 1,
                       "a response to no request is only logged")
        XCTAssertEqual(channels.openCIDs, [0x40], "and opens nothing")
    }

    func testARejectedTimedOutOrInvalidAnswerFailsTheRequest() throws {
        var channels = CreditBasedChannels(settings: settings)
        let (rejected, _) = try XCTUnwrap(channels.connect(spsm: 0x25, mode: .enhanced, count: 2))
        XCTAssertEqual(channels.rejected(identifier: 1), [.connectFailed(rejected, .rejected)])
        XCTAssertNil(channels.rejected(identifier: 1), "not ours any more")
        let (silent, _) = try XCTUnwrap(channels.connect(spsm: 0x25, mode: .le))
        XCTAssertEqual(channels.timedOut(identifier: 2), [.connectFailed(silent, .noResponse)])
        let (invalid, _) = try XCTUnwrap(channels.connect(spsm: 0x25, mode: .le))
        XCTAssertEqual(receive(&channels, .leConnectionResponse(destinationCID: 0x0001, mtu: 23, mps: 23, credits: 1, result: 0), identifier: 3), [
            .signal(CreditBasedSignal.disconnectionRequest(destinationCID: 0x0001, sourceCID: 0x40).packet(identifier: 4)),
            .connectFailed(invalid, .invalidResponse),
        ], "a destination CID outside the dynamic range is disconnected at once")
        XCTAssertEqual(channels.openCIDs, [])
    }

    func testAnEnhancedAnswerOpensTheChannelsItGaveCIDs() throws {
        var channels = CreditBasedChannels(settings: settings)
        let (request, sent) = try XCTUnwrap(channels.connect(spsm: 0x27, mode: .enhanced, count: 3))
        XCTAssertEqual(sent, [.signal(CreditBasedSignal.connectionRequest(spsm: 0x27, mtu: 512, mps: 247, credits: 8, sourceCIDs: [0x40, 0x41, 0x42])
            .packet(identifier: 1))])
        XCTAssertEqual(receive(&channels, .connectionResponse(mtu: 64, mps: 64, credits: 4, result: 0x0004, destinationCIDs: [0x60, 0, 0x61]), identifier: 1), [
            .opened(.init(localCID: 0x40, spsm: 0x27, mode: .enhanced, peerMTU: 64, request: request)),
            .opened(.init(localCID: 0x42, spsm: 0x27, mode: .enhanced, peerMTU: 64, request: request)),
            .connectFailed(request, .refused(.noResources)),
        ])
        XCTAssertNil(channels.connect(spsm: 0x27, mode: .enhanced, count: 3), "four channels at most on this link, two open")
    }

    // MARK: Data and credits (§4.24, §10.1)

    func testSDUsGoAsCreditsAllowAndCreditsReleaseTheRest() {
        var channels = accepted()
        XCTAssertEqual(channels.send([UInt8](repeating: 7, count: 101), on: 0x40), .failure(.sduOverMTU(101, mtu: 100)))
        guard case .success(let sent) = channels.send([UInt8](repeating: 7, count: 100), on: 0x40) else { return XCTFail() }
        XCTAssertEqual(sent, [
            .frame(L2CAPFrame(channel: 0x50, payload: [100, 0] + [UInt8](repeating: 7, count: 48))),
            .frame(L2CAPFrame(channel: 0x50, payload: [UInt8](repeating: 7, count: 50))),
            .frame(L2CAPFrame(channel: 0x50, payload: [UInt8](repeating: 7, count: 2))),
        ], "three credits, three K-frames of the peer's MPS 50")
        guard case .success(let waiting) = channels.send([1, 2, 3], on: 0x40) else { return XCTFail() }
        XCTAssertEqual(waiting, [], "no credit left")
        XCTAssertEqual(receive(&channels, .flowControlCredit(cid: 0x50, credits: 0)).count, 1, "0 credits: ignored (§10.1)")
        XCTAssertEqual(receive(&channels, .flowControlCredit(cid: 0x40, credits: 5)).count, 1, "this end's own CID names no channel of the peer's")
        XCTAssertEqual(channels.channel(0x40)?.sendCredits, 0, "neither granted a credit")
        XCTAssertEqual(receive(&channels, .flowControlCredit(cid: 0x50, credits: 1)),
                       [.frame(L2CAPFrame(channel: 0x50, payload: [3, 0, 1, 2, 3]))])
    }

    func testCreditsBeyond65535DisconnectTheChannel() {
        var channels = accepted()
        XCTAssertEqual(receive(&channels, .flowControlCredit(cid: 0x50, credits: 65_532)), [], "3 + 65,532: the most a peer may grant")
        XCTAssertEqual(receive(&channels, .flowControlCredit(cid: 0x50, credits: 0x0000)).count, 1)
        XCTAssertEqual(receive(&channels, .flowControlCredit(cid: 0x50, credits: 1)), [
            .signal(CreditBasedSignal.disconnectionRequest(destinationCID: 0x50, sourceCID: 0x40).packet(identifier: 1)),
            .closed(localCID: 0x40, .violation(.creditOverflow)),
        ])
        XCTAssertEqual(channels.receiveFrame([1, 0, 1], on: 0x40), [], "data after the request is dropped")
        XCTAssertEqual(receive(&channels, .disconnectionResponse(destinationCID: 0x50, sourceCID: 0x40), identifier: 1), [],
                       "the app heard it closed already")
        XCTAssertEqual(channels.openCIDs, [])
    }

    func testReceivedSDUsReturnCreditsAsTheAppTakesThem() {
        var channels = accepted()
        var sdus: [CreditBasedChannel.ReceivedSDU] = []
        for value in 0..<4 {
            guard case .received(0x40, let sdu)? = channels.receiveFrame([1, 0, UInt8(value)], on: 0x40).first else { return XCTFail() }
            sdus.append(sdu)
        }
        XCTAssertEqual(channels.consumed(sdus[0], on: 0x40), [])
        XCTAssertEqual(channels.consumed(sdus[1], on: 0x40), [])
        XCTAssertEqual(channels.consumed(sdus[2], on: 0x40), [])
        XCTAssertEqual(channels.consumed(sdus[3], on: 0x40), [.signal(CreditBasedSignal.flowControlCredit(cid: 0x40, credits: 4).packet(identifier: 1))],
                       "half the window of 8, named by this end's CID")
    }

    func testAKFrameOverTheMPSDisconnectsTheChannelAtOnce() {
        var channels = accepted()
        XCTAssertEqual(channels.receiveFrame([UInt8](repeating: 0, count: 248), on: 0x40), [
            .signal(CreditBasedSignal.disconnectionRequest(destinationCID: 0x50, sourceCID: 0x40).packet(identifier: 1)),
            .closed(localCID: 0x40, .violation(.frameOverMPS(248))),
        ])
        XCTAssertEqual(channels.timedOut(identifier: 1), [], "no answer: gone all the same, and told once")
        XCTAssertEqual(channels.openCIDs, [])
    }

    // MARK: Disconnection (§4.6, §4.7)

    func testDisconnectionRequestsFromThePeer() {
        var channels = accepted()
        XCTAssertEqual(receive(&channels, .disconnectionRequest(destinationCID: 0x41, sourceCID: 0x50)),
                       [.signal([0x01, 0x09, 0x06, 0x00, 0x02, 0x00, 0x41, 0x00, 0x50, 0x00])], "Invalid CID in Request, this end's CID first (§4.1)")
        XCTAssertEqual(receive(&channels, .disconnectionRequest(destinationCID: 0x40, sourceCID: 0x51)).count, 1, "not the channel's peer: dropped")
        XCTAssertEqual(channels.openCIDs, [0x40])
        XCTAssertEqual(receive(&channels, .disconnectionRequest(destinationCID: 0x40, sourceCID: 0x50)), [
            .signal([0x07, 0x09, 0x04, 0x00, 0x40, 0x00, 0x50, 0x00]),
            .closed(localCID: 0x40, .remote),
        ])
        XCTAssertEqual(channels.openCIDs, [])
    }

    func testTheAppClosesAChannel() {
        var channels = accepted()
        XCTAssertEqual(channels.disconnect(0x40), [.signal([0x06, 0x01, 0x04, 0x00, 0x50, 0x00, 0x40, 0x00])])
        XCTAssertEqual(channels.disconnect(0x40), [], "asked once")
        XCTAssertEqual(receive(&channels, .disconnectionResponse(destinationCID: 0x50, sourceCID: 0x40), identifier: 7).count, 1,
                       "an answer with another identifier is not it")
        XCTAssertEqual(receive(&channels, .disconnectionResponse(destinationCID: 0x50, sourceCID: 0x40), identifier: 1), [.closed(localCID: 0x40, .local)])
    }

    func testTheLinkEndingEndsEveryChannelAndRequest() throws {
        var channels = accepted()
        let (request, _) = try XCTUnwrap(channels.connect(spsm: 0x25, mode: .le))
        XCTAssertEqual(channels.linkClosed(), [.connectFailed(request, .noResponse), .closed(localCID: 0x40, .linkClosed)])
        XCTAssertEqual(channels.openCIDs, [])
        XCTAssertEqual(channels.outstandingIdentifiers, [])
    }

    // MARK: Reconfiguration (§4.27, §4.28)

    func testThePeersReconfigurationFollowsTheRules() {
        var channels = CreditBasedChannels(settings: settings)
        _ = receive(&channels, .connectionRequest(spsm: 0x80, mtu: 100, mps: 80, credits: 2, sourceCIDs: [0x50, 0x51]))
        _ = receive(&channels, leRequest(source: 0x52))
        func answer(_ result: ReconfigureResult) -> [CreditBasedChannels.Output] {
            [.signal(CreditBasedSignal.reconfigureResponse(result: result.rawValue).packet(identifier: 9))]
        }
        XCTAssertEqual(receive(&channels, .reconfigureRequest(mtu: 99, mps: 80, destinationCIDs: [0x50])), answer(.mtuReductionNotAllowed))
        XCTAssertEqual(receive(&channels, .reconfigureRequest(mtu: 200, mps: 70, destinationCIDs: [0x50, 0x51])), answer(.mpsReductionNotAllowed))
        XCTAssertEqual(receive(&channels, .reconfigureRequest(mtu: 200, mps: 80, destinationCIDs: [0x50, 0x52])), answer(.invalidDestinationCID),
                       "0x52 is an LE-mode channel")
        XCTAssertEqual(receive(&channels, .reconfigureRequest(mtu: 200, mps: 63, destinationCIDs: [0x50])), answer(.unacceptableParameters))
        XCTAssertEqual(receive(&channels, .reconfigureRequest(mtu: 200, mps: 70, destinationCIDs: [0x51])),
                       answer(.success) + [.reconfigured(localCIDs: [0x41], peerMTU: 200)], "one channel's MPS may shrink")
        XCTAssertEqual(channels.channel(0x41)?.remote, .init(cid: 0x51, mtu: 200, mps: 70))
        XCTAssertEqual(channels.channel(0x40)?.remote, .init(cid: 0x50, mtu: 100, mps: 80))
    }

    func testThisEndAsksToGrowOnlyEnhancedChannels() {
        var channels = CreditBasedChannels(settings: settings)
        _ = receive(&channels, .connectionRequest(spsm: 0x80, mtu: 100, mps: 80, credits: 2, sourceCIDs: [0x50]))
        XCTAssertEqual(channels.reconfigure([0x40], mtu: 1024, mps: 247),
                       [.signal(CreditBasedSignal.reconfigureRequest(mtu: 1024, mps: 247, destinationCIDs: [0x40]).packet(identifier: 1))])
        XCTAssertEqual(channels.reconfigure([0x40], mtu: 256, mps: 247).count, 1)
        if case .signal? = channels.reconfigure([0x40], mtu: 256, mps: 247).first { XCTFail("an MTU below 512 would shrink it") }
        XCTAssertEqual(receive(&channels, .reconfigureResponse(result: 0), identifier: 1).count, 1)
        XCTAssertEqual(channels.channel(0x40)?.local, .init(cid: 0x40, mtu: 1024, mps: 247), "the peer may send bigger SDUs now")
        XCTAssertEqual(channels.outstandingIdentifiers, [])
    }
}
