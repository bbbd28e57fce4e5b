import BerylDaemonKit
import Foundation

/// Waits for `condition` for up to `timeout`, polling; returns whether it became true (for tests and tools that
/// watch another process).
public func eventually(_ timeout: Duration = .seconds(10), _ condition: () -> Bool) -> Bool {
    let clock = ContinuousClock()
    let deadline = clock.now + timeout
    while clock.now < deadline {
        if condition() { return true }
        usleep(20_000)
    }
    return condition()
}

/// Runs one of the package's executables to completion and captures its output.
public struct ToolRun: Sendable {
    public var status: Int32
    public var stdout: String
    public var stderr: String

    public init(status: Int32, stdout: String, stderr: String) {
        self.status = status
        self.stdout = stdout
        self.stderr = stderr
    }
}

/// `name` is one of the package's executables, or a path to any other program.
public func runTool(_ name: String, _ arguments: [String], environment: [String: String]? = nil, in directory: String? = nil) throws -> ToolRun {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: name.contains("/") ? name : Executables.path(name))
    process.arguments = arguments
    if let environment { process.environment = environment }
    if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
    let out = Pipe()
    let err = Pipe()
    process.standardOutput = out
    process.standardError = err
    try process.run()
    let outData = out.fileHandleForReading.readDataToEndOfFile()
    let errData = err.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return ToolRun(status: process.terminationStatus, stdout: String(decoding: outData, as: UTF8.self),
                   stderr: String(decoding: errData, as: UTF8.self))
}
