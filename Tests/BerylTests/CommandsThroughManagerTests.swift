import BerylDaemonKit
import BerylSupervisor
import BerylTestSupport
import Foundation
import XCTest

/// `beryl serve|gatt|connect|advertise|scan` are ordinary apps of managerd, written on the Beryl library; `--peer`
/// takes an identifier or an address.
final class CommandsThroughManagerTests: TwoStacksTestCase {
    static let profile = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Examples/profiles/heart-rate.json").path
    static let rw = "6E400002-B5A3-F393-E0A9-E50E24DCCA9E"

    private func objects(_ out: String) -> [[String: Any]] { JSONLines.events(in: out) }

    /// What `beryl serve --json` reported under `event`.
    private func served(_ event: String) -> [[String: Any]] { JSONLines.events(event, inFile: scratch.paths.logFile("serve")) }
    private var serveLog: String { (try? String(contentsOfFile: scratch.paths.logFile("serve"), encoding: .utf8)) ?? "" }

    func testTheCommandsAreAppsOfManagerd() throws {
        try scratch.start("serve", [Executables.path("beryl"), "serve", Self.profile, "--json", "--runtime-dir", "\(scratch.root)/run1"],
                          socket: "\(scratch.root)/run1/managerd.sock")
        XCTAssertTrue(eventually { self.served("advertising").first?["name"] as? String == "Beryl HR" }, serveLog)
        XCTAssertEqual(served("published").compactMap { $0["service"] as? String }, ["180D", "6E400001-B5A3-F393-E0A9-E50E24DCCA9E"], serveLog)

        let scan = try beryl(["scan", "--service", "180D", "--count", "1", "--timeout", "10", "--json"])
        XCTAssertEqual(scan.status, 0, scan.err)
        let identifier = try XCTUnwrap(objects(scan.out).first?["identifier"] as? String)
        let address = try XCTUnwrap(objects(scan.out).first?["address"] as? String)

        // By identifier: discovery shows the profile's services beside GAP and GATT's.
        let discover = try beryl(["gatt", "--peer", identifier, "discover", "--json"])
        XCTAssertEqual(discover.status, 0, discover.err)
        let services = objects(discover.out).filter { $0["event"] as? String == "service" }
        XCTAssertEqual(services.compactMap { $0["uuid"] as? String }, ["1800", "1801", "180D", "6E400001-B5A3-F393-E0A9-E50E24DCCA9E"])
        let heart = try XCTUnwrap(services.first { $0["uuid"] as? String == "180D" }?["characteristics"] as? [[String: Any]])
        XCTAssertEqual(heart.first?["uuid"] as? String, "2A37")
        XCTAssertEqual((heart.first?["descriptors"] as? [[String: Any]])?.compactMap { $0["uuid"] as? String }, ["2902"])
        XCTAssertEqual(objects(discover.out).first?["identifier"] as? String, identifier)

        // By address: a cached read, a dynamic value written long and read back, a reliable write, a command.
        let cached = try beryl(["gatt", "--peer", address, "read", "2A38", "--json"])
        XCTAssertEqual(objects(cached.out).last?["value"] as? String, "02", cached.err)
        let long = String(repeating: "c3", count: 300)
        XCTAssertEqual(try beryl(["gatt", "--peer", address, "write", Self.rw, long]).status, 0)
        XCTAssertEqual(objects(try beryl(["gatt", "--peer", identifier, "read", Self.rw, "--json"]).out).last?["value"] as? String, long)
        let reliable = try beryl(["gatt", "--peer", identifier, "write", Self.rw, "a1a2", "--reliable", "--json"])
        XCTAssertEqual(objects(reliable.out).last?["reliable"] as? Bool, true, reliable.err)
        XCTAssertEqual(try beryl(["gatt", "--peer", identifier, "write", Self.rw, "0909", "--without-response"]).status, 0)
        // The publisher saw the reliable write and the command, each one write of two bytes at offset 0.
        let writes = {
            self.served("write-requested").suffix(2).map { ($0["writes"] as? [[String: Any]] ?? []).map { "\($0["attribute"] ?? "")[\($0["offset"] ?? "")] \($0["bytes"] ?? "")" } }
        }
        XCTAssertTrue(eventually { writes() == [["\(Self.rw)[0] 2"], ["\(Self.rw)[0] 2"]] }, serveLog)
        XCTAssertNil(served("write-requested").last?["refusal"], serveLog)
        XCTAssertEqual(objects(try beryl(["gatt", "--peer", identifier, "read", Self.rw, "--json"]).out).last?["value"] as? String, "0909")

        // Subscribing: the profile's counter notifies, one step at a time.
        let beats = try beryl(["gatt", "--peer", identifier, "subscribe", "2A37", "--count", "3", "--json"])
        XCTAssertEqual(beats.status, 0, beats.err)
        let values = objects(beats.out).filter { $0["event"] as? String == "notification" }.compactMap { ($0["value"] as? String).flatMap { UInt8($0, radix: 16) } }
        XCTAssertEqual(values.count, 3, beats.out)
        XCTAssertEqual(zip(values, values.dropFirst()).map { $1 &- $0 }, [1, 1])
        XCTAssertTrue(served("subscribed").contains { $0["attribute"] as? String == "2A37" && UUID(uuidString: $0["central"] as? String ?? "") != nil },
                      serveLog)

        // connect: the link's figures, then a clean cancel.
        let connect = try beryl(["connect", "--peer", identifier, "--hold", "0.2", "--json"])
        XCTAssertEqual(connect.status, 0, connect.err)
        let link = try XCTUnwrap(objects(connect.out).first)
        XCTAssertEqual(link["event"] as? String, "connected")
        XCTAssertEqual(link["maximumWrite"] as? Int, 512)
        XCTAssertLessThan(try XCTUnwrap(link["rssi"] as? Int), 0)
        XCTAssertEqual(objects(connect.out).last?["by"] as? String, "us")

        // advertise on the other side; this side's scan hears it.
        try scratch.start("advertise", [Executables.path("beryl"), "advertise", "--name", "Lab", "--service", "180F", "--duration", "30",
                                        "--runtime-dir", "\(scratch.root)/run0"], socket: "\(scratch.root)/run0/managerd.sock")
        let heard = try beryl(["scan", "--service", "180F", "--count", "1", "--timeout", "10", "--json"], side: 1)
        XCTAssertEqual(objects(heard.out).first?["name"] as? String, "Lab", heard.err)
        XCTAssertEqual(objects(heard.out).first?["serviceUUIDs"] as? [String], ["180F"])

        // Bad input: clear errors, non-zero status.
        let nonsense = try beryl(["gatt", "--peer", "nonsense", "read", "2A38"])
        XCTAssertNotEqual(nonsense.status, 0)
        XCTAssertTrue(nonsense.err.contains("neither a peripheral identifier nor an address"), nonsense.err)
        let unknown = try beryl(["gatt", "--peer", UUID().uuidString, "read", "2A38"])
        XCTAssertNotEqual(unknown.status, 0)
        XCTAssertTrue(unknown.err.contains("no peripheral has the identifier"), unknown.err)
        let direct = try beryl(["gatt", "--direct", "--peer", identifier, "read", "2A38"])
        XCTAssertNotEqual(direct.status, 0)
        XCTAssertTrue(direct.err.contains("--direct needs the peer's address"), direct.err)
        let missing = try beryl(["gatt", "--peer", identifier, "read", "2A99"])
        XCTAssertNotEqual(missing.status, 0)
        XCTAssertTrue(missing.err.contains("the peer has no characteristic 2A99"), missing.err)
    }
}
