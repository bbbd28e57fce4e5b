import BerylDaemonKit
import Foundation
import XCTest

/// Which manifest files managerd trusts to say what to run as whom.
final class AccountsTests: XCTestCase {
    func testAFileIsTrustedOnlyWhenNoOneElseCanWriteIt() throws {
        let directory = NSTemporaryDirectory() + "beryl-accounts-\(getpid())"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/app.json"
        XCTAssertEqual(Accounts.whyUntrusted(path, owner: getuid()), "cannot stat the file")
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data("{}".utf8)))
        XCTAssertEqual(chmod(path, 0o644), 0)
        XCTAssertNil(Accounts.whyUntrusted(path, owner: getuid()))
        XCTAssertEqual(chmod(path, 0o664), 0)
        XCTAssertEqual(Accounts.whyUntrusted(path, owner: getuid()), "writable by group or others")
        XCTAssertEqual(chmod(path, 0o646), 0)
        XCTAssertEqual(Accounts.whyUntrusted(path, owner: getuid()), "writable by group or others")
        XCTAssertEqual(chmod(path, 0o644), 0)
        if getuid() != 0 {
            XCTAssertEqual(Accounts.whyUntrusted(path, owner: getuid() + 1), "owned by uid \(getuid()), not root")
        }
        XCTAssertEqual(Accounts.ids(ofUser: "root")?.uid, 0)
        XCTAssertNil(Accounts.ids(ofUser: "no-such-user-beryl"))
    }
}
