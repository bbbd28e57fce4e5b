import ArgumentParser
import BerylCore
import CBerylSys

struct BerylCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "beryl",
        abstract: "Run and drive a Beryl Bluetooth LE stack.",
        version: Beryl.version,
        subcommands: [Up.self, Down.self, Status.self, PingCommand.self, Serve.self, Advertise.self, Connect.self, Gatt.self, Pair.self, Bonds.self, Scan.self, Peripherals.self, AppCommand.self, Alerts.self, HCI.self, Sim.self, Bench.self, Demo.self, Faults.self, Supervise.self])
}

// One line at a time even into a file or pipe: a command launched as an app logs to a file that tests and people tail.
beryl_line_buffer_stdout()
BerylCommand.main()
