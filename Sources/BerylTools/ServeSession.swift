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
    let say: (String) -> Void
    var attd: IPCConnection?
    var hcid: IPCConnection?
    var values = ProfileValues<UInt16>()
    var timers: [EventRegistration] = []
    var counters: [UInt16: UInt8] = [:]
    public private(set) var failure: String?
    public var agent = PairingAgent()
    /// Advertise from a resolvable private address (made by attd from this device's IRK) instead of the public one.
    public var privateAddress = false

    public init(loop: EventLoop, profile: GATTProfile, paths: DaemonPaths, say: @escaping (String) -> Void) {
        self.loop = loop
        self.profile = profile
        self.paths = paths
        self.say = say
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
        say("error: \(reason)")
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
                self.say("published \(service.uuid) at handles \(published.startHandle)–\(published.endHandle)")
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
            if case .failure(let error) = result { self.say("warning: command 0x\(String(packet.opcode, radix: 16)) failed: \(error)") }
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
                self.say("advertising from private address \(address)")
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
            self.say("advertising" + (self.profile.localName.map { " as \"\($0)\"" } ?? ""))
        }
    }

    private func hcidEvent(_ event: Event) {
        switch event.linkEvent {
        case .disconnected?:
            say("central disconnected; advertising again")
            enableAdvertising()
        case .connected(_, _, let peer)?:
            say("central connected (\(peer))")
        default:
            break
        }
    }

    private func attdEvent(_ event: Event) {
        switch event.att.kind {
        case .readRequested(let read)?:
            let value = values[UInt16(read.handle)]
            say("read 0x\(String(read.handle, radix: 16)) offset \(read.offset): \(value.count) bytes")
            var request = Request()
            request.att.answerRead = .with { $0.id = read.id; $0.connectionHandle = read.connectionHandle; $0.value = Data(value) }
            attd?.request(request)
        case .writeRequested(let write)?:
            let error = UInt32(values.apply(write.writes.map { (UInt16(truncatingIfNeeded: $0.handle), Int($0.offset), Array($0.value)) }) ?? 0)
            say("write \(write.writes.map { "0x\(String($0.handle, radix: 16))[\($0.offset)] \($0.value.count) bytes" }.joined(separator: ", "))"
                + (error == 0 ? "" : " refused (0x\(String(error, radix: 16)))"))
            guard write.withResponse else { return }
            var request = Request()
            request.att.answerWrite = .with { $0.id = write.id; $0.connectionHandle = write.connectionHandle; $0.error = error }
            attd?.request(request)
        case .subscriptionChanged(let change)?:
            say("central \(change.notify || change.indicate ? "subscribed to" : "unsubscribed from") 0x\(String(change.valueHandle, radix: 16))"
                + (change.indicate ? " (indications)" : ""))
        case .pairingPrompt(let prompt)?:
            let (line, answer) = agent.respond(to: prompt)
            say(line)
            if let answer { attd?.request(.with { $0.att.pairingAnswer = answer }) }
        case .pairingFinished(let finished)?:
            say(PairingAgent.describe(finished))
        case .securityChanged(let change)?:
            say("link 0x\(String(change.connectionHandle, radix: 16)) \(change.encrypted ? "encrypted" : "not encrypted (status 0x\(String(change.status, radix: 16)))")"
                + (change.bonded ? " with a bonded peer" : ""))
        default:
            break
        }
    }
}
