import BerylStore
import Foundation
import XCTest

/// The apps an earlier managerd launched: known to its successor only while each pid is still the process launched.
final class LaunchedAppsTests: XCTestCase {
    func testOnlyTheLaunchedProcessesComeBack() throws {
        let path = NSTemporaryDirectory() + "beryl-launched-\(getpid()).json"
        defer { try? FileManager.default.removeItem(atPath: path) }
        XCTAssertEqual(LaunchedApps.load(from: path), LaunchedApps(), "no file: no apps")

        let launched = LaunchedApps([.init(app: "thermo", pid: 300, start: 7), .init(app: "lock", pid: 200, start: 5), .init(app: "hr", pid: 100, start: 3)])
        XCTAssertEqual(launched.entries.map(\.app), ["hr", "lock", "thermo"])
        try launched.save(to: path)
        let loaded = LaunchedApps.load(from: path)
        XCTAssertEqual(loaded, launched)
        // hr's pid is another process now (started later); thermo's is gone; lock's is the one launched.
        let starts: [Int32: UInt64] = [100: 90, 200: 5]
        XCTAssertEqual(loaded.stillRunning { starts[$0] }.map(\.app), ["lock"])

        try Data("{\"entries\": [{\"app\": 1}]}".utf8).write(to: URL(fileURLWithPath: path))
        XCTAssertEqual(LaunchedApps.load(from: path), LaunchedApps(), "a damaged file names no apps")
    }
}
