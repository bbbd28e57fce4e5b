import BerylManager
import Foundation
import XCTest

final class AppManifestTests: XCTestCase {
    let users: [String: Account] = ["doorlock": Account(uid: 1001, gid: 1001), "root": Account(uid: 0, gid: 0), "toor": Account(uid: 0, gid: 0)]

    private func parse(_ json: String) -> Result<AppManifest, ManifestError> {
        Result { () throws(ManifestError) -> AppManifest in
            try AppManifestParser.parse(Data(json.utf8), file: "/etc/beryl/apps/a.json", lookup: { self.users[$0] })
        }
    }

    func testTheIssuesExampleParses() throws {
        let manifest = try parse("""
            {"id": "com.example.doorlock", "user": "doorlock", "backgroundModes": ["bluetooth-central"],
             "launch": {"command": ["/usr/local/bin/doorlock", "--service", "D00D0001-0000-1000-8000-00805F9B34FB"]},
             "alertCommand": ["/usr/local/bin/notify-send-wrapper"]}
            """).get()
        XCTAssertEqual(manifest.id, "com.example.doorlock")
        XCTAssertEqual(manifest.uid, 1001)
        XCTAssertEqual(manifest.backgroundModes, [.central])
        XCTAssertEqual(manifest.launch?.first, "/usr/local/bin/doorlock")
        XCTAssertEqual(manifest.alertCommand, ["/usr/local/bin/notify-send-wrapper"])
        XCTAssertEqual(manifest.suspendAfter, 5)
        XCTAssertEqual(manifest.wakeBudget, 10)
    }

    func testEachBrokenRuleNamesItsField() {
        let cases: [(String, String, String)] = [
            (#"{"id": "com.example.x", "user": "root"}"#, "user", "never run as root"),
            (#"{"id": "com.example.x", "user": "toor"}"#, "user", "never run as root"),
            (#"{"id": "com.example.x", "user": "nobody-here"}"#, "user", "no such user"),
            (#"{"id": "com..x", "user": "doorlock"}"#, "id", "reverse-DNS"),
            (#"{"id": "com.example.x"}"#, "user", "missing"),
            (#"{"user": "doorlock"}"#, "id", "missing"),
            (#"{"id": "com.example.x", "user": "doorlock", "backgroundModes": ["audio"]}"#, "backgroundModes[0]", "not bluetooth-central"),
            (#"{"id": "com.example.x", "user": "doorlock", "launch": {"command": ["doorlock"]}}"#, "launch.command[0]", "absolute path"),
            (#"{"id": "com.example.x", "user": "doorlock", "launch": {"command": []}}"#, "launch.command", "non-empty"),
            (#"{"id": "com.example.x", "user": "doorlock", "launch": {"cmd": ["/bin/true"]}}"#, "launch.cmd", "unknown field"),
            (#"{"id": "com.example.x", "user": "doorlock", "launchCommand": ["/bin/true"]}"#, "launchCommand", "unknown field"),
            (#"{"id": "com.example.x", "user": "doorlock", "suspendAfterSeconds": -1}"#, "suspendAfterSeconds", "seconds"),
            (#"["com.example.x"]"#, "$", "JSON object"),
            (#"{"id": "#, "$", "not JSON"),
        ]
        for (json, field, reason) in cases {
            switch parse(json) {
            case .success(let manifest): XCTFail("\(json) parsed as \(manifest)")
            case .failure(let error):
                XCTAssertEqual(error.field, field, json)
                XCTAssertTrue(error.reason.contains(reason), "\(json): \(error.reason)")
                XCTAssertEqual(error.file, "/etc/beryl/apps/a.json")
            }
        }
    }

    func testACatalogKeepsTheGoodManifestsAndRefusesTheRest() throws {
        let files = [
            ManifestFile(path: "/etc/beryl/apps/a.json", data: Data(#"{"id": "com.example.a", "user": "doorlock"}"#.utf8)),
            ManifestFile(path: "/etc/beryl/apps/b.json", data: Data(#"{"id": "com.example.a", "user": "doorlock"}"#.utf8)),
            ManifestFile(path: "/etc/beryl/apps/c.json", data: Data(#"{"id": "com.example.c", "user": "root"}"#.utf8)),
            ManifestFile(path: "/etc/beryl/apps/d.json", refused: "writable by group or others"),
        ]
        let catalog = AppCatalog(files: files, lookup: { self.users[$0] })
        XCTAssertEqual(catalog.apps.keys.sorted(), ["com.example.a"])
        XCTAssertEqual(catalog.refused.map { "\(($0.file as NSString).lastPathComponent) \($0.field)" }, ["b.json id", "c.json user", "d.json $"])
        XCTAssertTrue(catalog.refused[0].reason.contains("already declared by"))
    }
}
