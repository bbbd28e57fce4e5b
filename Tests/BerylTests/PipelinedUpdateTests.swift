import Beryl
import BerylDaemonKit
import BerylSupervisor
import BerylTestSupport
import BerylWire
import Dispatch
import Foundation
import Synchronization
import XCTest

/// updateValue pipelines (values leave without waiting for one another's answers): four apps on one stack flood one
/// central at once on berylsim's default link. Their 4 × 16 values on their way exceed what attd holds for the link
/// (its 32-PDU outbox and the controller buffers hcid credits), so attd refuses, holds back and readies each app on
/// its own; every value still arrives once and in order.
final class PipelinedUpdateTests: TwoStacksTestCase {
    func testFourAppsFloodingOneCentralLoseAndReorderNothing() async throws {
        let apps = floodUUIDs.map { Flooder($0) }
        let (managers, central, collector) = try await publishAndSubscribe(apps)
        await flood(managers, apps, collector, 0..<300)

        // The peripheral's controller goes (hcid killed and started again) while attd stays, with its count of each
        // app's ReadyToUpdate: the apps start counting afresh, and so must attd, or their values would be refused as
        // sent before a ReadyToUpdate for ever.
        let run = "\(scratch.root)/run1"
        let beforeCrash = apps.map { $0.recorder.all.count }
        try scratch.crash("hcid1", socket: run + "/hcid.sock")
        for (app, before) in zip(apps, beforeCrash) {
            XCTAssertTrue(eventually { app.recorder.all.dropFirst(before).contains { $0.hasPrefix("state ") && $0 != "state poweredOn" } })
        }
        let heard = apps.map { $0.recorder.all.count }
        try scratch.start("hcid1-again", [Executables.path("hcid"), "--runtime-dir", run, "--state-dir", "\(scratch.root)/state1",
                                          "--transport", "unix:\(scratch.root)/sim/controller-1.sock"], socket: run + "/hcid.sock")
        for (app, before) in zip(apps, heard) {
            XCTAssertTrue(eventually(.seconds(15)) { app.recorder.all.dropFirst(before).contains("state poweredOn") }, "\(app.recorder.all)")
        }
        XCTAssertTrue(eventually(.seconds(15)) { collector.recorder.all.contains { $0.hasPrefix("disconnected") } }, "\(collector.recorder.all)")
        try await publish(managers, apps)
        try await subscribe(central, collector, apps)
        await flood(managers, apps, collector, 300..<500)
        withExtendedLifetime((managers, central)) {}
    }

    /// Indications go one at a time (each confirmed before the next), so the four apps outrun the link at once: attd
    /// keeps at most 32 waiting per link and refuses the rest, and every value still arrives once and in order.
    func testFourAppsIndicatingToOneCentralLoseAndReorderNothing() async throws {
        let apps = floodUUIDs.map { Flooder($0, properties: .indicate) }
        let (managers, central, collector) = try await publishAndSubscribe(apps)
        await flood(managers, apps, collector, 0..<80)
        withExtendedLifetime((managers, central)) {}
    }
}

/// The same floods on berylsim's instant link (delivery and buffer return at once, 27-byte × 64 controller buffers, as
/// the benchmark runs), where the host alone bounds the rate: 20- and 244-byte values, notified and indicated, each
/// once and in order.
final class PipelinedUpdateInstantLinkTests: TwoStacksTestCase {
    override var simArguments: [String] { ["--link", "instant", "--acl-buffers", "27:64"] }

    private func floodBothLengths(_ properties: CharacteristicProperties, count: Int) async throws {
        let apps = floodUUIDs.map { Flooder($0, properties: properties) }
        let (managers, central, collector) = try await publishAndSubscribe(apps)
        let long = min(244, apps[0].maximumLength.load(ordering: .relaxed))
        XCTAssertEqual(long, 244, "the central's ATT_MTU takes 244-byte values")
        // On this link the host is the bound, so whether updateValue ever says false depends on the machine.
        await flood(managers, apps, collector, 0..<count, length: 20, mustBeRefused: false)
        await flood(managers, apps, collector, count..<2 * count, length: long, mustBeRefused: false)
        XCTAssertEqual(collector.lengths.withLock { $0 }, [20, long], "values arrive whole")
        withExtendedLifetime((managers, central)) {}
    }

    func testNotificationsOf20And244BytesLoseAndReorderNothing() async throws {
        try await floodBothLengths(.notify, count: 300)
    }

    func testIndicationsOf20And244BytesLoseAndReorderNothing() async throws {
        try await floodBothLengths(.indicate, count: 80)
    }

    /// An app's values go to attd on its data channel while it is in the foreground and through managerd otherwise (its
    /// grant revoked): four apps flooding, each sent to the background and back between floods and during them, still
    /// have every value arrive once and in order (a value leaves one way only while none is on its way the other).
    func testValuesKeepTheirOrderWhileTheirAppsLeaveTheForegroundAndComeBack() async throws {
        let apps = floodUUIDs.map { Flooder($0) }
        let ids = floodUUIDs.map { "com.example.flooder.\($0)" }
        let (managers, central, collector) = try await publishAndSubscribe(apps, appIDs: ids)
        await floodWhileTheAppsLeaveTheForegroundAndComeBack(ids, managerd: socket(1)) {
            await flood(managers, apps, collector, $0, mustBeRefused: false)
        }
        let attd = try IPCClient(path: "\(scratch.root)/run1/attd.sock")
        let counters = try attd.call(.with { $0.getStatus = .init() }).status.dataPlane
        XCTAssertGreaterThan(counters.channelValues, 0, "values went on the data channels: \(counters)")
        XCTAssertGreaterThan(counters.publisherValues, 0, "and through managerd while their apps were in the background: \(counters)")
        XCTAssertEqual(counters.channels, 4)
        withExtendedLifetime((managers, central)) {}
    }
}
