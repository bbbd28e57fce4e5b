import BerylCore
import FoundationEssentials
import Glibc

/// Core Bluetooth's UIBackgroundModes for Bluetooth.
public enum BackgroundMode: String, Sendable, CaseIterable {
    case central = "bluetooth-central"
    case peripheral = "bluetooth-peripheral"
}

/// An app's declaration (the Linux Info.plist): who it is, which user it runs as, its background modes, and the
/// command managerd may launch it with. Only manifests carry launch commands; nothing from a socket ever does.
public struct AppManifest: Equatable, Sendable {
    public var id: String
    public var file: String
    public var user: String
    public var uid: UInt32
    public var gid: UInt32
    public var backgroundModes: Set<BackgroundMode>
    /// argv; nil for an app that cannot be launched (it is then never relaunched for restoration).
    public var launch: [String]?
    public var alertCommand: [String]?
    /// Seconds in the background before a foreground-only app is suspended.
    public var suspendAfter: Double
    /// Seconds a woken app has to handle its event and report idle.
    public var wakeBudget: Double

    public func allows(_ mode: BackgroundMode) -> Bool { backgroundModes.contains(mode) }
}

/// Why a manifest was refused: the file, the field (a JSON path) and the reason.
public struct ManifestError: Error, Equatable, Sendable, CustomStringConvertible {
    public var file: String
    public var field: String
    public var reason: String
    public var description: String { "\(file): \(field): \(reason)" }
}

/// A user account as the system knows it.
public struct Account: Equatable, Sendable {
    public var uid: UInt32
    public var gid: UInt32
    public init(uid: UInt32, gid: UInt32) {
        self.uid = uid
        self.gid = gid
    }
}

public enum AppManifestParser {
    /// Parses one manifest. `lookup` finds a user by name (getpwnam in managerd, a table in tests).
    public static func parse(_ data: Data, file: String, lookup: (String) -> Account?) throws(ManifestError) -> AppManifest {
        func fail(_ field: String, _ reason: String) -> ManifestError { ManifestError(file: file, field: field, reason: reason) }
        let parsed: JSONValue
        do { parsed = try JSONValue.parse(data) } catch { throw fail("$", "not JSON: \(error)") }
        guard let object = parsed.object else { throw fail("$", "a manifest is a JSON object") }
        let known: Set<String> = ["id", "user", "backgroundModes", "launch", "alertCommand", "suspendAfterSeconds", "wakeBudgetSeconds"]
        if let unknown = object.keys.sorted().first(where: { !known.contains($0) }) { throw fail(unknown, "unknown field") }

        guard let id = object["id"]?.string else { throw fail("id", "missing, or not a string") }
        // Reverse-DNS, as bundle identifiers are: letters, digits, '-' and '.', no empty parts.
        let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.".unicodeScalars)
        guard !id.isEmpty, id.count <= 255, id.unicodeScalars.allSatisfy({ allowed.contains($0) }),
              !id.split(separator: ".", omittingEmptySubsequences: false).contains(where: \.isEmpty) else {
            throw fail("id", "'\(id)' is not a reverse-DNS identifier like com.example.doorlock")
        }
        guard let user = object["user"]?.string, !user.isEmpty else { throw fail("user", "missing, or not a user name") }
        guard let account = lookup(user) else { throw fail("user", "no such user '\(user)'") }
        guard account.uid != 0, user != "root" else { throw fail("user", "apps never run as root; name an unprivileged user") }

        var modes: Set<BackgroundMode> = []
        if let raw = object["backgroundModes"] {
            guard let list = raw.array else { throw fail("backgroundModes", "a list of bluetooth-central and bluetooth-peripheral") }
            for (index, entry) in list.enumerated() {
                guard let name = entry.string, let mode = BackgroundMode(rawValue: name) else {
                    throw fail("backgroundModes[\(index)]", "not bluetooth-central or bluetooth-peripheral")
                }
                modes.insert(mode)
            }
        }

        func command(_ value: JSONValue?, field: String) throws(ManifestError) -> [String] {
            guard let list = value?.array, !list.isEmpty, list.count <= 256 else { throw fail(field, "a non-empty list of strings (argv)") }
            var argv: [String] = []
            for (index, part) in list.enumerated() {
                guard let text = part.string, !text.contains("\0") else { throw fail("\(field)[\(index)]", "not a string") }
                argv.append(text)
            }
            guard argv[0].hasPrefix("/") else { throw fail("\(field)[0]", "the program must be an absolute path") }
            return argv
        }
        var launch: [String]?
        if let raw = object["launch"] {
            guard let launchObject = raw.object else { throw fail("launch", "an object with a command") }
            if let unknown = launchObject.keys.sorted().first(where: { $0 != "command" }) { throw fail("launch.\(unknown)", "unknown field") }
            launch = try command(launchObject["command"], field: "launch.command")
        }
        let alert = try object["alertCommand"].map { value throws(ManifestError) in try command(value, field: "alertCommand") }

        func seconds(_ key: String, default value: Double) throws(ManifestError) -> Double {
            guard let raw = object[key] else { return value }
            guard let number = raw.double, number >= 0, number <= 3600 else { throw fail(key, "seconds from 0 to 3600") }
            return number
        }
        return AppManifest(id: id, file: file, user: user, uid: account.uid, gid: account.gid, backgroundModes: modes, launch: launch,
                           alertCommand: alert, suspendAfter: try seconds("suspendAfterSeconds", default: 5),
                           wakeBudget: try seconds("wakeBudgetSeconds", default: 10))
    }
}

/// A manifest file as the shell found it: its bytes, or why they are not to be read (an owner or mode that is not
/// trusted, a file that cannot be read).
public struct ManifestFile: Sendable {
    public var path: String
    public var contents: Result<Data, ManifestError>

    public init(path: String, data: Data) {
        self.path = path
        contents = .success(data)
    }

    public init(path: String, refused reason: String) {
        self.path = path
        contents = .failure(ManifestError(file: path, field: "$", reason: reason))
    }
}

/// Every manifest in a directory: the good ones by id, and one error per file refused (the others still load).
public struct AppCatalog: Sendable {
    public private(set) var apps: [String: AppManifest] = [:]
    public private(set) var refused: [ManifestError] = []

    public init() {}

    public init(_ manifests: [AppManifest]) {
        for manifest in manifests { apps[manifest.id] = manifest }
    }

    /// Core Bluetooth's authorization, from the manifests: an app id declared for another user is denied to this one
    /// (managerd refuses its Hello); an undeclared id (a foreground-only app) or the manifest's user may.
    public func mayUseBluetooth(appID: String, uid: UInt32) -> Bool {
        guard let manifest = apps[appID] else { return true }
        return manifest.uid == uid
    }

    /// The manifests as the shell read them, in the order read: the first file to declare an id keeps it.
    public init(files: [ManifestFile], lookup: (String) -> Account?) {
        for file in files {
            do {
                let manifest = try AppManifestParser.parse(try file.contents.get(), file: file.path, lookup: lookup)
                if let first = apps[manifest.id] {
                    refused.append(ManifestError(file: file.path, field: "id", reason: "'\(manifest.id)' is already declared by \(first.file)"))
                } else {
                    apps[manifest.id] = manifest
                }
            } catch {
                refused.append(error)
            }
        }
    }
}
