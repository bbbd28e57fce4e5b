import BerylCore
import BerylDaemonKit
import BerylEventLoop
import BerylHCI
import BerylIPC
import Foundation

/// `beryl gatt`: connects to a peer through hcid, runs one GATT operation through attd, prints, disconnects.
/// (Through managerd once it owns connections; until then straight to the daemons, as the attd issue allows.)
public final class GattClientSession {
    public enum Operation: Equatable, Sendable {
        case discover
        case read(BluetoothUUID)
        case write(BluetoothUUID, [UInt8], withoutResponse: Bool)
        /// Prepared, echoed and executed as one (Core Vol 3 Part G §4.9.5), even when it would fit one request.
        case reliableWrite(BluetoothUUID, [UInt8])
        case subscribe(BluetoothUUID, count: Int)
        /// A descriptor of a characteristic, read or written.
        case readDescriptor(BluetoothUUID, descriptor: BluetoothUUID)
        case writeDescriptor(BluetoothUUID, descriptor: BluetoothUUID, [UInt8])

        public var verb: String {
            switch self {
            case .discover: "discovery"
            case .read: "read"
            case .write: "write"
            case .reliableWrite: "reliable write"
            case .subscribe: "subscribe"
            case .readDescriptor: "descriptor read"
            case .writeDescriptor: "descriptor write"
            case .pair: "pairing"
            }
        }
        /// Pair (or encrypt with a stored bond) and report the link's security.
        case pair
    }

    public var agent = PairingAgent()

    let loop: EventLoop
    let paths: DaemonPaths
    let peer: DeviceAddress
    let operation: Operation
    let timeout: Duration
    let emit: ([String: Any]) -> Void
    var hcid: IPCConnection?
    var attd: IPCConnection?
    var handle: UInt16?
    var subscribedHandle: UInt32?
    var received = 0
    var deadline: EventRegistration?
    public private(set) var failure: GattFailure?
    /// The link came up once: a failure after that is the operation's, not the connection's.
    private var linkWasUp = false

    public init(loop: EventLoop, paths: DaemonPaths, peer: DeviceAddress, operation: Operation, timeout: Duration,
                emit: @escaping ([String: Any]) -> Void) {
        self.loop = loop
        self.paths = paths
        self.peer = peer
        self.operation = operation
        self.timeout = timeout
        self.emit = emit
    }

    public func start() throws {
        let hcid = try IPCConnection(loop: loop, path: paths.socket("hcid"))
        let attd = try IPCConnection(loop: loop, path: paths.socket("attd"))
        self.hcid = hcid
        self.attd = attd
        hcid.onEvent = { [unowned self] in self.hcidEvent($0) }
        attd.onEvent = { [unowned self] in self.attdEvent($0) }
        var subscribe = Request()
        subscribe.hci.subscribe.events = true
        hcid.request(subscribe) { [unowned self] _ in self.connect() }
        deadline = try loop.after(timeout) { [unowned self] in
            self.fail(self.handle == nil ? "no connection to \(self.peer) within \(self.timeout)" : "timed out", timedOut: true)
        }
    }

    private func command(_ packet: HCICommandPacket, then: @escaping (Result<Response, IPCClientError>) -> Void = { _ in }) {
        hcid?.request(.hci(packet), completion: then)
    }

    private func connect() {
        // 30 ms interval, 2 s supervision timeout.
        command(HCICommands.leCreateConnection(peer: peer, interval: 24, supervisionTimeout: 200)) { [unowned self] result in
            switch result {
            case .failure(let error):
                self.fail("LE Create Connection was not run: \(error)", error: error)
            case .success(let response):
                let status = response.hci.commandResult.status
                if status != 0 { self.fail("LE Create Connection refused (status 0x\(String(status ?? 0xFF, radix: 16)))", hciStatus: status) }
            }
        }
    }

    private func hcidEvent(_ event: Event) {
        switch event.linkEvent {
        case .connectionFailed(let status)? where handle == nil:
            fail("connection failed with status 0x\(String(status, radix: 16))", hciStatus: status)
        case .connected(let connected, _, _)? where handle == nil:
            handle = connected
            linkWasUp = true
            emit(["event": "connected", "peer": peer.description, "handle": Int(connected)])
            // attd hears of the link from hcid too; its bearer_opened event says it is ready (discover also retries).
            if operation == .pair { pair() } else { discover() }
        case .disconnected(let disconnected, let reason)? where disconnected == handle:
            handle = nil
            if failure == nil, !done { fail("the peer disconnected (reason 0x\(String(reason, radix: 16)))", disconnectReason: reason) } else { loop.stop() }
        default:
            break
        }
    }

    private var done = false

    private var discovering = false

    private func discover() {
        guard let handle, !discovering, !done else { return }
        discovering = true
        var request = Request()
        request.att.gattDiscover.connectionHandle = UInt32(handle)
        attd?.request(request) { [unowned self] result in
            self.discovering = false
            switch result {
            case .failure(.remote(.notFound, _, _, _)):
                // attd has not seen the connection yet: its bearer_opened event (or this retry) starts discovery; the deadline bounds it.
                _ = try? self.loop.after(.milliseconds(100)) { [unowned self] in self.discover() }
            case .failure(let error):
                self.fail("discovery failed: \(error)", error: error)
            case .success(let response):
                self.perform(with: response.att.gattDatabase)
            }
        }
    }

    private var discovered = false
    private var pairing = false

    private func pair() {
        guard let handle, !pairing, !done else { return }
        pairing = true
        var request = Request()
        request.att.pair.connectionHandle = UInt32(handle)
        attd?.request(request) { [unowned self] result in
            switch result {
            case .failure(.remote(.notFound, _, _, _)):
                self.pairing = false
                _ = try? self.loop.after(.milliseconds(100)) { [unowned self] in self.pair() }
            case .failure(let error):
                self.fail("\(error)", error: error)
            case .success(let response):
                let paired = response.att.paired
                self.emit(["event": "paired", "peer": self.peer.description, "encrypted": paired.encrypted, "authenticated": paired.authenticated,
                           "bonded": paired.bonded, "secureConnections": paired.secureConnections, "keySize": Int(paired.keySize),
                           "identity": paired.identity])
                self.finish(nil)
            }
        }
    }

    private func perform(with database: Beryl_Ipc_V1_GattDatabase) {
        guard !discovered else { return }
        discovered = true
        func find(_ uuid: BluetoothUUID) -> Beryl_Ipc_V1_GattCharacteristicInfo? {
            database.services.flatMap(\.characteristics).first { BluetoothUUID($0.uuid) == uuid }
        }
        guard let handle else { return }
        switch operation {
        case .discover:
            for service in database.services {
                emit(["event": "service", "uuid": service.uuid, "start": Int(service.startHandle), "end": Int(service.endHandle),
                      "characteristics": service.characteristics.map { characteristic in
                          ["uuid": characteristic.uuid, "properties": Int(characteristic.properties), "valueHandle": Int(characteristic.valueHandle),
                           "descriptors": characteristic.descriptors.map { ["uuid": $0.uuid, "handle": Int($0.handle)] }] as [String: Any]
                      }])
            }
            finish(nil)
        case .read(let uuid):
            guard let characteristic = find(uuid) else { return fail(NotOnPeer.characteristic(uuid)) }
            var request = Request()
            request.att.gattRead = .with { $0.connectionHandle = UInt32(handle); $0.handle = characteristic.valueHandle }
            attd?.request(request) { [unowned self] result in
                switch result {
                case .success(let response):
                    self.emit(["event": "read", "uuid": uuid.description, "value": Hex.encode(response.att.gattValue.value)])
                    self.finish(nil)
                case .failure(let error):
                    self.fail("read failed: \(error)", error: error)
                }
            }
        case .write(let uuid, let value, let withoutResponse):
            guard let characteristic = find(uuid) else { return fail(NotOnPeer.characteristic(uuid)) }
            var request = Request()
            request.att.gattWrite = .with {
                $0.connectionHandle = UInt32(handle)
                $0.handle = characteristic.valueHandle
                $0.value = Data(value)
                $0.withoutResponse = withoutResponse
            }
            attd?.request(request) { [unowned self] result in
                switch result {
                case .success:
                    self.emit(["event": "written", "uuid": uuid.description, "bytes": value.count, "withResponse": !withoutResponse])
                    // A command has no answer to wait for; give the link a moment to carry it before disconnecting.
                    _ = try? self.loop.after(.milliseconds(withoutResponse ? 200 : 0)) { [unowned self] in self.finish(nil) }
                case .failure(let error):
                    self.fail("write failed: \(error)", error: error)
                }
            }
        case .pair:
            pair()
        case .readDescriptor(let uuid, let descriptorUUID), .writeDescriptor(let uuid, let descriptorUUID, _):
            guard let characteristic = find(uuid) else { return fail(NotOnPeer.characteristic(uuid)) }
            guard let descriptor = characteristic.descriptors.first(where: { BluetoothUUID($0.uuid) == descriptorUUID }) else {
                return fail(NotOnPeer.descriptor(descriptorUUID, of: uuid))
            }
            var request = Request()
            if case .writeDescriptor(_, _, let value) = operation {
                request.att.gattWrite = .with { $0.connectionHandle = UInt32(handle); $0.handle = descriptor.handle; $0.value = Data(value) }
            } else {
                request.att.gattRead = .with { $0.connectionHandle = UInt32(handle); $0.handle = descriptor.handle }
            }
            attd?.request(request) { [unowned self] result in
                switch (result, self.operation) {
                case (.success(let response), .readDescriptor):
                    self.emit(["event": "read", "uuid": uuid.description, "descriptor": descriptorUUID.description,
                               "value": Hex.encode(response.att.gattValue.value)])
                    self.finish(nil)
                case (.success, .writeDescriptor(_, _, let value)):
                    self.emit(["event": "written", "uuid": uuid.description, "descriptor": descriptorUUID.description, "bytes": value.count])
                    self.finish(nil)
                case (.failure(let error), _):
                    self.fail("\(self.operation.verb) failed: \(error)", error: error)
                default:
                    self.finish(nil)
                }
            }
        case .reliableWrite(let uuid, let value):
            guard let characteristic = find(uuid) else { return fail(NotOnPeer.characteristic(uuid)) }
            var request = Request()
            request.att.gattReliableWrite = .with {
                $0.connectionHandle = UInt32(handle)
                $0.writes = [.with { $0.handle = characteristic.valueHandle; $0.value = Data(value) }]
            }
            attd?.request(request) { [unowned self] result in
                switch result {
                case .success:
                    self.emit(["event": "written", "uuid": uuid.description, "bytes": value.count, "withResponse": true, "reliable": true])
                    self.finish(nil)
                case .failure(let error):
                    self.fail("reliable write failed: \(error)", error: error)
                }
            }
        case .subscribe(let uuid, _):
            guard let characteristic = find(uuid) else { return fail(NotOnPeer.characteristic(uuid)) }
            let indicate = characteristic.properties & 0x10 == 0 && characteristic.properties & 0x20 != 0
            let cccd = characteristic.descriptors.first { BluetoothUUID($0.uuid) == BluetoothUUID(0x2902) }?.handle ?? characteristic.valueHandle + 1
            subscribedHandle = characteristic.valueHandle
            var request = Request()
            request.att.gattSubscribe = .with {
                $0.connectionHandle = UInt32(handle)
                $0.valueHandle = characteristic.valueHandle
                $0.cccdHandle = cccd
                $0.indicate = indicate
                $0.enable = true
            }
            attd?.request(request) { [unowned self] result in
                if case .failure(let error) = result { self.fail("subscribe failed: \(error)", error: error) }
                else { self.emit(["event": "subscribed", "uuid": uuid.description, "indications": indicate]) }
            }
        }
    }

    private func attdEvent(_ event: Event) {
        if case .bearerOpened(let bearer)? = event.att.kind, bearer.connectionHandle == UInt32(handle ?? 0xFFFF), !discovered {
            if operation == .pair { pair() } else { discover() }
            return
        }
        switch event.att.kind {
        case .pairingPrompt(let prompt)? where prompt.connectionHandle == UInt32(handle ?? 0xFFFF):
            let (line, answer) = agent.respond(to: prompt)
            emit(PairingEvent.prompt(prompt, line: line).fields)
            if let answer { attd?.request(.with { $0.att.pairingAnswer = answer }) }
            return
        case .pairingFinished(let finished)? where finished.connectionHandle == UInt32(handle ?? 0xFFFF):
            emit(PairingEvent.finished(finished).fields)
            return
        default:
            break
        }
        guard case .gattNotification(let notification)? = event.att.kind, notification.connectionHandle == UInt32(handle ?? 0xFFFF),
              notification.handle == subscribedHandle, case .subscribe(let uuid, let count) = operation, !done else { return }
        received += 1
        emit(["event": notification.indication ? "indication" : "notification", "uuid": uuid.description, "value": Hex.encode(notification.value)])
        if received >= count { finish(nil) }
    }

    private func fail(_ message: String, error: IPCClientError? = nil, hciStatus: UInt8? = nil, disconnectReason: UInt8? = nil,
                      timedOut: Bool = false) {
        var failure = GattFailure(message, step: linkWasUp ? operation.verb : "connect")
        failure.timedOut = timedOut
        failure.hciStatus = hciStatus
        failure.disconnectReason = disconnectReason
        if case .remote(let code, _, _, let detail)? = error { failure.refused(code, detail) }
        finish(failure)
    }

    private func fail(_ missing: NotOnPeer) {
        var failure = GattFailure(missing.description, step: operation.verb)
        failure.notOnPeer = missing
        finish(failure)
    }

    private func finish(_ failure: GattFailure?) {
        guard !done else { return }
        done = true
        self.failure = failure
        deadline?.cancel()
        if let handle {
            command(HCICommands.disconnect(handle: handle))
            _ = try? loop.after(.seconds(2)) { [unowned self] in self.loop.stop() }
        } else {
            if failure != nil { command(HCICommands.leCreateConnectionCancel) { [unowned self] _ in self.loop.stop() } } else { loop.stop() }
        }
    }
}
