import BerylDaemonKit
import BerylSupervisor
import Foundation

/// Full stacks (hcid, attd, managerd) on one berylsim with a controller each, in `run<i>`/`state<i>`; stack `i` gets
/// `attd[i]` and `managerd[i]` as extra arguments when given. Each daemon is started on its own, with no supervisor:
/// one a test kills stays dead.
public func startStacks(_ scratch: Scratch, count: Int = 2, sim simExtra: [String] = [], attd attdExtra: [[String]] = [],
                        managerd managerdExtra: [[String]] = []) throws {
    let sim = scratch.root + "/sim"
    try scratch.start("berylsim", [Executables.path("berylsim"), "--dir", sim, "--controllers", "\(count)"] + simExtra, socket: sim + "/control.sock")
    for index in 0..<count {
        let run = "\(scratch.root)/run\(index)"
        let common = ["--runtime-dir", run, "--state-dir", "\(scratch.root)/state\(index)"]
        try scratch.start("hcid\(index)", [Executables.path("hcid")] + common + ["--transport", "unix:\(sim)/controller-\(index).sock"], socket: run + "/hcid.sock")
        try scratch.start("attd\(index)", [Executables.path("attd")] + common + (attdExtra.indices.contains(index) ? attdExtra[index] : []),
                          socket: run + "/attd.sock")
        try scratch.start("managerd\(index)", [Executables.path("managerd")] + common + (managerdExtra.indices.contains(index) ? managerdExtra[index] : []),
                          socket: run + "/managerd.sock")
    }
}

/// A process the test means to stop was never started.
public struct NotStarted: Error, CustomStringConvertible {
    public let name: String
    public var description: String { "\(name) was not started" }
}

extension Scratch {
    /// Starts one daemon of the stack in this scratch directory, on controller 0 of a berylsim in it.
    public func startDaemon(_ name: String, extra: [String] = []) throws {
        var arguments = [Executables.path(name), "--runtime-dir", paths.runtimeDir, "--state-dir", paths.stateDir]
        if name == "hcid" { arguments += ["--transport", "unix:\(root)/controller-0.sock"] }
        try start(name, arguments + extra)
    }

    /// kill -9 of a process this test started, reaped if it is gone already; the socket it served is removed, so that
    /// starting its successor waits for the successor's own.
    public func crash(_ name: String, socket: String? = nil) throws {
        guard let pid = pid(of: name) else { throw NotStarted(name: name) }
        kill(pid, SIGKILL)
        _ = Spawn.reap(pid)
        if let socket { try? FileManager.default.removeItem(atPath: socket) }
    }
}
