import Beryl
import BerylDaemonKit
import BerylSupervisor
import BerylTestSupport
import BerylWire
import Dispatch
import Foundation
import Synchronization
import XCTest

/// Two full stacks on berylsim for each test (`run0`/`run1`), with what most app tests use.
class TwoStacksTestCase: XCTestCase {
    var scratch: Scratch!
    /// Extra managerd arguments for each stack.
    var managerdArguments: [[String]] { [[], []] }
    /// Extra berylsim arguments (its link, say).
    var simArguments: [String] { [] }
    /// Runs in the scratch directory before the stacks start.
    func prepare() throws {}

    override func setUpWithError() throws {
        scratch = try Scratch()
        try prepare()
        try startStacks(scratch, count: managerdArguments.count, sim: simArguments, managerd: managerdArguments)
    }

    override func tearDown() {
        // A failure that shows once in a CI run leaves its daemons' and apps' logs behind.
        // Not hasSucceeded: that is false until the run has stopped, which is after tearDown.
        if (testRun?.totalFailureCount ?? 0) > 0 {
            scratch.keep = true
            print("\(name): kept \(scratch.root) for its logs")
        }
        scratch.stopAll()
    }

    func socket(_ index: Int) -> String { "\(scratch.root)/run\(index)/managerd.sock" }

    /// Four rounds of 500 values: each round sends the apps to the background, and brings them back to the foreground
    /// 5 ms into its first 250 values, so that their grants turn live again while they send.
    func floodWhileTheAppsLeaveTheForegroundAndComeBack(_ ids: [String], managerd: String, flood: (Range<Int>) async -> Void) async {
        for round in 0..<4 {
            XCTAssertTrue(Self.setAppState(ids, .background, managerd: managerd))
            let comingBack = Task.detached {
                try? await Task.sleep(for: .milliseconds(5))
                return TwoStacksTestCase.setAppState(ids, .foreground, managerd: managerd)
            }
            await flood(round * 500..<round * 500 + 250)
            let foreground = await comingBack.value
            XCTAssertTrue(foreground)
            await flood(round * 500 + 250..<round * 500 + 500)
        }
    }

    /// Each app's lifecycle state set through managerd's socket, as the supervisor sets it; false when any call
    /// fails. Static, so that a detached task can flip the apps while they run.
    static func setAppState(_ ids: [String], _ state: Beryl_Ipc_V1_AppLifecycle, managerd socket: String) -> Bool {
        guard let control = try? IPCClient(path: socket) else { return false }
        return ids.allSatisfy { id in
            var request = Request()
            request.manager.setAppState = .with { $0.appID = id; $0.state = state }
            return (try? control.call(request)) != nil
        }
    }

    /// `beryl ARGUMENTS` against one of the stacks.
    @discardableResult
    func beryl(_ arguments: [String], side: Int = 0) throws -> (status: Int32, out: String, err: String) {
        let run = try runTool("beryl", arguments + ["--runtime-dir", "\(scratch.root)/run\(side)"])
        return (run.status, run.stdout, run.stderr)
    }

    /// `beryl sim ARGUMENTS` against the test's berylsim; its exit status.
    func sim(_ arguments: [String]) throws -> Int32 {
        try runTool("beryl", ["sim"] + arguments + ["--dir", scratch.root + "/sim"]).status
    }

    /// An app as `beryl app list` on stack 0 shows it.
    func managedApp(_ id: String) throws -> [String: Any] {
        let listed = try beryl(["app", "list", "--json"])
        let object = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(listed.out.utf8)) as? [String: Any], listed.err)
        return try XCTUnwrap((object["apps"] as? [[String: Any]])?.first { $0["id"] as? String == id })
    }

    /// Controller `index` as berylsim sees it: what its host set on the air.
    func simController(_ index: Int) throws -> [String: Any] {
        let listed = try runTool("beryl", ["sim", "list", "--json", "--dir", scratch.root + "/sim"])
        let object = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [String: Any], listed.stderr)
        return try XCTUnwrap((object["controllers"] as? [[String: Any]])?.first { ($0["index"] as? Int ?? 0) == index })
    }
}
