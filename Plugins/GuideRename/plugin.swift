import Foundation
import PackagePlugin

/// Renames the programming guide's listings (Guide/iOS, Swift as written for iOS) to Beryl's names at build time, so
/// that the compiled listings are the iOS code and nothing else: the test cannot drift into Beryl's own shapes.
@main
struct GuideRename: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: Target) throws -> [Command] {
        let guide = context.package.directoryURL.appending(path: "Guide")
        let script = guide.appending(path: "rename.sed")
        let listings = try FileManager.default.contentsOfDirectory(at: guide.appending(path: "iOS"), includingPropertiesForKeys: nil)
            .filter { $0.pathExtension == "swift" }
            .sorted { $0.lastPathComponent < $1.lastPathComponent }
        return listings.map { listing in
            let renamed = context.pluginWorkDirectoryURL.appending(path: listing.lastPathComponent)
            return .buildCommand(displayName: "Renaming \(listing.lastPathComponent) from Core Bluetooth to Beryl",
                                 executable: URL(fileURLWithPath: "/bin/sh"),
                                 arguments: ["-c", "sed -E -f \"$0\" \"$1\" > \"$2\"", script.path, listing.path, renamed.path],
                                 inputFiles: [script, listing], outputFiles: [renamed])
        }
    }
}
