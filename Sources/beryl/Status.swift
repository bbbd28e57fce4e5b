import ArgumentParser
import BerylIPC
import BerylSupervisor
import Foundation

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Show each daemon's pid and state.")

    @OptionGroup var stack: StackOptions

    @Flag(help: "Print JSON.")
    var json = false

    func run() throws {
        let report = StackProbe.report(paths: stack.paths)
        print(json ? Output.json(report) : Self.render(report))
        if !report.isUp { throw ExitCode(3) }
    }

    static func render(_ report: StackReport) -> String {
        var lines = ["stack \(report.runtimeDir)" + (report.supervisorPid.map { " (supervisor pid \($0))" } ?? " (no supervisor)")]
        for daemon in report.daemons {
            let pid = daemon.pid.map(String.init) ?? "-"
            let rss = daemon.rssBytes.map { "\($0 / 1024) KiB" } ?? "-"
            let restarts = daemon.restarts.map { " restarts \($0)" } ?? ""
            let attached = daemon.attachedTo.flatMap { $0.isEmpty ? nil : " attached to \($0.joined(separator: ", "))" } ?? ""
            lines.append("  \(daemon.name.padding(toLength: 9, withPad: " ", startingAt: 0)) pid \(pid.padding(toLength: 8, withPad: " ", startingAt: 0)) \(daemon.state.padding(toLength: 12, withPad: " ", startingAt: 0)) rss \(rss)\(restarts)\(attached)")
        }
        if let controller = report.controller {
            var line = "  controller \(controller.state) via \(controller.transport), profile \(controller.profile)"
            if let address = controller.address, let mtu = controller.leAclMtu, let buffers = controller.leAclBuffers {
                line += ", \(address), LE ACL \(mtu) bytes × \(buffers) (\(controller.aclBufferSource ?? "?"))"
            }
            if let detail = controller.detail { line += ": \(detail)" }
            lines.append(line)
            if controller.timesUnresponsive > 0 { lines.append("  controller fell silent \(controller.timesUnresponsive) time(s) and was reset") }
            if controller.cancelsNeverCompleted > 0 {
                lines.append("  controller never completed a cancelled connect \(controller.cancelsNeverCompleted) time(s) and was reset")
            }
            if !controller.unansweredCommands.isEmpty {
                lines.append("  commands the controller left unanswered: " + controller.unansweredCommands.map { "0x" + String($0, radix: 16) }.joined(separator: ", "))
            }
        }
        return lines.joined(separator: "\n")
    }
}

struct PingCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "ping", abstract: "Ping one daemon of the stack.")

    @OptionGroup var stack: StackOptions

    @Argument(help: "hcid, attd, managerd or supervisor.")
    var daemon: String = "managerd"

    func validate() throws {
        guard (StackProbe.daemonNames + ["supervisor"]).contains(daemon) else {
            throw ValidationError("unknown daemon '\(daemon)'; expected hcid, attd, managerd or supervisor")
        }
    }

    func run() throws {
        let path = stack.paths.socket(daemon)
        let clock = ContinuousClock()
        let start = clock.now
        guard StackControl.ping(path) else { throw Output.fail("\(daemon) does not answer at \(path)") }
        print("\(daemon) answered in \(clock.now - start)")
    }
}
