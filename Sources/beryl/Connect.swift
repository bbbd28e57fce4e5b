import ArgumentParser
import Beryl
import BerylCore
import BerylSupervisor
import Dispatch
import Foundation
import Synchronization

/// `beryl connect`: an app of managerd that connects to a peripheral, reports the link (RSSI, the longest writes),
/// holds it for a while or until stopped, then cancels as an app would.
struct Connect: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Connect to a peripheral through managerd, report the link, hold it, then cancel.",
        discussion: "A connection request never times out in managerd; --timeout bounds this command's wait for it.")

    @OptionGroup var stack: StackOptions

    @Option(help: "The peer: its identifier (as `beryl scan` prints), or AA:BB:CC:DD:EE:FF[/random].")
    var peer: String

    @Option(help: "Seconds to wait for the connection.")
    var timeout: Double = 15

    @Option(help: "Seconds to hold the link once connected (default: until SIGINT/SIGTERM).")
    var hold: Double?

    @Option(help: "Alert when this happens while the app is suspended: connection, disconnection or notification (repeatable).")
    var notifyOn: [ConnectAlert] = []

    @Flag(help: "One JSON object per line.")
    var json = false

    enum ConnectAlert: String, ExpressibleByArgument, CaseIterable { case connection, disconnection, notification }

    func validate() throws {
        try AppSupport.validatePeer(peer)
        guard timeout > 0, timeout <= 3600 else { throw ValidationError("--timeout must be in (0, 3600] seconds") }
        if let hold, !(0...86_400).contains(hold) { throw ValidationError("--hold must be in [0, 86400] seconds") }
    }

    func run() throws {
        let printer = EventPrinter(json: json)
        let (stack, peer, timeout, hold) = (stack, peer, timeout, hold)
        let options = ConnectOptions(notifyOnConnection: notifyOn.contains(.connection), notifyOnDisconnection: notifyOn.contains(.disconnection),
                                     notifyOnNotification: notifyOn.contains(.notification))
        let connected = Mutex(false)
        DispatchQueue.global().asyncAfter(deadline: .now() + timeout) {
            guard !connected.withLock({ $0 }) else { return }
            Console.error("beryl: no connection to \(peer) within \(timeout) s\n")
            Foundation.exit(1)
        }
        try AppSupport.blocking {
            let watcher = LinkWatcher()
            let central = CentralManager(delegate: watcher, queue: DispatchQueue(label: "beryl.connect"), appID: LaunchOptions.current.appID ?? "beryl.connect",
                                             socketPath: stack.paths.socket("managerd"))
            try await AppSupport.poweredOn({ central.state }, reason: { central.stateReason }, runtimeDir: stack.paths.runtimeDir)
            let peripheral = try AppSupport.peripheral(peer, on: central)
            let started = ContinuousClock.now
            try await central.connected(to: peripheral, options: options)
            connected.withLock { $0 = true }
            let rssi = await withCheckedContinuation { continuation in
                watcher.rssiWaiter.withLock { $0 = continuation }
                peripheral.delegate = watcher
                peripheral.readRSSI()
            }
            printer.emit(["event": "connected", "identifier": peripheral.identifier.uuidString, "name": peripheral.name ?? "",
                          "milliseconds": Int((ContinuousClock.now - started) / .milliseconds(1)), "rssi": rssi,
                          "maximumWrite": peripheral.maximumWriteValueLength(for: .withResponse),
                          "maximumWriteWithoutResponse": peripheral.maximumWriteValueLength(for: .withoutResponse)])
            await AppSupport.waitForStop(seconds: hold) { stop in watcher.onDisconnection(stop) }
            if peripheral.state == .disconnected {
                // Core Bluetooth's code says how: connectionTimeout for a link that went silent, peripheralDisconnected
                // for one the peer ended.
                let code = (watcher.disconnectionError as? BluetoothError)?.code
                printer.emit(["event": "disconnected", "identifier": peripheral.identifier.uuidString, "by": "peer",
                              "error": code.map { "\($0)" } ?? "", "code": code?.rawValue ?? -1])
                throw ExitCode(2)
            }
            central.cancelPeripheralConnection(peripheral)
            printer.emit(["event": "disconnected", "identifier": peripheral.identifier.uuidString, "by": "us"])
            try? await Task.sleep(for: .milliseconds(100))
            withExtendedLifetime(central) {}
        }
    }
}

/// The callbacks `beryl connect` waits on.
final class LinkWatcher: CentralManagerDelegate, PeripheralDelegate, Sendable {
    let rssiWaiter = Mutex<CheckedContinuation<Int, Never>?>(nil)
    private let lost = Mutex<(happened: Bool, error: BluetoothError?, then: (@Sendable () -> Void)?)>((false, nil, nil))

    func centralManagerDidUpdateState(_ central: CentralManager) {}

    func peripheral(_ peripheral: Peripheral, didReadRSSI RSSI: NSNumber, error: Error?) {
        rssiWaiter.withLock { waiter in
            waiter?.resume(returning: RSSI.intValue)
            waiter = nil
        }
    }

    func centralManager(_ central: CentralManager, didDisconnectPeripheral peripheral: Peripheral, error: Error?) {
        lost.withLock { state in
            state.happened = true
            state.error = error as? BluetoothError
            return state.then
        }?()
    }

    var disconnectionError: Error? { lost.withLock { $0.error } }

    /// Calls `body` once the link is lost (at once if it already was).
    func onDisconnection(_ body: @escaping @Sendable () -> Void) {
        let already = lost.withLock { state in
            state.then = body
            return state.happened
        }
        if already { body() }
    }
}

/// `beryl advertise`: an app of managerd that advertises a name and service UUIDs (under Core Bluetooth's rules for
/// what fits in the packet), until stopped.
struct Advertise: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Advertise a local name and service UUIDs through managerd, until stopped.")

    @OptionGroup var stack: StackOptions

    @Option(help: "The local name.")
    var name: String?

    @Option(help: "A service UUID to advertise (repeatable).")
    var service: [String] = []

    @Option(help: "Seconds to advertise (default: until SIGINT/SIGTERM).")
    var duration: Double?

    @Flag(help: "One JSON object per line.")
    var json = false

    func validate() throws {
        for uuid in service where BluetoothUUID(uuid) == nil { throw ValidationError("'\(uuid)' is not a UUID") }
        if let name, name.utf8.count > 248 { throw ValidationError("--name is at most 248 bytes (the Device Name's limit)") }
        if let duration, !(0...86_400).contains(duration) { throw ValidationError("--duration must be in [0, 86400] seconds") }
    }

    func run() throws {
        let (stack, name, duration, json) = (stack, name, duration, json)
        let uuids = service.compactMap(BluetoothUUID.init)
        try AppSupport.blocking {
            let watcher = AdvertisingWatcher()
            let manager = PeripheralManager(delegate: watcher, queue: DispatchQueue(label: "beryl.advertise"), appID: "beryl.advertise",
                                                socketPath: stack.paths.socket("managerd"))
            try await AppSupport.poweredOn({ manager.state }, reason: { manager.stateReason }, runtimeDir: stack.paths.runtimeDir)
            let error = await withCheckedContinuation { continuation in
                watcher.started.withLock { $0 = continuation }
                manager.startAdvertising(AdvertisingOptions(localName: name, serviceUUIDs: uuids))
            }
            if let error { throw Output.fail("advertising refused: \(error)") }
            let printer = EventPrinter(json: json)
            if json {
                printer.emit(["event": "advertising", "name": name ?? "", "services": uuids.map(\.description)])
            } else {
                printer.say("advertising" + (name.map { " as \"\($0)\"" } ?? "")
                            + (uuids.isEmpty ? "" : " with \(uuids.map(\.description).joined(separator: ","))"))
            }
            await AppSupport.waitForStop(seconds: duration)
            manager.stopAdvertising()
            try? await Task.sleep(for: .milliseconds(100))
            withExtendedLifetime(manager) {}
        }
    }
}

final class AdvertisingWatcher: PeripheralManagerDelegate, Sendable {
    let started = Mutex<CheckedContinuation<String?, Never>?>(nil)
    func peripheralManagerDidUpdateState(_ peripheral: PeripheralManager) {}
    func peripheralManagerDidStartAdvertising(_ peripheral: PeripheralManager, error: Error?) {
        let refusal = error.map { "\($0)" }
        started.withLock { waiter in
            waiter?.resume(returning: refusal)
            waiter = nil
        }
    }
}
