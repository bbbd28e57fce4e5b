@testable import Beryl
import BerylIPC
import BerylSupervisor
import Dispatch
import Foundation
import Synchronization
import XCTest
#if canImport(Glibc)
import Glibc
#endif

/// A peripheral app that records every request it is handed and every misuse reported to it.
final class RequestRecorder: PeripheralManagerDelegate {
    let recorder = Recorder()
    func peripheralManagerDidUpdateState(_ peripheral: PeripheralManager) { recorder.note("state \(peripheral.state)") }
    func peripheralManager(_ peripheral: PeripheralManager, didReceiveRead request: ATTRequest) { recorder.note("read") }
    func peripheralManager(_ peripheral: PeripheralManager, didReceiveWrite requests: [ATTRequest]) { recorder.note("write") }
}

/// The library's side of managerd's request routing, against a managerd played by the test on its own socket, so
/// the one case real managerd never produces on purpose can be staged: a request for a handle the app does not have
/// (a service it removed while the central's request was on its way).
final class UnknownHandleTests: XCTestCase {
    private var directory = ""
    private var listener: Int32 = -1

    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("beryl-unknown-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        listener = try SeqPacketSocket.listen(path: directory + "/managerd.sock")
    }

    override func tearDown() {
        if listener >= 0 { close(listener) }
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Waits for the next envelope on `fd`, up to `seconds`.
    private func receive(_ fd: Int32, seconds: Int32 = 5) -> Envelope? {
        var buffer: [UInt8] = []
        var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&descriptor, 1, seconds * 1000) == 1 else { return nil }
        guard case .message(let bytes) = SeqPacketSocket.receive(fd, cap: IPCLimits.standard.maxMessageBytes, buffer: &buffer) else { return nil }
        return try? Envelope(serializedBytes: bytes)
    }

    private func send(_ fd: Int32, _ envelope: Envelope) {
        guard case .sent = SeqPacketSocket.send(fd, envelope.encoded()) else { return XCTFail("the app's session took no message") }
    }

    /// Accepts the app's session and welcomes it poweredOn, as managerd does.
    private func acceptPoweredOn() throws -> Int32 {
        var descriptor = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
        XCTAssertEqual(poll(&descriptor, 1, 5000), 1, "the app connects")
        let session = try XCTUnwrap(SeqPacketSocket.accept(listener: listener))
        let hello = try XCTUnwrap(receive(session), "the app says Hello first")
        XCTAssertEqual(hello.request.manager.hello.role, .peripheral)
        var welcome = Response()
        welcome.manager.welcome.state = .poweredOn
        welcome.manager.welcome.sessionID = 1
        send(session, .response(welcome, to: hello.requestID))
        return session
    }

    private func requestEvent(_ fill: (inout Beryl_Ipc_V1_ManagerEvent) -> Void) -> Envelope {
        var event = Event()
        fill(&event.manager)
        return .event(event)
    }

    /// The answer the app sends for request `id`, skipping anything else it says meanwhile.
    private func answer(to id: UInt64, on session: Int32, seconds: Int32 = 5) -> Beryl_Ipc_V1_RespondToRequest? {
        while let envelope = receive(session, seconds: seconds) {
            if case .respond(let respond)? = envelope.request.manager.kind, respond.id == id { return respond }
        }
        return nil
    }

    /// A read or a write for a handle no service of the app's has is answered Invalid Handle (Core Vol 3 Part F
    /// §3.4.1.1) on the app's behalf, once, and the app's delegate never hears of it; the app is told of the misuse.
    func testARequestForAHandleTheAppDoesNotHaveIsAnsweredInvalidHandle() throws {
        let app = RequestRecorder()
        let misuse = Recorder()
        let manager = PeripheralManager(delegate: app, queue: DispatchQueue(label: "unknown-handle"),
                                            socketPath: directory + "/managerd.sock")
        manager.apiMisuseHandler = { misuse.note("\($0)") }
        let session = try acceptPoweredOn()
        defer { close(session) }
        XCTAssertNotNil(app.recorder.wait(for: "state poweredOn"))

        send(session, requestEvent { $0.readRequest = .with { $0.id = 41; $0.handle = 0x0099; $0.central = UUID().uuidString } })
        let read = try XCTUnwrap(answer(to: 41, on: session), "the read is answered")
        XCTAssertEqual(read.error, UInt32(ATTError.invalidHandle.rawValue))
        XCTAssertTrue(read.value.isEmpty)

        send(session, requestEvent {
            $0.writeRequest = .with {
                $0.id = 42
                $0.withResponse = true
                $0.central = UUID().uuidString
                $0.writes = [.with { $0.handle = 0x00A0; $0.value = Data([1, 2]) }]
            }
        })
        let write = try XCTUnwrap(answer(to: 42, on: session), "the write is answered")
        XCTAssertEqual(write.error, UInt32(ATTError.invalidHandle.rawValue))

        // A notification-style request (id 0: a write without response) has nobody waiting, so nothing is sent.
        send(session, requestEvent {
            $0.writeRequest = .with { $0.id = 0; $0.central = UUID().uuidString; $0.writes = [.with { $0.handle = 0x00A0; $0.value = Data([3]) }] }
        })
        XCTAssertNil(answer(to: 0, on: session, seconds: 1), "a write without response gets no answer")

        XCTAssertFalse(app.recorder.all.contains("read") || app.recorder.all.contains("write"), "\(app.recorder.all)")
        XCTAssertEqual(misuse.all.count, 2, "each refused request is reported once: \(misuse.all)")
        XCTAssertTrue(misuse.all.allSatisfy { $0.contains("Invalid Handle") }, "\(misuse.all)")
        withExtendedLifetime(manager) {}
    }

    /// Answers the app's next AddService on `session` with the handles attd would give it.
    private func answerAddService(on session: Int32) throws {
        while let envelope = receive(session) {
            guard case .addService? = envelope.request.manager.kind else { continue }
            var added = Response()
            added.manager.serviceAdded = .with { $0.startHandle = 14; $0.endHandle = 16; $0.valueHandles = [16] }
            return send(session, .response(added, to: envelope.requestID))
        }
        XCTFail("the app never added its service on this session")
    }

    /// managerd restarts under a running peripheral app, which adds its service again at poweredOn, as the thermostat
    /// does. The Welcome of the new session must find that session the app's: its handler once ran while the old,
    /// closed session still was (the reconnecting thread had said Hello and not yet swapped), so the add failed "the
    /// session is closed" and every request after was refused Invalid Handle (fault suite, kill-managerd × serving).
    func testAServiceAddedAgainAfterManagerdRestartsGoesToTheNewSession() throws {
        final class Adder: PeripheralManagerDelegate, Sendable {
            let recorder = Recorder()
            let added = DispatchSemaphore(value: 0)
            func peripheralManagerDidUpdateState(_ peripheral: PeripheralManager) {
                recorder.note("state \(peripheral.state)")
                guard peripheral.state == .poweredOn else { return }
                let service = MutableService(type: BluetoothUUID(0xFFF0), primary: true)
                service.characteristics = [MutableCharacteristic(type: BluetoothUUID(0xFFF1), properties: .read, value: nil, permissions: .readable)]
                peripheral.add(service)
            }
            func peripheralManager(_ peripheral: PeripheralManager, didAdd service: Service, error: Error?) {
                recorder.note("added \(error.map { "\($0)" } ?? "ok")")
                added.signal()
            }
            func peripheralManager(_ peripheral: PeripheralManager, didReceiveRead request: ATTRequest) { recorder.note("read") }
        }
        let app = Adder()
        let manager = PeripheralManager(delegate: app, queue: DispatchQueue(label: "restarted"), socketPath: directory + "/managerd.sock")
        let first = try acceptPoweredOn()
        try answerAddService(on: first)
        XCTAssertEqual(app.added.wait(timeout: .now() + 5), .success)
        XCTAssertEqual(app.recorder.all.last, "added ok")

        // The reconnecting thread waits, once the new session is the app's, until the app's second add is answered;
        // before the mend it waited between the Hello and the swap, where the Welcome's handler ran on the old one.
        ManagerSession.afterReconnecting.withLock { $0 = { _ = app.added.wait(timeout: .now() + 3) } }
        defer { ManagerSession.afterReconnecting.withLock { $0 = nil } }
        close(first)  // managerd is gone; its successor listens on the same socket
        let second = try acceptPoweredOn()
        defer { close(second) }
        try answerAddService(on: second)
        XCTAssertTrue(eventually(.seconds(5)) { app.recorder.all.filter { $0.hasPrefix("added") }.count == 2 })
        XCTAssertEqual(app.recorder.all.filter { $0.hasPrefix("added") }, ["added ok", "added ok"], "\(app.recorder.all)")

        // A read of the service the app added again reaches its delegate rather than Invalid Handle.
        send(second, requestEvent { $0.readRequest = .with { $0.id = 7; $0.handle = 16; $0.central = UUID().uuidString } })
        XCTAssertNotNil(app.recorder.wait(for: "read"), "\(app.recorder.all)")
        withExtendedLifetime(manager) {}
    }
}
