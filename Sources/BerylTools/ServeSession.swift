import BerylCore
import BerylDaemonKit
import BerylEventLoop
import BerylHCI
import BerylIPC
import Foundation

/// `beryl serve`: publishes a profile's services through attd, answers reads and writes of its dynamic
/// values as an app would (keeping the last value written), sends its periodic notifications, and
/// advertises through hcid, re-advertising after each disconnection.
public final class ServeSession {
    let loop: EventLoop
    let profile: GATTProfile
    let paths: DaemonPaths
    let report: (ServeReport) -> Void
    var attd: IPCConnection?
    var hcid: IPCConnection?
    var values = ProfileValues<UInt16>()
    var timers: [EventRegistration] = []
    var counters: [UInt16: UInt8] = [:]
    public private(set) var failure: String?
    public var agent = PairingAgent()
    /// Advertise from a resolvable private address (made by attd from this device's IRK) instead of the public one.
    public var privateAddress = false
    /// The private address advertising uses, once attd made it.
    var advertisedPrivateAddress: BDAddress?

    public init(loop: EventLoop, profile: GATTProfile, paths: DaemonPaths, report: @escaping (ServeReport) -> Void) {
        self.loop = loop
        self.profile = profile
        self.paths = paths
        self.report = report
    }

    public func start() throws {
        let attd = try IPCConnection(loop: loop, path: paths.socket("attd"))
        let hcid = try IPCConnection(loop: loop, path: paths.socket("hcid"))
        self.attd = attd
        self.hcid = hcid
        attd.onEvent = { [unowned self] in self.attdEvent($0) }
        hcid.onEvent = { [unowned self] in self.hcidEvent($0) }
        for connection in [attd, hcid] {
            connection.onClose = { [unowned self] reason in self.fail("lost \(connection.path): \(reason)") }
        }
        var subscribe = Request()
        subscribe.hci.subscribe.events = true
        hcid.request(subscribe)
        publish(0)
    }

    private func fail(_ reason: String) {
        failure = reason
        report(.failure(reason))
        loop.stop()
    }

    private func publish(_ index: Int) {
        guard index < profile.services.count else {
            advertise()
            return
        }
        let service = profile.services[index]
        var request = Request()
        request.att.publishService.service = .with { spec in
            spec.uuid = service.uuid.fullString
            spec.primary = service.primary
            spec.characteristics = service.characteristics.map { characteristic in
                .with {
                    $0.uuid = characteristic.uuid.fullString
                    $0.properties = UInt32(characteristic.properties)
                    $0.permissions = UInt32(characteristic.permissions)
                    $0.cached = characteristic.value != nil
                    $0.value = Data(characteristic.value ?? [])
                    $0.descriptors = characteristic.descriptors.map { descriptor in .with { $0.uuid = descriptor.uuid.fullString; $0.value = Data(descriptor.value) } }
                }
            }
        }
        attd?.request(request) { [unowned self] result in
            switch result {
            case .failure(let error):
                self.fail("publishing \(service.uuid): \(error)")
            case .success(let response):
                let published = response.att.servicePublished
                self.report(.published(service: "\(service.uuid)", handles: published.startHandle...max(published.startHandle, published.endHandle),
                                       characteristics: service.characteristics.count))
                for (characteristic, handle) in zip(service.characteristics, published.valueHandles) {
                    self.schedule(characteristic, at: UInt16(handle))
                }
                self.publish(index + 1)
            }
        }
    }

    private func schedule(_ characteristic: GATTProfile.Characteristic, at handle: UInt16) {
        for (periodic, indicate) in [(characteristic.notify, false), (characteristic.indicate, true)] {
            guard let periodic else { continue }
            if let timer = try? loop.every(periodic.every, { [unowned self] in self.tick(handle, periodic.value, indicate: indicate) }) {
                timers.append(timer)
            }
        }
    }

    private func tick(_ handle: UInt16, _ value: GATTProfile.PeriodicValue, indicate: Bool) {
        let bytes: [UInt8]
        switch value {
        case .fixed(let fixed): bytes = fixed
        case .counter8:
            let next = counters[handle, default: 0] &+ 1
            counters[handle] = next
            bytes = [next]
        }
        var request = Request()
        request.att.notify = .with { $0.valueHandle = UInt32(handle); $0.value = Data(bytes); $0.indicate = indicate }
        attd?.request(request)
    }

    private func command(_ packet: HCICommandPacket, then: @escaping () -> Void = {}) {
        hcid?.request(.hci(packet)) { [unowned self] result in
            if case .failure(let error) = result { self.report(.warning("command 0x\(String(packet.opcode, radix: 16)) failed: \(error)")) }
            then()
        }
    }

    private func advertise() {
        // Advertising left on by an earlier publisher would refuse new parameters and a new random address.
        command(HCICommands.leSetAdvertisingEnable(false))
        guard privateAddress else { return advertise(from: nil) }
        var request = Request()
        request.att.getPrivateAddress = .init()
        attd?.request(request) { [unowned self] result in
            switch result {
            case .success(let response):
                guard let address = BDAddress(response.att.privateAddress.address) else { return self.fail("attd gave no private address") }
                self.command(HCICommands.leSetRandomAddress(address))
                self.advertisedPrivateAddress = address
                self.advertise(from: address)
            case .failure(let error):
                // attd learns the controller's identity when it attaches to hcid; ask again shortly.
                if case .remote(.notReady, _, _, _) = error {
                    _ = try? self.loop.after(.milliseconds(200)) { [unowned self] in self.advertise() }
                } else {
                    self.fail("no private address: \(error)")
                }
            }
        }
    }

    private func advertise(from privateAddress: BDAddress?) {
        let (advertising, scanResponse) = profile.advertisingPayloads
        command(HCICommands.leSetAdvertisingParameters(interval: 0x00A0, ownAddressRandom: privateAddress != nil))  // ADV_IND every 100 ms
        command(HCICommands.leSetAdvertisingData(advertising))
        command(HCICommands.leSetAdvertisingData(scanResponse, scanResponse: true))
        enableAdvertising()
    }

    private func enableAdvertising() {
        command(HCICommands.leSetAdvertisingEnable(true)) { [unowned self] in
            self.report(.advertising(name: self.profile.localName, privateAddress: self.advertisedPrivateAddress.map { "\($0)" }))
        }
    }

    private func hcidEvent(_ event: Event) {
        switch event.linkEvent {
        case .disconnected?:
            report(.centralDisconnected)
            enableAdvertising()
        case .connected(_, _, let peer)?:
            report(.centralConnected(peer: "\(peer)"))
        default:
            break
        }
    }

    private func attdEvent(_ event: Event) {
        switch event.att.kind {
        case .readRequested(let read)?:
            let value = values[UInt16(read.handle)]
            report(.readRequested(.init(attribute: Self.attribute(read.handle), offset: Int(read.offset), bytes: value.count)))
            var request = Request()
            request.att.answerRead = .with { $0.id = read.id; $0.connectionHandle = read.connectionHandle; $0.value = Data(value) }
            attd?.request(request)
        case .writeRequested(let write)?:
            let error = UInt32(values.apply(write.writes.map { (UInt16(truncatingIfNeeded: $0.handle), Int($0.offset), Array($0.value)) }) ?? 0)
            report(.writeRequested(write.writes.map { .init(attribute: Self.attribute($0.handle), offset: Int($0.offset), bytes: $0.value.count) },
                                   refusal: error == 0 ? nil : UInt8(truncatingIfNeeded: error)))
            guard write.withResponse else { return }
            var request = Request()
            request.att.answerWrite = .with { $0.id = write.id; $0.connectionHandle = write.connectionHandle; $0.error = error }
            attd?.request(request)
        case .subscriptionChanged(let change)?:
            report(.subscription(attribute: Self.attribute(change.valueHandle), central: nil, subscribed: change.notify || change.indicate,
                                 indications: change.indicate))
        case .pairingPrompt(let prompt)?:
            let (line, answer) = agent.respond(to: prompt)
            report(.pairing(.prompt(prompt, line: line)))
            if let answer { attd?.request(.with { $0.att.pairingAnswer = answer }) }
        case .pairingFinished(let finished)?:
            report(.pairing(.finished(finished)))
        case .securityChanged(let change)?:
            report(.securityChanged(link: change.connectionHandle, encrypted: change.encrypted, status: change.status, bonded: change.bonded))
        default:
            break
        }
    }

    /// `--direct` publishes bare handles: an attribute is named by its handle.
    private static func attribute(_ handle: UInt32) -> String { "0x\(String(handle, radix: 16))" }
}
