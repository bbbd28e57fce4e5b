import BerylDaemonKit
import BerylIPC
import BerylSupervisor
import Foundation
import XCTest

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

