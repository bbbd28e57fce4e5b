import BerylBench
import BerylCore
import BerylDaemonKit
import BerylHCI
import BerylIPC
import BerylStore
import BerylSupervisor
import BerylTestSupport
import Foundation
import XCTest

/// Pairing and bonding between two Beryl stacks (hcid + attd) on berylsim: a `beryl gatt` central and a
/// `beryl serve` peripheral with encryption-required characteristics.
final class SecurityProcessTests: XCTestCase {
    var scratch: Scratch!
    var simDir: String { scratch.root + "/sim" }
    static let lockProfile = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Examples/profiles/secure-lock.json").path
    static let secret = "D00D0002-0000-1000-8000-00805F9B34FB"
    static let counter = "D00D0004-0000-1000-8000-00805F9B34FB"

    override func setUpWithError() throws {
        scratch = try Scratch()
        try scratch.start("berylsim", [Executables.path("berylsim"), "--dir", simDir, "--controllers", "2"], socket: simDir + "/control.sock")
    }

    override func tearDown() { scratch.stopAll() }

    private func run(_ side: String) -> String { "\(scratch.root)/run-\(side)" }
    private func state(_ side: String) -> String { "\(scratch.root)/state-\(side)" }

    private func startStack(_ side: String, controller: Int, attd extra: [String] = []) throws {
        try scratch.start("hcid-\(side)", [Executables.path("hcid"), "--runtime-dir", run(side), "--state-dir", state(side),
                                           "--transport", "unix:\(simDir)/controller-\(controller).sock"], socket: run(side) + "/hcid.sock")
        XCTAssertTrue(eventually { StackProbe.controllerInfo(at: self.run(side) + "/hcid.sock")?.state == .poweredOn })
        try startAttd(side, extra)
    }

    private func startAttd(_ side: String, _ extra: [String]) throws {
        try scratch.start("attd-\(side)", [Executables.path("attd"), "--runtime-dir", run(side), "--state-dir", state(side)] + extra,
                          socket: run(side) + "/attd.sock")
    }

    /// kill -9, as the fault suite does, then the same daemon again on the same state directory.
    private func restartAttd(_ side: String, _ extra: [String] = []) throws {
        let pid = try XCTUnwrap(scratch.pid(of: "attd-\(side)"))
        kill(pid, SIGKILL)
        XCTAssertTrue(eventually { kill(pid, 0) != 0 || Spawn.reap(pid) != nil })
        try? FileManager.default.removeItem(atPath: run(side) + "/attd.sock")
        try startAttd(side, extra)
    }

    private var serveName = "serve"
    private var serveLog: String { (try? String(contentsOfFile: scratch.paths.logFile(serveName), encoding: .utf8)) ?? "" }
    /// What the running `beryl serve --json` reported under `event`.
    private func served(_ event: String) -> [[String: Any]] { JSONLines.events(event, inFile: scratch.paths.logFile(serveName)) }
    /// The publisher saw its link encrypted with the key of a bond.
    private var encryptedWithBond: Bool { served("security").contains { $0["encrypted"] as? Bool == true && $0["bonded"] as? Bool == true } }

    /// `beryl serve` on stack b; it exits when attd goes (its services go with their publisher), so a restart starts another.
    private func serve(_ extra: [String] = [], name: String = "serve") throws -> String {
        serveName = name
        try scratch.start(name, [Executables.path("beryl"), "serve", "--direct", "--json", Self.lockProfile, "--runtime-dir", run("b")] + extra,
                          socket: run("b") + "/attd.sock")
        XCTAssertTrue(eventually { !self.served("advertising").isEmpty }, serveLog)
        return try XCTUnwrap(StackProbe.controllerInfo(at: run("b") + "/hcid.sock")?.address)
    }

    private func gatt(_ arguments: [String]) throws -> ToolRun {
        try runTool("beryl", ["gatt", "--direct", "--json", "--runtime-dir", run("a")] + arguments + ["--timeout", "30"])
    }

    private func pairings(_ run: ToolRun) -> [[String: Any]] { JSONLines.events("pairing-complete", in: run.stdout) }

    /// The SMP reason a failed pairing reported (`--json`), and whether the peer sent it.
    private func smpFailure(_ run: ToolRun) -> [Int: Bool] {
        Dictionary(JSONLines.events("failed", in: run.stdout).compactMap { event in
            (event["smpReason"] as? Int).map { ($0, event["byPeer"] as? Bool ?? false) }
        }, uniquingKeysWith: { first, _ in first })
    }

    private func bonds(_ side: String) throws -> [[String: Any]] {
        let listed = try runTool("beryl", ["bonds", "list", "--runtime-dir", run(side), "--json"])
        XCTAssertEqual(listed.status, 0, listed.stderr)
        let object = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [String: Any])
        return try XCTUnwrap(object["bonds"] as? [[String: Any]])
    }

    /// A read of an encryption-required value pairs (LE Secure Connections, Just Works) and bonds; the next connection
    /// re-encrypts with the stored key; bonds and a bonded peer's subscriptions survive kill -9 of attd on both sides.
    func testPairBondReEncryptAndSurviveRestarts() throws {
        try startStack("a", controller: 0)
        try startStack("b", controller: 1)
        let peer = try serve()
        let centralAddress = try XCTUnwrap(StackProbe.controllerInfo(at: run("a") + "/hcid.sock")?.address)

        let first = try gatt(["--peer", peer, "read", Self.secret])
        XCTAssertEqual(first.status, 0, first.stderr)
        XCTAssertEqual(JSONLines.events("read", in: first.stdout).last?["value"] as? String, "6c6f636b6564", first.stdout)
        XCTAssertEqual(pairings(first).first?["bonded"] as? Bool, true, first.stdout)
        XCTAssertEqual(try bonds("a").map { $0["identity"] as? String }, [peer])
        XCTAssertEqual(try bonds("b").map { $0["identity"] as? String }, [centralAddress])
        XCTAssertEqual(try bonds("a").first?["secureConnections"] as? Bool, true)

        let again = try gatt(["--peer", peer, "read", Self.secret])
        XCTAssertEqual(again.status, 0, again.stderr)
        XCTAssertTrue(pairings(again).isEmpty, "no second pairing: \(again.stdout)")
        XCTAssertTrue(eventually { self.encryptedWithBond }, serveLog)

        // A bonded central's subscription is kept by the peripheral (Core Vol 3 Part G §3.3.3.3).
        let subscribed = try gatt(["--peer", peer, "subscribe", Self.counter, "--count", "2"])
        XCTAssertEqual(subscribed.status, 0, subscribed.stderr)
        // The counter, and Service Changed, which the central's attd subscribes to after discovery as iOS does.
        XCTAssertEqual(try bonds("b").first?["subscriptions"] as? Int, 2)

        try restartAttd("a")
        try restartAttd("b")
        _ = try serve(name: "serve-again")
        XCTAssertEqual(try bonds("a").map { $0["identity"] as? String }, [peer], "bonds survive kill -9")
        XCTAssertEqual(try bonds("b").first?["subscriptions"] as? Int, 2, "subscriptions of bonded peers survive kill -9")
        let afterRestart = try gatt(["--peer", peer, "read", Self.secret])
        XCTAssertEqual(afterRestart.status, 0, afterRestart.stderr)
        XCTAssertTrue(pairings(afterRestart).isEmpty, afterRestart.stdout)

        let removed = try runTool("beryl", ["bonds", "remove", peer, "--runtime-dir", run("a")])
        XCTAssertEqual(removed.status, 0, removed.stderr)
        XCTAssertEqual(try bonds("a").count, 0)
        let unknown = try runTool("beryl", ["bonds", "remove", peer, "--runtime-dir", run("a")])
        XCTAssertNotEqual(unknown.status, 0)
        XCTAssertTrue(unknown.stderr.contains("no bond"), unknown.stderr)
        let badAddress = try runTool("beryl", ["bonds", "remove", "nonsense", "--runtime-dir", run("a")])
        XCTAssertNotEqual(badAddress.status, 0)
    }

    /// Core Vol 3 Part G §2.5.2 and §7.1, the client's side: the peripheral's database changes while its bonded
    /// central is away, and it indicates Service Changed as soon as the central is back — before anything is discovered
    /// on the new link (an app restored with its cached handles discovers nothing). The central's attd kept where the
    /// peer's Service Changed is with the bond, so it re-discovers the range and tells its clients, rather than passing
    /// the indication on as an unknown value (the fault suite's kill-managerd × connecting once lost a subscription so).
    func testABondedPeersChangeWhileAwayIsRecognisedOnTheNextLinkBeforeAnyDiscovery() throws {
        try startStack("a", controller: 0)
        try startStack("b", controller: 1)
        let peer = try serve()
        let paired = try gatt(["--peer", peer, "read", Self.secret])  // discovers the whole database, pairs, bonds
        XCTAssertEqual(paired.status, 0, paired.stderr)
        let identity = try XCTUnwrap(DeviceAddress(peer))
        XCTAssertTrue(eventually { (try? BondStore(path: self.state("a") + "/bonds.sqlite").peerServiceChanged(identity)) != nil },
                      "the bond keeps where the peer's Service Changed is")

        // a is away: a service is added on b.
        let publisher = try IPCClient(path: run("b") + "/attd.sock")
        var publish = Request()
        publish.att.publishService.service = .with {
            $0.uuid = "181A"
            $0.primary = true
            $0.characteristics = [.with { $0.uuid = "2A6E"; $0.properties = 0x02; $0.permissions = 0x01; $0.cached = true; $0.value = Data([1, 2]) }]
        }
        let added = try publisher.call(publish).att.servicePublished
        XCTAssertGreaterThan(added.startHandle, 0)

        // a comes back over HCI alone: nothing asks a's attd to discover.
        let clients = try IPCClient(path: run("a") + "/attd.sock")
        let hci = try IPCClient(path: run("a") + "/hcid.sock")
        try HCIBenchmark.subscribe(hci)
        _ = try HCIBenchmark.command(hci, HCICommands.leCreateConnection(peer: identity, interval: 24, supervisionTimeout: 200))
        let link = UInt32(try HCIBenchmark.waitForHandle(hci))
        var changed: Beryl_Ipc_V1_GattServiceChanged?
        var passedOn: [Beryl_Ipc_V1_GattNotification] = []
        XCTAssertTrue(eventually(.seconds(15)) {
            while let envelope = try? clients.receive(timeout: .milliseconds(50)) {
                switch envelope.event.att.kind {
                case .gattServiceChanged(let event)? where event.connectionHandle == link: changed = event
                case .gattNotification(let notification)?: passedOn.append(notification)
                default: break
                }
            }
            return changed != nil
        }, "no Service Changed reached a's clients; indications passed on as values: \(passedOn)")
        XCTAssertLessThanOrEqual(changed?.startHandle ?? .max, added.startHandle)
        XCTAssertGreaterThanOrEqual(changed?.endHandle ?? 0, added.endHandle)
        XCTAssertTrue(changed?.database.services.map(\.uuid).contains("181A") == true, "\(String(describing: changed))")
        XCTAssertTrue(passedOn.isEmpty, "\(passedOn)")
        withExtendedLifetime(publisher) {}
    }

    /// Privacy: a bonded peripheral that advertises from a fresh resolvable private address is recognised by the
    /// IRK it gave in pairing; the link is encrypted with the bond's key, no new pairing.
    func testABondedPeerAtAPrivateAddressIsRecognised() throws {
        try startStack("a", controller: 0)
        try startStack("b", controller: 1)
        let peer = try serve()
        XCTAssertEqual(try gatt(["--peer", peer, "read", Self.secret]).status, 0)
        XCTAssertEqual(try bonds("a").first?["irk"] as? Bool, true)
        kill(try XCTUnwrap(scratch.pid(of: "serve")), SIGTERM)
        _ = try serve(["--private-address"], name: "serve-private")
        var privateAddress = ""
        XCTAssertTrue(eventually {
            privateAddress = self.served("advertising").compactMap { $0["privateAddress"] as? String }.first ?? ""
            return !privateAddress.isEmpty
        }, serveLog)
        XCTAssertNotEqual(privateAddress, peer)
        let read = try gatt(["--peer", privateAddress + "/random", "read", Self.secret])
        XCTAssertEqual(read.status, 0, read.stderr)
        XCTAssertTrue(pairings(read).isEmpty, "recognised, not paired again: \(read.stdout)")
        let bond = try XCTUnwrap(try bonds("a").first { $0["identity"] as? String == peer }, "the bond is the peer's identity")
        XCTAssertEqual(bond["keyEncryptions"] as? Int, 1, "encrypted once with the key it gave us: \(bond)")
        XCTAssertEqual((bond["lastKeyEncryption"] as? [String: Any])?["outcome"] as? String, "encrypted", "\(bond)")
    }

    /// LE legacy pairing with a peer that has no Secure Connections, through `beryl up` stacks: the peripheral hands over
    /// its LTK with EDIV and Rand, and after `beryl down` and `beryl up` of both stacks the central encrypts with them.
    func testLegacyPairingAcrossWholeStackRestarts() throws {
        func up(_ side: String, controller: Int, _ extra: [String] = []) throws {
            let started = try runTool("beryl", ["up", "--runtime-dir", run(side), "--state-dir", state(side),
                                                "--transport", "unix:\(simDir)/controller-\(controller).sock"] + extra)
            XCTAssertEqual(started.status, 0, started.stderr)
        }
        func down(_ side: String) throws { XCTAssertEqual(try runTool("beryl", ["down", "--runtime-dir", run(side)]).status, 0) }
        defer {
            _ = try? runTool("beryl", ["down", "--runtime-dir", run("a")])
            _ = try? runTool("beryl", ["down", "--runtime-dir", run("b")])
        }
        try up("a", controller: 0)
        try up("b", controller: 1, ["--attd-arg", "--legacy-pairing"])
        let peer = try serve()
        let first = try gatt(["--peer", peer, "read", Self.secret])
        XCTAssertEqual(first.status, 0, first.stderr)
        XCTAssertEqual(pairings(first).first?["secureConnections"] as? Bool, false, first.stdout)
        XCTAssertEqual(try bonds("a").first?["secureConnections"] as? Bool, false)

        kill(try XCTUnwrap(scratch.pid(of: "serve")), SIGTERM)
        try down("a")
        try down("b")
        try up("a", controller: 0)
        try up("b", controller: 1, ["--attd-arg", "--legacy-pairing"])
        _ = try serve(name: "serve-again")
        XCTAssertEqual(try bonds("b").count, 1, "bonds survive the whole stack's restart")
        let again = try gatt(["--peer", peer, "read", Self.secret])
        XCTAssertEqual(again.status, 0, again.stderr)
        XCTAssertTrue(pairings(again).isEmpty, again.stdout)
        XCTAssertTrue(eventually { self.encryptedWithBond }, serveLog)
    }

    /// Passkey entry on both keyboards: the same passkey pairs (authenticated); a different one fails with Confirm Value
    /// Failed on both sides, and trying again at once meets the peripheral's Repeated Attempts.
    func testPasskeyEntryAndAWrongPasskey() throws {
        try startStack("a", controller: 0, attd: ["--io-capability", "keyboard-only"])
        try startStack("b", controller: 1, attd: ["--io-capability", "keyboard-only"])
        let peer = try serve(["--passkey", "123456"])

        let wrong = try runTool("beryl", ["pair", "--runtime-dir", run("a"), "--peer", peer, "--passkey", "654321", "--timeout", "30", "--json"])
        XCTAssertNotEqual(wrong.status, 0)
        XCTAssertEqual(smpFailure(wrong), [0x04: true], "the typed reason travels: \(wrong.stdout) \(wrong.stderr)")
        // Confirm Value Failed (Core Vol 3 Part H §3.5.5), sent by the peripheral, whose confirm did not match.
        XCTAssertTrue(eventually { self.served("pairing-failed").contains { $0["reason"] as? Int == 0x04 && $0["endedByPeer"] as? Bool == false } },
                      serveLog)
        let tooSoon = try runTool("beryl", ["pair", "--runtime-dir", run("a"), "--peer", peer, "--passkey", "123456", "--timeout", "30", "--json"])
        XCTAssertNotEqual(tooSoon.status, 0)
        // Repeated Attempts (Core Vol 3 Part H §3.5.5).
        XCTAssertEqual(smpFailure(tooSoon), [0x09: true], "the verifier keeps the wait: \(tooSoon.stdout) \(tooSoon.stderr)")
        XCTAssertEqual(try bonds("a").count, 0)

        sleep(3)
        let right = try runTool("beryl", ["pair", "--runtime-dir", run("a"), "--peer", peer, "--passkey", "123456", "--timeout", "30", "--json"])
        XCTAssertEqual(right.status, 0, right.stderr)
        XCTAssertEqual(JSONLines.events("paired", in: right.stdout).first?["authenticated"] as? Bool, true, right.stdout)
        XCTAssertEqual(try bonds("a").first?["authenticated"] as? Bool, true)
    }

    /// Keys that differ (the peripheral's bond tampered with) end the link with a MIC failure from berylsim; the
    /// central's bond is left whole.
    func testAKeyMismatchEndsTheLinkWithMICFailure() throws {
        try startStack("a", controller: 0)
        try startStack("b", controller: 1)
        let peer = try serve()
        XCTAssertEqual(try gatt(["--peer", peer, "read", Self.secret]).status, 0)
        let before = try bonds("a")

        let pid = try XCTUnwrap(scratch.pid(of: "attd-b"))
        kill(pid, SIGKILL)
        XCTAssertTrue(eventually { kill(pid, 0) != 0 || Spawn.reap(pid) != nil })
        let store = try SQLiteDatabase(path: state("b") + "/bonds.sqlite")
        try store.execute("UPDATE bonds SET local_ltk = ?", [.blob([UInt8](repeating: 0x5A, count: 16))])
        try? FileManager.default.removeItem(atPath: run("b") + "/attd.sock")
        try startAttd("b", [])
        _ = try serve(name: "serve-again")

        let failed = try gatt(["--peer", peer, "read", Self.secret])
        XCTAssertNotEqual(failed.status, 0)
        // The read failed, not the connection and not by timing out: attd refused it (a typed code) or the link went
        // with Connection Terminated due to MIC Failure (0x3D).
        let failure = JSONLines.events("failed", in: failed.stdout)
        XCTAssertEqual(failure.map { $0["operation"] as? String }, ["read"], failed.stdout + failed.stderr)
        XCTAssertNil(failure.first?["timedOut"], failed.stdout)
        XCTAssertTrue(failure.first?["code"] is Int || failure.first?["disconnectReason"] as? Int == 0x3D, failed.stdout)
        // The central encrypted with its stored key, and the link went down with Connection Terminated due to MIC
        // Failure before encryption was on, not for some other reason.
        let after = try bonds("a")
        XCTAssertEqual(after.first?["keyEncryptions"] as? Int, 1, "\(after)")
        let last = try XCTUnwrap(after.first?["lastKeyEncryption"] as? [String: Any], "\(after)")
        XCTAssertEqual(last["outcome"] as? String, "linkClosed")
        XCTAssertEqual(last["hciCode"] as? Int, 0x3D)
        XCTAssertEqual(after.count, before.count, "the central's bond is untouched")
    }

    /// kill -9 in the middle of bond writes leaves every bond whole: all its keys from one version.
    func testBondStoreSurvivesKillDuringWrites() throws {
        let path = scratch.root + "/churn.sqlite"
        for round in 0..<15 {
            let pid = try Spawn.start([Executables.path("beryl"), "bonds", "churn", "--path", path], logPath: scratch.root + "/churn.log")
            usleep(UInt32(30_000 + (round * 17_389) % 120_000))
            kill(pid, SIGKILL)
            _ = eventually { Spawn.reap(pid) != nil }
            let store = try BondStore(path: path)
            XCTAssertEqual(try store.integrityCheck(), "ok")
            for bond in try store.bonds() {
                let version = try XCTUnwrap(bond.peerLTK?.first)
                XCTAssertEqual(bond.irk, [UInt8](repeating: version, count: 16), "round \(round): torn bond \(bond)")
                XCTAssertEqual(bond.localLTK, bond.peerLTK)
                XCTAssertEqual(bond.csrk, bond.peerLTK)
                XCTAssertEqual(bond.peerRand, [UInt8](repeating: version, count: 8))
                XCTAssertEqual(bond.authenticated, version % 2 == 0)
            }
        }
        XCTAssertEqual(try BondStore(path: path).bonds().count, 4)
    }
}

/// The GATT benchmark runs end to end: every figure it prints comes from traffic that crossed berylsim, and the
/// receivers' checks (sequence, loss) are in the figures.
final class GATTBenchmarkSmokeTests: XCTestCase {
    struct Notifications: Decodable {
        var valueBytes: Int
        var perSecond: Double
        var sent: Int
        var lost: Int
        var outOfOrder: Int
        var cpuMicrosecondsPerNotification: [String: Double]
        var physicalLimitPerSecond: Double?
    }
    struct Reads: Decodable { var value: String; var count: Int; var p50Microseconds: Double }
    struct Side: Decodable { var link: String; var notifications: [Notifications]; var reads: [Reads] }
    struct Apps: Decodable {
        var link: String
        var notifications: [Notifications]
        var reads: [Reads]
        var memory: [String: [String: UInt64]]
    }
    struct Stacks: Decodable { var beryl: [Side] }
    struct Figures: Decodable { var stacks: Stacks; var apps: [Apps] }

    func testBenchGattMeasuresNotificationsAndReadsOnBothLinks() throws {
        let run = try runTool("beryl", ["bench", "gatt", "--no-bumble", "--apps", "--seconds", "0.5", "--reads", "10", "--json"])
        XCTAssertEqual(run.status, 0, run.stderr)
        let figures = try JSONDecoder().decode(Figures.self, from: Data(run.stdout.utf8))
        XCTAssertEqual(figures.stacks.beryl.map(\.link), ["instant", "airTime"])
        XCTAssertEqual(figures.apps.map(\.link), ["instant", "airTime"])
        let sides = figures.stacks.beryl.map { ($0.link, $0.notifications, $0.reads) } + figures.apps.map { ($0.link, $0.notifications, $0.reads) }
        for (link, notifications, reads) in sides {
            XCTAssertEqual(notifications.map(\.valueBytes), [20, 244])
            for row in notifications {
                XCTAssertGreaterThan(row.perSecond, 10, "\(link) \(row)")
                // Every value the stack accepted arrived, in the order sent.
                XCTAssertEqual(row.lost, 0, "\(link) \(row)")
                XCTAssertEqual(row.outOfOrder, 0, "\(link) \(row)")
                XCTAssertGreaterThan(row.cpuMicrosecondsPerNotification["berylsim"] ?? 0, 0, "\(link) \(row)")
                // The air-time model's rows say what the radio allows, and stay under it.
                if link == "airTime" {
                    let limit = try XCTUnwrap(row.physicalLimitPerSecond)
                    XCTAssertLessThanOrEqual(row.perSecond, limit * 1.05, "\(row)")
                } else {
                    XCTAssertNil(row.physicalLimitPerSecond)
                }
            }
            XCTAssertEqual(reads.map(\.value), ["static", "dynamic"])
            for read in reads {
                XCTAssertEqual(read.count, 10)
                XCTAssertGreaterThan(read.p50Microseconds, 0)
            }
        }
        XCTAssertGreaterThan(figures.apps[0].memory["central managerd rss"]?["idle"] ?? 0, 1_000_000)
        XCTAssertNotNil(figures.apps[0].notifications[0].cpuMicrosecondsPerNotification["peripheral managerd"])
    }
}
