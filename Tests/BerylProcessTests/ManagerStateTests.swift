import BerylDaemonKit
import BerylIPC
import BerylSupervisor
import BerylTestSupport
import Foundation
import XCTest

/// managerd tells a session the controller's state in its Welcome, and every change after it, never before it.
final class ManagerStateTests: XCTestCase {
    /// A session connected but not yet welcomed (its Hello still queued) hears no state change: the library took a
    /// poweredOn ahead of the Welcome, the app added its services, and the Welcome's clearing after managerd's
    /// restart then removed them (fault run: kill -9 managerd × connecting, the thermostat's service gone).
    func testAStateChangeReachesOnlySessionsAlreadyWelcomed() throws {
        let scratch = try Scratch()
        defer { scratch.stopAll() }
        try scratch.start("berylsim", [Executables.path("berylsim"), "--dir", scratch.root, "--controllers", "1"], socket: scratch.root + "/control.sock")
        try scratch.startDaemon("managerd")
        var hello = Request()
        hello.manager.hello = .init()
        let welcomed = try IPCClient(path: scratch.paths.socket("managerd"))
        XCTAssertNotEqual(try welcomed.call(hello).manager.welcome.state, .poweredOn, "no hcid yet")
        let waiting = try IPCClient(path: scratch.paths.socket("managerd"))
        XCTAssertEqual(Array(try waiting.call(pingRequest([7])).pong.payload), [7], "connected and served, not welcomed")

        try scratch.startDaemon("hcid")
        try scratch.startDaemon("attd")
        var heard: [Beryl_Ipc_V1_ControllerState] = []
        let deadline = ContinuousClock.now + .seconds(10)
        while heard.last != .poweredOn, ContinuousClock.now < deadline {
            guard let envelope = try? welcomed.receive(timeout: .seconds(1)) else { continue }
            if case .event(let event)? = envelope.body, case .stateChanged(let state)? = event.manager.kind { heard.append(state) }
        }
        XCTAssertEqual(heard.last, .poweredOn, "the welcomed session hears each change: \(heard)")

        XCTAssertThrowsError(try waiting.receive(timeout: .milliseconds(500)), "nothing before its Welcome")
        XCTAssertEqual(try waiting.call(hello).manager.welcome.state, .poweredOn, "the Welcome says the state")
        XCTAssertTrue(waiting.takeEvents().isEmpty)
    }
}
