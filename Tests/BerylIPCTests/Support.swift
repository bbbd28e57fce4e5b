import BerylDaemonKit
import BerylIPC
import BerylStack
import Foundation
import XCTest

/// Runs one of the package's executables to completion and captures its output.
struct ToolRun {
    var status: Int32
    var stdout: String
    var stderr: String
}

func runTool(_ name: String, _ arguments: [String], environment: [String: String]? = nil) throws -> ToolRun {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: Executables.path(name))
    process.arguments = arguments
    if let environment { process.environment = environment }
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

extension Scratch {
    /// Starts one daemon of the stack in this scratch directory.
    func startDaemon(_ name: String, extra: [String] = []) throws {
        var arguments = [Executables.path(name), "--runtime-dir", paths.runtimeDir, "--state-dir", paths.stateDir]
        if name == "hcid" { arguments += ["--transport", "unix:\(root)/controller-0.sock"] }
        try start(name, arguments + extra)
    }
}

func pingRequest(_ payload: [UInt8] = []) -> Request {
    var request = Request()
    request.ping.payload = Data(payload)
    return request
}

