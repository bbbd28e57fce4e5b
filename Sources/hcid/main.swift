import ArgumentParser
import BerylCore
import BerylDaemonKit
import BerylHardware
import BerylHCI
import BerylIPC
import BerylTransport
import FoundationEssentials
import Glibc

struct Hcid: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "hcid",
        abstract: "Beryl's HCI transport daemon: owns one controller.",
        version: Beryl.version)

    @OptionGroup var options: DaemonOptions

    @Option(help: "The controller: userchannel:hciN, uart:/dev/TTY[,baud=N][,flow|noflow], tcp:HOST:PORT or unix:PATH.")
    var transport: String

    @Option(help: "Adapter profile: an id from the profiles directory, a path to a profile file, auto (detect from sysfs), or none.")
    var profile: String = "none"

    @Option(help: "Directory of adapter profiles (default: $BERYL_HARDWARE_DIR or /usr/share/beryl/hardware/adapters).")
    var profilesDir: String?

    @Option(help: "Directory firmware patch files are looked up in.")
    var firmwareDir: String = "/lib/firmware"

    @Option(help: "Milliseconds a controller has to answer a command before it is reported unresponsive.")
    var commandTimeout: Int = 2000

    func validate() throws {
        do { _ = try TransportSpec(parsing: transport) } catch { throw ValidationError(error.description) }
        guard (100...60_000).contains(commandTimeout) else { throw ValidationError("--command-timeout must be from 100 to 60000 ms") }
    }

    func run() throws {
        let spec = try TransportSpec(parsing: transport)
        let profilesDir = self.profilesDir ?? ProcessInfo.processInfo.environment["BERYL_HARDWARE_DIR"] ?? "/usr/share/beryl/hardware/adapters"
        let chosen: AdapterProfile?
        do {
            chosen = try Self.resolveProfile(profile, directory: profilesDir, transport: spec)
        } catch {
            StandardError.write("error: \(error)\n")
            throw ExitCode(1)
        }
        let patch: [VendorStepLoad]
        do {
            patch = try chosen?.patchFile.map { [try VendorStepLoad.hcd(path: "\(firmwareDir)/\($0)")] } ?? []
        } catch {
            StandardError.write("error: \(error)\n")
            throw ExitCode(1)
        }
        var daemon: HcidDaemon?
        let status = runDaemon({ try DaemonHost(name: "hcid", paths: options.paths, logLevel: options.logLevel) }) { host in
            daemon = HcidDaemon(host: host, transport: spec, profile: chosen, patch: patch.flatMap(\.steps),
                                commandTimeout: .milliseconds(commandTimeout))
        }
        withExtendedLifetime(daemon) {}
        throw ExitCode(status)
    }

    static func resolveProfile(_ name: String, directory: String, transport: TransportSpec) throws -> AdapterProfile? {
        switch name {
        case "none":
            return nil
        case "auto":
            let (profiles, errors) = ProfileLoader.loadAll(directory: directory)
            for error in errors { StandardError.write("warning: skipping profile \(error)\n") }
            return ProfileDetector.detect(profiles: profiles, transport: transport)
        default:
            if name.contains("/") { return try ProfileLoader.load(path: name) }
            return try ProfileLoader.load(path: "\(directory)/\(name).json")
        }
    }
}

/// A profile's firmware patch, read before the daemon starts so a missing file is a startup error.
struct VendorStepLoad {
    var steps: [BerylHCI.VendorStep]

    static func hcd(path: String) throws -> VendorStepLoad {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw MissingFirmwarePatch(path: path)
        }
        return VendorStepLoad(steps: try HCDPatch.commands(in: Array(data)))
    }
}

Hcid.main()

struct MissingFirmwarePatch: Error, CustomStringConvertible {
    let path: String
    var description: String { "firmware patch \(path) not found" }
}
