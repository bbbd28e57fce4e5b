import BerylWire
import Foundation

public func pingRequest(_ payload: [UInt8] = []) -> Request {
    var request = Request()
    request.ping.payload = Data(payload)
    return request
}

public func managerRequest(_ build: (inout Beryl_Ipc_V1_ManagerRequest) -> Void) -> Request {
    var request = Request()
    build(&request.manager)
    return request
}

/// managerd did not say poweredOn in time.
public struct StackNotReady: Error, CustomStringConvertible {
    public var description: String
}

/// Waits until managerd says the controller is powered on: a throwaway app session's Welcome, or a state change after it.
public func waitForPoweredOn(_ socket: String, timeout: Duration = .seconds(20)) throws {
    let session = try IPCClient(path: socket)
    if try session.call(managerRequest { $0.hello = .init() }).manager.welcome.state == .poweredOn { return }
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        guard let envelope = try? session.receive(timeout: .milliseconds(250)) else {
            usleep(10_000)
            continue
        }
        if case .event(let event)? = envelope.body, case .stateChanged(let state)? = event.manager.kind, state == .poweredOn { return }
    }
    throw StackNotReady(description: "\(socket): managerd did not report poweredOn within \(timeout)")
}

extension IPCClient {
    /// The first manager event `match` accepts within `timeout`, looking at events buffered by earlier calls first.
    public func nextManagerEvent(within timeout: Duration, where match: (Beryl_Ipc_V1_ManagerEvent) -> Bool) -> Beryl_Ipc_V1_ManagerEvent? {
        for event in takeEvents() where match(event.manager) { return event.manager }
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            guard let envelope = try? receive(timeout: .milliseconds(200)) else {
                usleep(5_000)
                continue
            }
            if case .event(let event)? = envelope.body, match(event.manager) { return event.manager }
        }
        return nil
    }
}
