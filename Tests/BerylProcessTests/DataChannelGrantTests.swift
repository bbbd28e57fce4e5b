import BerylDaemonKit
import BerylIPC
import BerylSupervisor
import BerylTestSupport
import Foundation
import XCTest

/// An app's data channel on the wire: managerd passes it in the Welcome of a session that asks, attd takes on it only
/// the app's own values, only while the app is in the foreground, and closes it with the app's session; every refusal
/// is typed with its GrantReason.
final class DataChannelGrantTests: XCTestCase {
    private func hello(_ appID: String, wantsChannel: Bool) -> Request {
        managerRequest {
            $0.hello.appID = appID
            $0.hello.role = .peripheral
            $0.hello.wantsDataChannel = wantsChannel
        }
    }

    /// A session's Welcome and, when managerd passed one, its data channel.
    private func welcome(_ socket: String, appID: String, wantsChannel: Bool = true) throws -> (IPCClient, IPCClient?) {
        let session = try IPCClient(path: socket)
        let welcome = try session.call(hello(appID, wantsChannel: wantsChannel)).manager.welcome
        let descriptor = session.takePassedDescriptor()
        XCTAssertEqual(welcome.dataChannel, descriptor != nil, "the Welcome says a channel came exactly when one did")
        return (session, descriptor.map { IPCClient(descriptor: $0, name: "data channel of \(appID)") })
    }

    private func publish(on session: IPCClient) throws -> UInt32 {
        let added = try session.call(managerRequest {
            $0.addService.manager = 1
            $0.addService.service = .with {
                $0.uuid = "FFE0"
                $0.primary = true
                $0.characteristics = [.with { $0.uuid = "FFE1"; $0.properties = 0x10; $0.permissions = 0x01 }]
            }
        }).manager.serviceAdded
        return try XCTUnwrap(added.valueHandles.first)
    }

    private func notify(_ handle: UInt32) -> Request {
        var request = Request()
        request.att.notify = .with { $0.valueHandle = handle; $0.value = Data([1, 2]) }
        return request
    }

    private func refusal(_ channel: IPCClient, _ request: Request) -> (IPCErrorCode, Beryl_Ipc_V1_GrantReason)? {
        do {
            _ = try channel.call(request)
            return nil
        } catch {
            guard case .remote(let code, _, _, let detail) = error else { return nil }
            return (code, detail.grantReason)
        }
    }

    private func grantChange(on channel: IPCClient) -> Bool? {
        for event in channel.takeEvents() { if case .dataGrantChanged(let change)? = event.att.kind { return change.live } }
        guard let envelope = try? channel.receive(timeout: .seconds(5)), case .event(let event)? = envelope.body,
              case .dataGrantChanged(let change)? = event.att.kind else { return nil }
        return change.live
    }

    func testAttdTakesOnlyTheAppsOwnValuesAndOnlyWhileItIsInTheForeground() throws {
        let scratch = try Scratch()
        defer { scratch.stopAll() }
        try scratch.start("berylsim", [Executables.path("berylsim"), "--dir", scratch.root, "--controllers", "1"], socket: scratch.root + "/control.sock")
        for daemon in ["hcid", "attd", "managerd"] { try scratch.startDaemon(daemon) }
        let socket = scratch.paths.socket("managerd")
        try waitForPoweredOn(socket)

        let (_, none) = try welcome(socket, appID: "", wantsChannel: false)
        XCTAssertNil(none, "a session that does not ask (a C client) gets no channel")

        let (owner, ownerChannel) = try welcome(socket, appID: "com.example.owner")
        let (otherSession, otherChannel) = try welcome(socket, appID: "com.example.other")
        let channel = try XCTUnwrap(ownerChannel)
        let other = try XCTUnwrap(otherChannel)
        let valueHandle = try publish(on: owner)

        XCTAssertEqual(try channel.call(notify(valueHandle)).att.notified.peers, 0, "the app's own value is taken (no central subscribed)")
        XCTAssertEqual(refusal(other, notify(valueHandle))?.0, .permissionDenied)
        XCTAssertEqual(refusal(other, notify(valueHandle))?.1, .outsideGrant, "another app's value is outside the grant")
        XCTAssertEqual(refusal(channel, notify(0xFFF0))?.1, .outsideGrant, "a handle no service of the app has")
        var read = Request()
        read.att.gattRead = .with { $0.peripheral = "F0F0F0F0-0000-4000-8000-000000000001"; $0.handle = valueHandle }
        XCTAssertEqual(refusal(channel, read)?.1, .outsideGrant, "a read on a link the app does not hold")
        var discover = Request()
        discover.att.gattDiscover = .with { $0.connectionHandle = 0x40 }
        XCTAssertEqual(refusal(channel, discover)?.1, .notADataOperation, "a data channel carries values, not discoveries")
        var publishing = Request()
        publishing.att.publishService.service = .with { $0.uuid = "FFF0"; $0.primary = true }
        XCTAssertEqual(refusal(channel, publishing)?.1, .notADataOperation, "nor a publisher's")
        var status = Request()
        status.getStatus = .init()
        XCTAssertEqual(refusal(channel, status)?.1, .notADataOperation, "nor attd's status")

        let control = try IPCClient(path: socket)
        _ = try control.call(managerRequest { $0.setAppState = .with { $0.appID = "com.example.owner"; $0.state = .background } })
        XCTAssertEqual(grantChange(on: channel), false, "the channel hears its grant revoked when the app leaves the foreground")
        XCTAssertEqual(refusal(channel, notify(valueHandle))?.1, .revoked, "and its values go through managerd meanwhile")
        XCTAssertEqual(try owner.call(managerRequest { $0.updateValue = .with { $0.manager = 1; $0.valueHandle = valueHandle; $0.value = Data([3]) } })
                        .manager.updateResult.sent, true, "managerd still carries them")
        _ = try control.call(managerRequest { $0.setAppState = .with { $0.appID = "com.example.owner"; $0.state = .foreground } })
        XCTAssertEqual(grantChange(on: channel), true)
        XCTAssertEqual(try channel.call(notify(valueHandle)).att.notified.peers, 0, "live again in the foreground")

        let attd = try IPCClient(path: scratch.paths.socket("attd"))
        let counters = try attd.call(.with { $0.getStatus = .init() }).status.dataPlane
        XCTAssertEqual([counters.channels, UInt32(counters.refusedRevoked), UInt32(counters.refusedOutsideGrant), UInt32(counters.refusedNotData)],
                       [2, 1, 4, 3], "attd's status counts the channels and each refusal: \(counters)")
        XCTAssertEqual([counters.channelValues, counters.publisherValues], [2, 1], "values taken on channels and from managerd for an app")

        // The app's session with managerd ends: attd closes the channel with it.
        shutdown(owner.fd, Int32(SHUT_RDWR))
        XCTAssertTrue(eventually(.seconds(5)) {
            if case .failure(.closed) = Result(catching: { () throws(IPCClientError) in try channel.receive(timeout: .milliseconds(200)) }) { return true }
            return false
        }, "the channel closes when its app's session does")
        XCTAssertEqual(try other.call(pingRequest([9])).pong.payload, Data([9]), "another app's channel stays open")

        // An app killed outright closes its end: attd frees the channel at once, its session with managerd or not.
        shutdown(other.fd, Int32(SHUT_RDWR))
        XCTAssertTrue(eventually(.seconds(5)) { ((try? attd.call(.with { $0.getStatus = .init() }))?.status.dataPlane.channels ?? 9) == 0 },
                      "attd keeps no channel whose app end is gone")
        withExtendedLifetime(otherSession) {}
    }
}
