import ArgumentParser
import BerylCore

struct BerylCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "beryl",
        abstract: "Run and drive a Beryl Bluetooth LE stack.",
        version: Beryl.version,
        subcommands: [Up.self, Down.self, Status.self, PingCommand.self, Serve.self, Advertise.self, Connect.self, Gatt.self, Pair.self, Bonds.self, Scan.self, Peripherals.self, AppCommand.self, Alerts.self, HCI.self, Sim.self, Bench.self, Supervise.self])
}

BerylCommand.main()
