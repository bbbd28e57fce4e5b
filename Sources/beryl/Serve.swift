import ArgumentParser
import BerylEventLoop
import BerylSupervisor
import BerylTools
import Foundation

/// `beryl serve PROFILE.json`: publish the profile's services and advertise them until stopped, as an app of
/// managerd; `--direct` publishes through attd and advertises through hcid itself (debugging without managerd).
struct Serve: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Publish the GATT services of a profile file and advertise them, until stopped (SIGINT/SIGTERM).")

    @OptionGroup var stack: StackOptions

    @Argument(help: "The profile: localName, advertise and services (see docs/gatt.md).")
    var profile: String

    @Flag(help: "Only check the profile and print what it would publish.")
    var check = false

    @Option(help: "The passkey to enter when pairing asks for one (six digits).")
    var passkey: UInt32?

    @Flag(help: "Accept numeric comparisons without asking.")
    var autoAccept = false

    @Flag(help: "With --direct: advertise from a resolvable private address (bonded centrals still recognise this device).")
    var privateAddress = false

    @Flag(help: "Bypass managerd: publish through attd and advertise through hcid.")
    var direct = false

    @Flag(help: "One JSON object per line, each naming its event, instead of lines for people.")
    var json = false

    func validate() throws {
        if let passkey, passkey > 999_999 { throw ValidationError("--passkey is at most six digits") }
        if privateAddress, !direct { throw ValidationError("--private-address needs --direct (managerd advertises from the controller's address)") }
    }

    func run() throws {
        let parsed: GATTProfile
        do {
            parsed = try GATTProfile.load(path: profile)
        } catch {
            throw Output.fail("\(error)", code: 65)
        }
        if check {
            print("\(profile): \(parsed.services.count) services, \(parsed.services.map(\.characteristics.count).reduce(0, +)) characteristics")
            return
        }
        let agent = PairingAgent(passkey: passkey, autoAccept: autoAccept, ask: PairingAgent.terminal)
        guard direct else { return try ServeApp.run(stack: stack, profile: parsed, json: json, agent: agent) }
        let loop: EventLoop
        do { loop = try EventLoop() } catch { throw Output.fail("\(error)") }
        let printer = EventPrinter(json: json)
        let session = ServeSession(loop: loop, profile: parsed, paths: stack.paths) { printer.report($0) }
        session.agent = agent
        session.privateAddress = privateAddress
        do {
            try session.start()
        } catch {
            throw Output.fail("cannot reach the stack in \(stack.paths.runtimeDir): \(error)")
        }
        for signalNumber in [SIGINT, SIGTERM] { _ = try? loop.onSignal(signalNumber) { loop.stop() } }
        do { try loop.run() } catch { throw Output.fail("\(error)") }
        if let failure = session.failure { throw Output.fail(failure) }
    }
}
