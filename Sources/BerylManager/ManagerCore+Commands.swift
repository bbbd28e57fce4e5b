import BerylCore
import BerylHCI

/// An app's command of one of its managers that the core answers itself, typed (BerylManagerWire decodes it). The
/// answer is an output (`.reply`) placed where the app must see it: after the record the command changed, before
/// what the command then asks of the controller and the events it makes.
public enum AppCommand: Equatable, Sendable {
    case startScan(ManagerKey, ScanRequest)
    case stopScan(ManagerKey)
    case connect(ManagerKey, peripheral: String, PreservedState.ConnectOptions)
    case cancelConnection(ManagerKey, peripheral: String)
    case readRSSI(peripheral: String)
    case maximumWriteLength(peripheral: String, withoutResponse: Bool)
    case setConnectionLatency(central: String, ConnectionLatency)
    case registerConnectionEvents(ManagerKey, ConnectionEventInterests.Interest)
    case removeService(ManagerKey, start: UInt32)
    case removeAllServices(ManagerKey)
    case startAdvertising(ManagerKey, Advertiser)
    case stopAdvertising(ManagerKey)
    /// The app's answer to a remote central's read or write; `error` as the app sent it.
    case respond(id: UInt64, attError: UInt32, value: [UInt8])
}

/// What a command the core answered comes to for the app.
public enum CommandReply: Equatable, Sendable {
    case ack
    case maximumWriteLength(UInt32)
}

/// Why the core refused an app's command; each reads as one Core Bluetooth error on the wire.
public enum CommandRefusal: Error, Equatable, Sendable {
    /// CBError.unknownDevice: no peripheral with that identifier is known.
    case unknownPeripheral(String)
    /// The app holds no link to the peripheral.
    case notConnected(String)
    /// cancelPeripheralConnection of a peripheral the manager neither holds nor waits for.
    case neitherHeldNorAwaited(String)
    /// setDesiredConnectionLatency(_:for:) names a central this stack is not the peripheral of.
    case noLinkWithCentral(String)
    /// removeService of a service the manager did not publish.
    case notPublished(startHandle: UInt32)
    /// An answer to a request not waiting for this app's (answered already, or timed out).
    case requestNotPending(id: UInt64)
    /// An answer's error is not one ATT error code.
    case notAnATTError(UInt32)
}

/// What an app's command asks of the controller, whose answer answers the app.
public enum ControllerAsk: Equatable, Sendable {
    case readRSSI(link: UInt16)
    case connectionUpdate(link: UInt16, ConnectionParameters)

    public var name: String {
        switch self {
        case .readRSSI: "Read RSSI"
        case .connectionUpdate: "LE Connection Update"
        }
    }

    public var packet: HCICommandPacket {
        switch self {
        case .readRSSI(let link):
            HCICommands.readRSSI(handle: link)
        case .connectionUpdate(let link, let parameters):
            HCICommands.leConnectionUpdate(handle: link, intervalMin: parameters.intervalMin, intervalMax: parameters.intervalMax,
                                           latency: parameters.latency, supervisionTimeout: parameters.timeout)
        }
    }
}

extension ManagerCore {
    /// `reply`: the app's request, to be answered by a `.reply` or `.askController` output for it. `directory`: the
    /// identifiers this stack gave devices (a scan hears what was heard already; a connect needs the address).
    public mutating func command(_ command: AppCommand, from session: UInt64, reply: UInt64, directory: some DeviceDirectory) -> [Output] {
        func ack(after outputs: [Output]) -> [Output] { outputs + [.reply(reply, .success(.ack))] }
        func refuse(_ refusal: CommandRefusal) -> [Output] { [.reply(reply, .failure(refusal))] }
        switch command {
        case .startScan(let key, let request):
            return ack(after: startScan(request, for: key)) + alreadyHeard(by: key, directory: directory).map(Output.discovered)
        case .stopScan(let key):
            return ack(after: stopScan(for: key))
        case .connect(let key, let identifier, let options):
            guard let address = directory.address(of: identifier) else { return refuse(.unknownPeripheral(identifier)) }
            return recordsFirst(connect(key, to: identifier, at: address, options: options), reply: reply)
        case .cancelConnection(let key, let identifier):
            guard let outputs = try? cancelConnection(key, to: identifier) else { return refuse(.neitherHeldNorAwaited(identifier)) }
            return recordsFirst(outputs, reply: reply)
        case .readRSSI(let identifier):
            guard let link = link(to: identifier, heldBy: .session(session)) else { return refuse(.notConnected(identifier)) }
            return [.askController(reply, .readRSSI(link: link.handle))]
        case .maximumWriteLength(let identifier, let withoutResponse):
            guard let link = link(to: identifier, heldBy: .session(session)) else { return refuse(.notConnected(identifier)) }
            return [.reply(reply, .success(.maximumWriteLength(maximumWriteLength(on: link.handle, withoutResponse: withoutResponse))))]
        case .setConnectionLatency(let central, let latency):
            // As peripheral the stack asks the central through the Link Layer (Core Vol 4 Part E §7.8.18); the
            // central may still refuse, as on iOS.
            guard let link = link(toCentral: central) else { return refuse(.noLinkWithCentral(central)) }
            return [.askController(reply, .connectionUpdate(link: link.handle, latency.parameters))]
        case .registerConnectionEvents(let key, let interest):
            connectionInterests.register(key, interest)
            return ack(after: [])
        case .removeService(let owner, let startHandle):
            guard let start = UInt16(exactly: startHandle), let outputs = try? removeService(start: start, owner: owner) else {
                return refuse(.notPublished(startHandle: startHandle))
            }
            return ack(after: outputs)
        case .removeAllServices(let owner):
            return ack(after: removeAllServices(of: owner))
        case .startAdvertising(let key, let advertiser):
            return ack(after: startAdvertising(advertiser, for: key)) + [.advertisingAsked(key)]
        case .stopAdvertising(let key):
            return ack(after: stopAdvertising(for: key))
        case .respond(let id, let attError, let value):
            do {
                let request = try router.answer(id, from: .session(session), attError: attError)
                return ack(after: [.answerRemote(id: id, isRead: request == .read, value: value, attError: UInt8(attError))])
            } catch .notPending {
                return refuse(.requestNotPending(id: id))
            } catch {
                return refuse(.notAnATTError(attError))
            }
        }
    }

    /// A command's record is written before it is acknowledged; what it asks of the controller, and the events it
    /// makes (a link already up is connected at once), follow the acknowledgement.
    private func recordsFirst(_ outputs: [Output], reply: UInt64) -> [Output] {
        outputs.filter(\.isRecord) + [.reply(reply, .success(.ack))] + outputs.filter { !$0.isRecord }
    }
}
