import ArgumentParser
import BerylCore
import BerylIPC
import Foundation

/// `beryl scan`: an ordinary app of managerd that scans and prints each discovery.
struct Scan: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Scan through managerd (as an app would) and print each discovery.")

    @OptionGroup var stack: StackOptions

    @Option(help: "Only peripherals advertising this service (repeatable).")
    var service: [String] = []

    @Flag(help: "Report every advertisement, not one discovery per peripheral.")
    var duplicates = false

    @Option(help: "Seconds to scan.")
    var timeout: Double = 5

    @Option(help: "Stop after this many discoveries.")
    var count: Int?

    @Flag(help: "One JSON object per line.")
    var json = false

    func validate() throws {
        for uuid in service where BluetoothUUID(uuid) == nil { throw ValidationError("'\(uuid)' is not a UUID") }
        guard timeout > 0, timeout <= 3600 else { throw ValidationError("--timeout must be in (0, 3600] seconds") }
        if let count, count < 1 { throw ValidationError("--count must be at least 1") }
    }

    func run() throws {
        let client: IPCClient
        do {
            client = try IPCClient(path: stack.paths.socket("managerd"))
            var hello = Request()
            // Launched from a manifest, it is that app (and gets its background rules); otherwise a foreground tool.
            hello.manager.hello.appID = ProcessInfo.processInfo.environment["BERYL_APP_ID"] ?? "beryl.scan"
            guard try client.call(hello).manager.welcome.state == .poweredOn else { throw Output.fail("the controller is not powered on") }
            var start = Request()
            start.manager.startScan = .with { $0.manager = 1; $0.serviceUuids = service; $0.allowDuplicates = duplicates }
            _ = try client.call(start)
        } catch let error as ExitCode {
            throw error
        } catch {
            throw Output.fail("cannot scan through managerd in \(stack.paths.runtimeDir): \(error)")
        }
        let deadline = ContinuousClock.now + .milliseconds(Int(timeout * 1000))
        var seen = 0
        while ContinuousClock.now < deadline, seen < (count ?? .max) {
            guard let envelope = try? client.receive(timeout: .milliseconds(100)), case .discovered(let discovery)? = envelope.event.manager.kind else { continue }
            seen += 1
            print(Self.describe(discovery.peripheral, json: json))
        }
    }

    static func object(_ peripheral: Beryl_Ipc_V1_PeripheralInfo) -> [String: Any] {
        let advertisement = peripheral.advertisement
        var object: [String: Any] = ["identifier": peripheral.identifier, "address": peripheral.address, "name": peripheral.name,
                                     "rssi": Int(peripheral.rssi), "connected": peripheral.connected,
                                     "serviceUUIDs": advertisement.serviceUuids, "connectable": advertisement.connectable]
        if !advertisement.manufacturerData.isEmpty { object["manufacturerData"] = Hex.encode(advertisement.manufacturerData) }
        if !advertisement.serviceData.isEmpty { object["serviceData"] = advertisement.serviceData.mapValues { Hex.encode($0) } }
        if advertisement.txPowerKnown { object["txPowerLevel"] = Int(advertisement.txPowerLevel) }
        if !advertisement.solicitedServiceUuids.isEmpty { object["solicitedServiceUUIDs"] = advertisement.solicitedServiceUuids }
        return object
    }

    static func describe(_ peripheral: Beryl_Ipc_V1_PeripheralInfo, json: Bool) -> String {
        let fields = object(peripheral)
        if json, let data = try? JSONSerialization.data(withJSONObject: fields, options: [.sortedKeys]) { return String(decoding: data, as: UTF8.self) }
        return "\(peripheral.identifier)  \(peripheral.address)  \(peripheral.name.isEmpty ? "-" : peripheral.name)  RSSI \(peripheral.rssi)  "
            + "services \(peripheral.advertisement.serviceUuids.joined(separator: ","))"
    }
}

/// `beryl peripherals`: what retrievePeripherals(withIdentifiers:) and retrieveConnectedPeripherals(withServices:) see.
struct Peripherals: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List the peripherals this stack knows, with the identifiers apps see.")

    @OptionGroup var stack: StackOptions

    @Flag(help: "Only connected peripherals (retrieveConnectedPeripherals).")
    var connected = false

    @Option(help: "With --connected: only those with this service (repeatable).")
    var service: [String] = []

    @Flag(help: "One JSON object per line.")
    var json = false

    func run() throws {
        var request = Request()
        if connected {
            request.manager.retrieveConnected.serviceUuids = service
        } else {
            request.manager.retrievePeripherals = .init()
        }
        do {
            let client = try IPCClient(path: stack.paths.socket("managerd"))
            for peripheral in try client.call(request).manager.peripherals.peripherals { print(Scan.describe(peripheral, json: json)) }
        } catch {
            throw Output.fail("\(error)")
        }
    }
}
