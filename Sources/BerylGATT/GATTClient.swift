import BerylATT
import BerylCore

/// One link's GATT client, sans-IO (BlueZ's `src/shared/gatt-client.c` is the model): the operations apps ask for run
/// as procedures over the link's ATT bearer; the MTU exchange, the peer's Service Changed (found, subscribed to, and
/// each indication re-discovered, one at a time) and the retry after securing the link run beside them. The shell
/// submits nothing itself: it feeds the bearer's outputs in, and carries out `Output`s.
public final class GATTClient {
    public typealias OperationID = UInt64

    /// What an app asks of a peer's database.
    public enum Operation: Equatable, Sendable {
        case discover(DiscoveryScope, Depth)
        /// A read, long when the value does not fit (Core Vol 3 Part G §4.8.1, §4.8.3).
        case read(handle: UInt16)
        case readMultiple([UInt16])
        case readByType(BluetoothUUID, in: ClosedRange<UInt16>)
        /// A write with response, long (prepared, then executed) when the value does not fit (§4.9.3, §4.9.4).
        case write(handle: UInt16, value: [UInt8])
        /// The Client Characteristic Configuration written (§4.12.3): 0x0001 notify, 0x0002 indicate, 0 off.
        case configure(cccd: UInt16, notify: Bool, indicate: Bool)
        /// Reliable Writes (§4.9.5): every value prepared and echoed, then all executed or none.
        case reliableWrite([HandleValue])
    }

    /// How deep a discovery goes, as Core Bluetooth's discover calls ask.
    public enum Depth: Equatable, Sendable {
        /// Services, their included services, characteristics and descriptors.
        case whole
        case services
        case included
        case characteristics
        case descriptors
    }

    public enum Outcome: Equatable, Sendable {
        case services([DiscoveredServiceTree])
        case included([DiscoveredInclude], in: ClosedRange<UInt16>)
        case characteristics([DiscoveredCharacteristic], in: ClosedRange<UInt16>)
        case descriptors([DiscoveredDescriptor])
        case value([UInt8])
        case values([HandleValue])
        case written
    }

    public enum Failure: Error, Equatable, Sendable {
        /// The server's Error Response (or Invalid PDU for an answer that breaks the procedure).
        case att(ATTError)
        /// No answer in 30 s: the bearer takes no further request (Core Vol 3 Part F §3.3.3).
        case bearerTimedOut
        case linkClosed
        /// A prepared part came back different; the server's queue was cancelled and nothing was written (§4.9.5).
        case reliableWriteCancelled
    }

    /// Whether securing this link could cure an authentication or encryption error.
    public struct Security: Equatable, Sendable {
        public var level: LinkSecurity
        /// Pairing or the stored key can run now (not failed for good, not already under way elsewhere).
        public var canSecure: Bool
        public init(level: LinkSecurity, canSecure: Bool) {
            self.level = level
            self.canSecure = canSecure
        }
    }

    public enum Output: Equatable, Sendable {
        /// An ATT PDU for the link (the shell frames it for L2CAP's ATT channel).
        case send([UInt8])
        case finished(OperationID, Result<Outcome, Failure>)
        /// Secure the link (stored key, else pairing) and answer with `secured(_:at:)`.
        case secure
        /// The exchange this client began ended; the bearer's ATT_MTU is `mtu` either way.
        case mtuExchanged(mtu: UInt16, refused: ATTError?)
        case notification(handle: UInt16, value: [UInt8], indication: Bool)
        /// The peer said these handles changed; here is what they hold now.
        case serviceChanged(ClosedRange<UInt16>, Result<[DiscoveredServiceTree], Failure>)
        /// A discovery found the peer's Service Changed: for a bonded peer, kept for its next links.
        case serviceChangedFound(valueHandle: UInt16)
        /// The bearer timed out: only a new link brings ATT back, so end this one.
        case disconnect
        case log(LogLevel, String)
    }

    /// Who waits for a procedure's end.
    private enum Purpose {
        case app(OperationID)
        case mtuExchange
        case serviceChangedSubscription
        case serviceChangedLookup
        case rediscovery(ClosedRange<UInt16>)
    }

    /// A procedure's step, ending in what the app hears (a reliable write can end cancelled without an ATT error).
    private typealias Step = GATTStep<Result<Outcome, Failure>>

    private struct Running {
        let purpose: Purpose
        /// The request last sent: sent again once the link is secured.
        var request: ATTPDU?
        var retried = false
        /// The error that parked this procedure until the link is secured.
        var parkedOn: ATTError?
        let advance: (ATTPDU) -> Step
    }

    private let bearer: ATTClient
    public private(set) var role = GATTClientRole()
    /// Procedures by the ATT request now carrying them.
    private var waiting: [UInt64: Running] = [:]
    /// Procedures parked on an authentication or encryption error until the link is secured.
    private var awaitingSecurity: [Running] = []
    private var askedToDisconnect = false
    private var pending: [Output] = []
    private var now: Duration = .zero

    public init(bearer: ATTClient) {
        self.bearer = bearer
    }

    public var mtu: UInt16 { bearer.mtu }

    /// See `GATTClientRole.remember(serviceChangedValueHandle:)`.
    public func rememberServiceChanged(_ valueHandle: UInt16) { role.remember(serviceChangedValueHandle: valueHandle) }
    public var isUsable: Bool { bearer.isUsable }
    /// Procedures under way, parked ones included.
    public var operationsUnderWay: Int { waiting.count + awaitingSecurity.count }

    // MARK: Inputs

    public func start(_ operation: Operation, id: OperationID, at time: Duration) -> [Output] {
        now = max(now, time)
        let (first, advance) = procedure(for: operation)
        run(first, Running(purpose: .app(id), advance: advance))
        return drain()
    }

    /// The central asks for the largest ATT_MTU straight away (Core Vol 3 Part G §4.3.1), as iOS does.
    public func exchangeMTU(offering mtu: UInt16, at time: Duration) -> [Output] {
        now = max(now, time)
        run(.request(.exchangeMTURequest(mtu: mtu)), Running(purpose: .mtuExchange) { response in
            switch response {
            // The bearer took the agreed ATT_MTU as the response passed it.
            case .exchangeMTUResponse: .done(.success(.written))
            case .errorResponse(_, _, let error): .failed(error)
            default: .failed(.invalidPDU)
            }
        })
        return drain()
    }

    /// What the link's ATT bearer said (its client half); `security` is the link's now, nil when it has none to give.
    public func receive(_ outputs: [ATTClientOutput], security: Security?, at time: Duration) -> [Output] {
        now = max(now, time)
        for output in outputs { handle(output, security: security) }
        return drain()
    }

    public func tick(security: Security?, at time: Duration) -> [Output] {
        receive(bearer.tick(at: time), security: security, at: time)
    }

    /// The answer to `.secure`: parked procedures send their request again once, or fail with the error that parked them.
    public func secured(_ succeeded: Bool, at time: Duration) -> [Output] {
        now = max(now, time)
        let parked = awaitingSecurity
        awaitingSecurity.removeAll()
        for var running in parked {
            if succeeded, let request = running.request {
                running.retried = true
                run(.request(request), running)
            } else {
                end(running, .failure(.att(running.parkedOn ?? .unlikelyError)))
            }
        }
        return drain()
    }

    /// Every procedure fails; apps hear that the link went, not a stand-in ATT error.
    public func linkClosed() -> [Output] {
        let all = waiting.sorted { $0.key < $1.key }.map(\.value) + awaitingSecurity
        waiting.removeAll()
        awaitingSecurity.removeAll()
        for running in all { end(running, .failure(.linkClosed)) }
        return drain()
    }

    // MARK: Running procedures

    private func handle(_ output: ATTClientOutput, security: Security?) {
        switch output {
        case .send(let bytes):
            pending.append(.send(bytes))
        case .response(let id, let response):
            guard var running = waiting.removeValue(forKey: id) else { return }
            if case .errorResponse(_, _, let error) = response, !running.retried, let security, Self.securityWouldCure(error, security) {
                // As iOS does: secure the link (stored key, else pairing), then send the same request again once (Core Vol 3 Part C §10.3.2).
                pending.append(.log(.info, "\(error) from the server; securing the link and retrying"))
                running.parkedOn = error
                if awaitingSecurity.isEmpty { pending.append(.secure) }
                awaitingSecurity.append(running)
                return
            }
            run(running.advance(response), running)
        case .timedOut(let id):
            guard let running = waiting.removeValue(forKey: id) else { return }
            end(running, .failure(.bearerTimedOut))
            if !askedToDisconnect {
                askedToDisconnect = true
                pending.append(.log(.warning, "ATT transaction timed out; the bearer is unusable, disconnecting"))
                pending.append(.disconnect)
            }
        case .indication(let handle, let value):
            switch role.indicated(handle: handle, value: value) {
            case .rediscover(let range): rediscover(range)
            case .merged: break
            case .deliver: pending.append(.notification(handle: handle, value: value, indication: true))
            }
        case .notification(let handle, let value):
            pending.append(.notification(handle: handle, value: value, indication: false))
        case .log(let message):
            // The bearer's own notes (dropped PDUs and the like) are for debugging, as they were.
            pending.append(.log(.debug, message))
        }
    }

    private func run(_ step: Step, _ running: Running) {
        switch step {
        case .done(let result):
            end(running, result)
        case .failed(let error):
            end(running, .failure(.att(error)))
        case .request(let pdu):
            var running = running
            running.request = pdu
            let (id, outputs) = bearer.submit(pdu, at: now)
            waiting[id] = running
            for output in outputs { handle(output, security: nil) }
        }
    }

    private func end(_ running: Running, _ result: Result<Outcome, Failure>) {
        switch running.purpose {
        case .app(let id):
            pending.append(.finished(id, result))
        case .mtuExchange:
            guard result != .failure(.linkClosed) else { return }
            if result == .failure(.bearerTimedOut) { pending.append(.log(.info, "MTU exchange got no answer; ATT_MTU stays \(bearer.mtu)")) }
            if case .failure(.att(let error)) = result { pending.append(.mtuExchanged(mtu: bearer.mtu, refused: error)) }
            else { pending.append(.mtuExchanged(mtu: bearer.mtu, refused: nil)) }
        case .serviceChangedSubscription:
            switch result {
            case .failure(.att(let error)): pending.append(.log(.info, "Service Changed indications refused (\(error))"))
            case .failure(let failure): pending.append(.log(.info, "Service Changed indications not subscribed to (\(failure))"))
            case .success: break
            }
        case .serviceChangedLookup:
            break
        case .rediscovery(let range):
            pending.append(.serviceChanged(range, result.map { if case .services(let trees) = $0 { trees } else { [] } }))
            guard result != .failure(.linkClosed), let next = role.rediscoveryFinished() else { return }
            rediscover(next)
        }
    }

    private func rediscover(_ range: ClosedRange<UInt16>) {
        pending.append(.log(.info, "peer's services changed in \(range); re-discovering"))
        let (first, advance) = procedure(for: .discover(DiscoveryScope(range: range), .whole))
        run(first, Running(purpose: .rediscovery(range), advance: advance))
    }

    private func drain() -> [Output] {
        defer { pending.removeAll() }
        return pending
    }

    /// An ATT error that encryption (or pairing) on this link would cure (Core Vol 3 Part C §10.3.2).
    static func securityWouldCure(_ error: ATTError, _ security: Security) -> Bool {
        guard security.canSecure else { return false }
        switch error {
        case .insufficientEncryption, .insufficientEncryptionKeySize: return !security.level.encrypted
        case .insufficientAuthentication: return !security.level.encrypted || !security.level.authenticated
        default: return false
        }
    }

    // MARK: Procedures

    private func procedure(for operation: Operation) -> (Step, (ATTPDU) -> Step) {
        switch operation {
        case .discover(let scope, .whole):
            // The peer's Service Changed is learned on the way and subscribed to, as iOS does (Core Vol 3 Part G §7.1).
            var discovery = DatabaseDiscovery(scope: scope, looksForServiceChanged: role.discoveryLooksForServiceChanged)
            return Self.erased(discovery.start(), Outcome.services) { [unowned self] response in
                let step = discovery.handle(response)
                let known = role.serviceChangedValueHandle
                let cccd = role.learn(from: discovery)
                if known == nil, let found = role.serviceChangedValueHandle { pending.append(.serviceChangedFound(valueHandle: found)) }
                if let cccd { subscribeToServiceChanged(cccd: cccd) }
                return step
            }
        case .discover(let scope, .services):
            // Like iOS, a client that has not found the peer's Service Changed yet looks for it after, out of the app's sight (§7.1).
            var discovery = DatabaseDiscovery(scope: scope, looksForServiceChanged: false, servicesOnly: true)
            return Self.erased(discovery.start(), Outcome.services) { [unowned self] response in
                let step = discovery.handle(response)
                if case .done = step, role.shouldLookForServiceChanged() { lookForServiceChanged() }
                return step
            }
        case .discover(let scope, .included):
            var includes = FindIncludedServices(in: scope.range)
            return Self.erased(includes.start(), { .included($0, in: scope.range) }) { includes.handle($0) }
        case .discover(let scope, .characteristics):
            // Discover All Characteristics of a Service (§4.6.1), filtered afterwards as Core Bluetooth filters.
            var characteristics = DiscoverCharacteristics(in: scope.range)
            let keep: (DiscoveredCharacteristic) -> Bool = { scope.characteristics?.contains($0.uuid) ?? true }
            return Self.erased(characteristics.start(), { .characteristics($0.filter(keep), in: scope.range) }) { characteristics.handle($0) }
        case .discover(let scope, .descriptors):
            var descriptors = DiscoverDescriptors(in: scope.range)
            return Self.erased(descriptors.start(), { .descriptors(DiscoverDescriptors.ofOneCharacteristic($0)) }) { descriptors.handle($0) }
        case .read(let handle):
            var read = ReadLongValue(handle: handle, mtu: bearer.mtu)
            return Self.erased(read.start(), Outcome.value) { read.handle($0) }
        case .readMultiple(let handles):
            let read = ReadMultipleValues(handles: handles)
            return Self.erased(read.start(), Outcome.value) { read.handle($0) }
        case .readByType(let uuid, let range):
            var read = ReadByCharacteristicUUID(uuid: uuid, in: range)
            return Self.erased(read.start(), Outcome.values) { read.handle($0) }
        case .write(let handle, let value) where value.count <= Int(bearer.mtu) - 3:
            return Self.writeRequest(handle: handle, value: value)
        case .write(let handle, let value):
            var write = WriteLongValue(handle: handle, value: value, mtu: bearer.mtu)
            return Self.erased(write.start(), { _ in .written }) { write.handle($0) }
        case .configure(let cccd, let notify, let indicate):
            return Self.writeRequest(handle: cccd, value: [indicate ? 0x02 : notify ? 0x01 : 0x00, 0x00])
        case .reliableWrite(let parts):
            var write = WriteLongValue(writes: parts.map { (handle: $0.handle, value: $0.value) }, mtu: bearer.mtu)
            // An echo that came back different ends the procedure with the server's queue cancelled.
            let echoed: (GATTStep<Bool>) -> Step = { step in step.map { $0 ? .success(.written) : .failure(.reliableWriteCancelled) } }
            return (echoed(write.start()), { echoed(write.handle($0)) })
        }
    }

    private static func writeRequest(handle: UInt16, value: [UInt8]) -> (Step, (ATTPDU) -> Step) {
        (.request(.writeRequest(handle: handle, value: value)), { response in
            if case .errorResponse(_, _, let error) = response { return .failed(error) }
            guard case .writeResponse = response else { return .failed(.invalidPDU) }
            return .done(.success(.written))
        })
    }

    private static func erased<R>(_ first: GATTStep<R>, _ outcome: @escaping (R) -> Outcome,
                                  _ advance: @escaping (ATTPDU) -> GATTStep<R>) -> (Step, (ATTPDU) -> Step) {
        (first.map { .success(outcome($0)) }, { advance($0).map { .success(outcome($0)) } })
    }

    private func subscribeToServiceChanged(cccd: UInt16) {
        let (first, advance) = Self.writeRequest(handle: cccd, value: [0x02, 0x00])
        run(first, Running(purpose: .serviceChangedSubscription, advance: advance))
    }

    private func lookForServiceChanged() {
        let (first, advance) = procedure(for: .discover(GATTClientRole.serviceChangedScope, .whole))
        run(first, Running(purpose: .serviceChangedLookup, advance: advance))
    }
}

extension GATTStep {
    public func map<T>(_ transform: (Result) -> T) -> GATTStep<T> {
        switch self {
        case .request(let pdu): .request(pdu)
        case .done(let result): .done(transform(result))
        case .failed(let error): .failed(error)
        }
    }
}
