@testable import BerylDaemonKit
import Foundation
import XCTest

final class SocketReachTests: XCTestCase {
    let app = SocketReach.Credentials(uid: 1001, gid: 1001)
    let root = SocketReach.Step(path: "/", mode: 0o40755, uid: 0, gid: 0, isSocket: false)
    let run = SocketReach.Step(path: "/run/beryl", mode: 0o40755, uid: 990, gid: 990, isSocket: false)

    func socketStep(_ mode: UInt32, uid: UInt32 = 990, gid: UInt32 = 990) -> SocketReach.Step {
        SocketReach.Step(path: "/run/beryl/managerd.sock", mode: 0o140000 | mode, uid: uid, gid: gid, isSocket: true)
    }

    func testAUserOutsideTheSocketsGroupIsRefusedAtTheSocket() {
        XCTAssertEqual(SocketReach.refusal(for: app, along: [root, run, socketStep(0o660)])?.path, "/run/beryl/managerd.sock")
    }

    func testAMemberOfTheSocketsGroupReachesIt() {
        var member = app
        member.groups = [990]
        XCTAssertNil(SocketReach.refusal(for: member, along: [root, run, socketStep(0o660)]))
        XCTAssertNil(SocketReach.refusal(for: SocketReach.Credentials(uid: 1001, gid: 990), along: [root, run, socketStep(0o660)]), "primary group")
    }

    func testTheOwnerIsJudgedByTheOwnersBitsAlone() {
        // The kernel stops at the first class that matches: an owner without write is refused even if others may write.
        XCTAssertNotNil(SocketReach.refusal(for: app, along: [root, socketStep(0o466, uid: 1001)]))
        XCTAssertNil(SocketReach.refusal(for: app, along: [root, socketStep(0o600, uid: 1001)]))
    }

    func testADirectoryWithoutSearchPermissionRefusesBeforeTheSocket() {
        let closed = SocketReach.Step(path: "/run/beryl", mode: 0o40750, uid: 990, gid: 990, isSocket: false)
        XCTAssertEqual(SocketReach.refusal(for: app, along: [root, closed, socketStep(0o666)])?.path, "/run/beryl")
    }

    func testRootIsNeverRefused() {
        XCTAssertNil(SocketReach.refusal(for: SocketReach.Credentials(uid: 0, gid: 0), along: [root, run, socketStep(0o600)]))
    }

    /// The same judgement over real files: a directory and a socket made with the modes and owners a board has.
    func testStepsAreReadFromTheFileSystem() throws {
        let directory = NSTemporaryDirectory() + "beryl-reach-\(getpid())-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o750])
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/managerd.sock"
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in path.utf8CString.withUnsafeBytes { buffer.copyMemory(from: $0) } }
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
        XCTAssertEqual(bound, 0)
        XCTAssertEqual(chmod(path, 0o660), 0)
        let steps = try XCTUnwrap(SocketReach.steps(toSocket: path))
        XCTAssertEqual(steps.last?.isSocket, true)
        XCTAssertEqual(steps.last.map { $0.mode & 0o777 }, 0o660)
        XCTAssertEqual(steps.first?.path, "/")
        let owner = steps.last!.uid, group = steps.last!.gid
        let stranger = SocketReach.Credentials(uid: owner &+ 4242, gid: group &+ 4242)
        // The directory (0750) refuses a stranger before the socket does.
        XCTAssertEqual(SocketReach.refusal(for: stranger, along: steps)?.path, directory)
        XCTAssertNil(SocketReach.refusal(for: SocketReach.Credentials(uid: owner &+ 4242, gid: group), along: steps), "a member of the group")
        XCTAssertNil(SocketReach.steps(toSocket: directory + "/absent.sock"))
    }
}
