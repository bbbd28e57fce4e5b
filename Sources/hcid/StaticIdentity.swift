import BerylCore
import FoundationEssentials
import Glibc

/// The static random identity for a controller with no public address, kept in `STATE_DIR/identity.json` so the
/// stack is the same device to its peers (and their bonds) across restarts. Written once, when first used; a file
/// that cannot be read is left as it is and the stack runs with an identity for this run only, saying so.
struct StaticIdentity: Codable {
    static let version = 1
    var version: Int
    var address: String

    enum Loaded {
        case stored(BDAddress)
        /// No file yet: this one is written if the controller needs it.
        case fresh(BDAddress)
        /// The file is there but unusable: this run's identity, never written over the file.
        case unusable(BDAddress, reason: String)
    }

    static func path(stateDir: String) -> String { stateDir + "/identity.json" }

    static func load(stateDir: String) -> Loaded {
        let path = path(stateDir: stateDir)
        let made = makeStaticRandomAddress { UInt8.random(in: 0...255) }
        guard let data = FileManager.default.contents(atPath: path) else { return .fresh(made) }
        guard let stored = try? JSONDecoder().decode(StaticIdentity.self, from: data) else { return .unusable(made, reason: "\(path) is not an identity record") }
        guard stored.version == version else { return .unusable(made, reason: "\(path) is version \(stored.version); this hcid reads \(version)") }
        guard let address = BDAddress(stored.address), address.randomKind == .static else {
            return .unusable(made, reason: "\(path) holds '\(stored.address)', not a static random address")
        }
        return .stored(address)
    }

    static func save(_ address: BDAddress, stateDir: String) throws {
        try FileManager.default.createDirectory(atPath: stateDir, withIntermediateDirectories: true)
        let data = try JSONEncoder().encode(StaticIdentity(version: version, address: address.description))
        try data.write(to: URL(fileURLWithPath: path(stateDir: stateDir)), options: .atomic)
    }
}
