import BerylCore
import BerylGAP
@testable import BerylManager
import BerylManagerWire
import BerylStore
import BerylWire
import Foundation
import XCTest

/// The lab's and remote centrals' translations: each request field that cannot be what it should names itself, and
/// each event carries what attd said under the names the lab or the app knows.
final class LabWireTests: XCTestCase {
    func testALabAdvertiseThatCannotBeNamesItsField() {
        func refusal(_ build: (inout Beryl_Ipc_V1_LabAdvertise) -> Void) -> String? {
            var request = Beryl_Ipc_V1_LabAdvertise()
            build(&request)
            do {
                _ = try LabAdvertising(request)
                return nil
            } catch {
                return error.field
            }
        }
        XCTAssertNil(refusal { $0.data = Data(repeating: 0, count: 31); $0.connectable = true })
        XCTAssertEqual(refusal { $0.data = Data(repeating: 0, count: 32) }, "data")
        XCTAssertEqual(refusal { $0.scanResponse = Data(repeating: 0, count: 32) }, "scan_response")
        XCTAssertEqual(refusal { $0.interval = 0x4001 }, "interval")
        XCTAssertEqual(refusal { $0.directedTo = "not an address" }, "directed_to")
        var directed = Beryl_Ipc_V1_LabAdvertise()
        directed.directedTo = "C0:00:00:00:00:02/random"
        directed.ownAddressType = .random
        let advertising = try? LabAdvertising(directed)
        XCTAssertEqual(advertising?.kind, .connectableDirectedLowDuty)
        XCTAssertEqual(advertising?.ownAddress, .random)
        XCTAssertEqual(advertising?.directedTo, DeviceAddress("C0:00:00:00:00:02/random"))
    }

    func testAnOwnAddressTypeThisBerylDoesNotKnowIsPublic() {
        XCTAssertEqual(LabOwnAddress(.resolvableOrRandom), .resolvableOrRandom)
        XCTAssertEqual(LabOwnAddress(.UNRECOGNIZED(4)), .public)
        XCTAssertEqual(LabOwnAddress(.UNRECOGNIZED(257)), .public, "not truncated to 1 (random)")
        XCTAssertEqual(LabOwnAddress(.UNRECOGNIZED(-1)), .public)
    }

    func testALabLinkCarriesItsSecurityAndTimingWhenKnown() throws {
        let link = ConnectionBook.Link(handle: 0x41, address: try XCTUnwrap(DeviceAddress("00:11:22:33:44:55")), isCentral: true, holders: [])
        let bare = Beryl_Ipc_V1_LabLink(link, security: nil, timing: nil)
        XCTAssertEqual(bare.handle, 0x41)
        XCTAssertEqual(bare.peer, "00:11:22:33:44:55")
        XCTAssertTrue(bare.central)
        XCTAssertFalse(bare.hasSecurity)
        XCTAssertEqual(bare.interval, 0)
        let full = Beryl_Ipc_V1_LabLink(link, security: LabSecurity(encrypted: true, keySize: 16),
                                        timing: LinkTiming(handle: 0x41, interval: 24, latency: 1, supervisionTimeout: 200))
        XCTAssertEqual(full.security.keySize, 16)
        XCTAssertTrue(full.security.encrypted)
        XCTAssertEqual([full.interval, full.latency, full.supervisionTimeout], [24, 1, 200])
    }

    func testAScanReportReachesTheLabAsTheControllerGaveIt() throws {
        let report = AdvertisingReport(kind: .scanResponse, address: try XCTUnwrap(DeviceAddress("C0:00:00:00:00:09/random")), data: [2, 1, 6], rssi: -61)
        let wire = Beryl_Ipc_V1_LabScanReport(report)
        XCTAssertEqual(wire.eventType, 0x04)
        XCTAssertEqual(wire.address, "C0:00:00:00:00:09/random")
        XCTAssertEqual(wire.rssi, -61)
        XCTAssertEqual(wire.data, Data([2, 1, 6]))
    }

    func testAttdsPairingEventsAsTheLabTakesThem() {
        var finished = Beryl_Ipc_V1_PairingFinished()
        finished.connectionHandle = 0x42
        finished.success = true
        finished.peer = "00:11:22:33:44:55"
        finished.result = .with { $0.encrypted = true; $0.bonded = true; $0.authenticated = true; $0.secureConnections = true; $0.keySize = 16 }
        let security = LabSecurity(encrypted: true, authenticated: true, bonded: true, secureConnections: true, keySize: 16)
        XCTAssertEqual(LabSecurityEvent(.pairingFinished(finished)),
                       .pairingFinished(handle: 0x42, .success(security), bondIdentity: "00:11:22:33:44:55"),
                       "no identity address distributed: the bond is under the link's address")
        finished.result.identity = "5A:00:00:00:00:03/random"
        XCTAssertEqual(LabSecurityEvent(.pairingFinished(finished)),
                       .pairingFinished(handle: 0x42, .success(security), bondIdentity: "5A:00:00:00:00:03/random"))

        var failed = Beryl_Ipc_V1_PairingFinished()
        failed.connectionHandle = 0x42
        failed.reason = 0x05
        failed.remote = true
        XCTAssertEqual(LabSecurityEvent(.pairingFinished(failed)),
                       .pairingFinished(handle: 0x42, .failure(LabPairingFailure(reason: 0x05, remote: true)), bondIdentity: nil))

        var unbonded = finished
        unbonded.result.bonded = false
        var unbondedSecurity = security
        unbondedSecurity.bonded = false
        XCTAssertEqual(LabSecurityEvent(.pairingFinished(unbonded)),
                       .pairingFinished(handle: 0x42, .success(unbondedSecurity), bondIdentity: nil), "no bond, nothing for a factory reset to take back")

        var changed = Beryl_Ipc_V1_SecurityChanged()
        changed.connectionHandle = 0x43
        changed.status = 0x06
        XCTAssertEqual(LabSecurityEvent(.securityChanged(changed)),
                       .securityChanged(handle: 0x43, status: 0x06, encrypted: false, authenticated: false, bonded: false))
        (changed.status, changed.encrypted, changed.authenticated, changed.bonded) = (0, true, false, true)
        XCTAssertEqual(LabSecurityEvent(.securityChanged(changed)),
                       .securityChanged(handle: 0x43, status: 0, encrypted: true, authenticated: false, bonded: true))
        (changed.encrypted, changed.authenticated, changed.bonded) = (false, true, false)
        XCTAssertEqual(LabSecurityEvent(.securityChanged(changed)),
                       .securityChanged(handle: 0x43, status: 0, encrypted: false, authenticated: true, bonded: false))

        var prompt = Beryl_Ipc_V1_PairingPrompt()
        (prompt.connectionHandle, prompt.kind, prompt.number) = (0x44, .enterPasskey, 654321)
        guard case .prompt(0x44, let labPrompt)? = LabSecurityEvent(.pairingPrompt(prompt)) else { return XCTFail("a prompt on 0x44") }
        XCTAssertEqual(labPrompt.handle, 0x44)
        XCTAssertEqual(labPrompt.kind, .enterPasskey)
        XCTAssertEqual(labPrompt.number, 654321)
        XCTAssertNil(LabSecurityEvent(.readyToUpdate(.init())))
    }

    func testARemoteCentralsRequestsReachTheOwningManagerUnderItsIdentifier() throws {
        var read = Beryl_Ipc_V1_ReadRequested()
        (read.id, read.connectionHandle, read.handle, read.offset) = (7, 0x40, 0x12, 22)
        let readEvent = Beryl_Ipc_V1_ManagerEvent(read, manager: 3, central: "C-1", maximumUpdateLength: 244)
        XCTAssertEqual(readEvent.readRequest, .with {
            $0.manager = 3; $0.id = 7; $0.central = "C-1"; $0.handle = 0x12; $0.offset = 22; $0.maximumUpdateLength = 244
        })

        var command = Beryl_Ipc_V1_WriteRequested()
        command.id = 8
        command.withResponse = false
        command.writes = [.with { $0.handle = 0x14; $0.value = Data([1]) }]
        let commandEvent = Beryl_Ipc_V1_ManagerEvent(command, manager: 3, central: "C-1", maximumUpdateLength: 20)
        XCTAssertEqual(commandEvent.writeRequest.id, 0, "a write without response takes no answer, so it has no request id")
        XCTAssertEqual(commandEvent.writeRequest.writes, command.writes)
        XCTAssertFalse(commandEvent.writeRequest.withResponse)
        XCTAssertEqual(commandEvent.writeRequest.central, "C-1")
        XCTAssertEqual(commandEvent.writeRequest.manager, 3)
        XCTAssertEqual(commandEvent.writeRequest.maximumUpdateLength, 20)
        command.withResponse = true
        let request = Beryl_Ipc_V1_ManagerEvent(command, manager: 3, central: "C-1", maximumUpdateLength: 20).writeRequest
        XCTAssertEqual(request.id, 8)
        XCTAssertTrue(request.withResponse)

        var subscription = Beryl_Ipc_V1_SubscriptionChanged()
        (subscription.valueHandle, subscription.notify) = (0x16, true)
        let report = try XCTUnwrap(ReportedSubscription(subscription))
        XCTAssertEqual(report, ReportedSubscription(link: 0, valueHandle: 0x16, notify: true, indicate: false))
        let kept = PreservedState.Subscription(central: "C-2", valueHandle: report.valueHandle, notify: report.notify, indicate: report.indicate,
                                               maximumUpdateLength: 20)
        let subscribed = Beryl_Ipc_V1_ManagerEvent(subscription: kept, manager: 2).subscription
        XCTAssertEqual([subscribed.manager, subscribed.valueHandle, subscribed.maximumUpdateLength], [2, 0x16, 20])
        XCTAssertEqual(subscribed.central, "C-2")
        XCTAssertTrue(subscribed.notify)
        XCTAssertFalse(subscribed.indicate)
    }

    func testAPairingEventReachesAnAppUnderTheLinksIdentifier() {
        var prompt = Beryl_Ipc_V1_PairingPrompt()
        (prompt.connectionHandle, prompt.kind, prompt.number, prompt.peer) = (0x40, .confirmNumber, 123456, "00:11:22:33:44:55")
        let kind = Beryl_Ipc_V1_AttEvent.OneOf_Kind.pairingPrompt(prompt)
        XCTAssertEqual(kind.pairingLink, 0x40)
        let event = Beryl_Ipc_V1_ManagerEvent(pairing: kind, peer: "P-1")
        XCTAssertEqual(event?.pairingPrompt.peer, "P-1")
        XCTAssertEqual(event?.pairingPrompt.address, "00:11:22:33:44:55")
        XCTAssertEqual(event?.pairingPrompt.number, 123456)
        XCTAssertEqual(event?.pairingPrompt.kind, .confirmNumber)

        var finished = Beryl_Ipc_V1_PairingFinished()
        (finished.connectionHandle, finished.reason, finished.remote) = (0x41, 0x03, true)
        let result = Beryl_Ipc_V1_ManagerEvent(pairing: .pairingFinished(finished), peer: "P-2")?.pairingFinished
        XCTAssertEqual(result?.peer, "P-2")
        XCTAssertEqual(result?.reason, 0x03)
        XCTAssertEqual(result?.remote, true)
        XCTAssertEqual(result?.success, false)

        var bonded = Beryl_Ipc_V1_PairingFinished()
        (bonded.connectionHandle, bonded.success, bonded.peer) = (0x41, true, "7A:00:00:00:00:01/random")
        bonded.result = .with { $0.bonded = true; $0.authenticated = true; $0.secureConnections = true; $0.identity = "00:AA:BB:CC:DD:EE" }
        let made = try? XCTUnwrap(Beryl_Ipc_V1_ManagerEvent(pairing: .pairingFinished(bonded), peer: "P-3")?.pairingFinished)
        XCTAssertEqual(made?.address, "7A:00:00:00:00:01/random", "the address the link used")
        XCTAssertEqual(made?.identity, "00:AA:BB:CC:DD:EE", "the identity the peer distributed")
        XCTAssertEqual([made?.success, made?.bonded, made?.authenticated, made?.secureConnections, made?.remote], [true, true, true, true, false])

        XCTAssertNil(Beryl_Ipc_V1_ManagerEvent(pairing: .readyToUpdate(.init()), peer: "P-1"))
        XCTAssertNil(Beryl_Ipc_V1_AttEvent.OneOf_Kind.readyToUpdate(.init()).pairingLink)
    }

    /// Each refusal keeps the IPC code (and field) the lab heard before LabCore typed it: a Pandora server maps these
    /// codes to its gRPC statuses.
    func testEveryLabRefusalHasItsCodeAndField() {
        let peer = DeviceAddress("C0:11:22:33:44:55/random")!
        let expected: [(LabRefusal, IPCErrorCode, String)] = [
            (.notLabSession, .permissionDenied, ""), (.notGranted(uid: 1000), .permissionDenied, ""),
            (.appSessionCannotBecomeLab, .invalidArgument, "lab_open"), (.anotherLabOpen(session: 3), .busy, ""),
            (.connect(.attemptUnderWay(peer)), .busy, ""), (.connect(.linkExists(peer, handle: 0x40)), .alreadyExists, "address"),
            (.peripheralStoreUnusable, .internal, ""), (.recordUnreadable, .internal, ""), (.resetUnderWay, .busy, ""),
            (.noLink(handle: 0x40), .notFound, "handle"), (.noLabLink(handle: 0x40), .notFound, "handle"),
            (.resetFailed("the controller reset failed"), .notReady, ""), (.attdNotAttached, .notReady, ""), (.attemptCancelled(peer), .cancelled, ""),
            (.attemptEndedByReset, .cancelled, ""), (.reopened, .cancelled, ""), (.labClosed, .cancelled, ""),
        ]
        for (refusal, code, field) in expected {
            XCTAssertEqual(refusal.wire.code, code, "\(refusal)")
            XCTAssertEqual(refusal.wire.field, field, "\(refusal)")
        }
        XCTAssertEqual("\(LabRefusal.noLabLink(handle: 0x41))", "no lab link 0x41")
    }

    // A factory reset takes back the lab's bonds: one attd removed, had not, or could never hold leaves the record;
    // one it could not be asked about stays for the next reset.
    func testABondLeavesTheLabRecordOnlyOnceAttdHasNoneOfIt() {
        XCTAssertTrue(LabRecord.bondGone(after: .success(Response())))
        XCTAssertTrue(LabRecord.bondGone(after: .failure(.remote(code: .notFound, message: "no bond", field: "identity"))))
        XCTAssertTrue(LabRecord.bondGone(after: .failure(.remote(code: .invalidArgument, message: "not an address", field: "identity"))))
        XCTAssertFalse(LabRecord.bondGone(after: .failure(.closed)), "attd away")
        XCTAssertFalse(LabRecord.bondGone(after: .failure(.remote(code: .internal, message: "store unwritable", field: ""))))
    }
}
