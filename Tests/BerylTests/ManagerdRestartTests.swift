import Beryl
import BerylDaemonKit
import BerylSupervisor
import BerylTestSupport
import BerylWire
import Dispatch
import Foundation
import Synchronization
import XCTest

/// Four apps send numbered values without end until told to stop; each says how far it got.
private final class EndlessFlood: Sendable {
    private let stopped = Atomic<Bool>(false)
    private let reached = Mutex<[Int]>([])
    private let failures = Recorder()
    private let group = DispatchGroup()

    init(_ managers: [PeripheralManager], _ apps: [Flooder], from start: Int) {
        reached.withLock { $0 = Array(repeating: start, count: apps.count) }
        for (index, (manager, app)) in zip(managers, apps).enumerated() {
            DispatchQueue.global().async(group: group) { [self] in
                var next = start
                while !stopped.load(ordering: .relaxed) {
                    guard app.flood(manager, next..<next + 10, length: 20) else { return failures.note("no peripheralManagerIsReady within 10 s") }
                    next += 10
                    reached.withLock { $0[index] = next }
                }
            }
        }
    }

    /// Stops the apps; where each one stopped, and what went wrong.
    func stop() -> (reached: [Int], failures: [String]) {
        stopped.store(true, ordering: .relaxed)
        _ = group.wait(timeout: .now() + 30)
        return (reached.withLock { $0 }, failures.all)
    }
}

/// managerd is the control plane: killed while apps' values flow on their data channels, the values keep flowing —
/// none lost, none twice, none out of order — and its successor adopts each channel with what the app had
/// (att.proto's AdoptDataChannel), so that the apps hear nothing of the restart and their managers go on working.
final class ManagerdRestartTests: TwoStacksTestCase {
    private func counters(_ side: Int) throws -> Beryl_Ipc_V1_DataPlaneCounters {
        try IPCClient(path: "\(scratch.root)/run\(side)/attd.sock").call(.with { $0.getStatus = .init() }).status.dataPlane
    }

    /// kill -9 managerd on one side while the flood runs; values must still arrive while it is away; then its
    /// successor starts and must adopt all four channels.
    private func restartManagerdDuringTheFlood(side: Int, _ collector: Collector) throws {
        let run = "\(scratch.root)/run\(side)"
        usleep(300_000)
        try scratch.crash("managerd\(side)", socket: run + "/managerd.sock")
        let heardAtTheKill = floodUUIDs.map { collector.received($0).count }
        XCTAssertTrue(eventually(.seconds(10)) { zip(self.floodUUIDs, heardAtTheKill).allSatisfy { collector.received($0).count > $1 + 50 } },
                      "values keep arriving while managerd is away: \(floodUUIDs.map { collector.received($0).count }) after \(heardAtTheKill)")
        XCTAssertEqual(try counters(side).orphanedChannels, side == 1 ? 4 : 1, "attd keeps the channels managerd opened")
        try scratch.start("managerd\(side)-again", [Executables.path("managerd"), "--runtime-dir", run, "--state-dir", "\(scratch.root)/state\(side)"],
                          socket: run + "/managerd.sock")
        XCTAssertTrue(eventually(.seconds(10)) { (try? self.counters(side))?.adoptedChannels == (side == 1 ? 4 : 1) },
                      "the new managerd adopts them: \(String(describing: try? counters(side)))")
        XCTAssertEqual(try counters(side).orphanedChannels, 0)
        usleep(300_000)
    }

    private func expectEveryValueOnceAndInOrder(_ flood: EndlessFlood, _ collector: Collector) {
        let (reached, failures) = flood.stop()
        XCTAssertEqual(failures, [])
        XCTAssertTrue(eventually(.seconds(30)) { zip(self.floodUUIDs, reached).allSatisfy { collector.received($0).count >= $1 } },
                      "received \(floodUUIDs.map { collector.received($0).count }), sent up to \(reached)")
        for (uuid, end) in zip(floodUUIDs, reached) {
            let got = collector.received(uuid)
            let firstWrong = Array(zip(got, 0..<end)).firstIndex { $0 != $1 } ?? min(got.count, end)
            XCTAssertTrue(got == Array(0..<end), "app \(BluetoothUUID(uuid))'s values, once each and in order: \(got.count) of \(end), "
                          + "the first wrong at \(firstWrong): \(got.dropFirst(firstWrong).prefix(5))")
        }
    }

    func testPeripheralAppsValuesFlowThroughTheirManagerdsRestartAndItsSuccessorKnowsTheirServices() async throws {
        let apps = floodUUIDs.map { Flooder($0) }
        let ids = floodUUIDs.map { "com.example.kept.\($0)" }
        let (managers, central, collector) = try await publishAndSubscribe(apps, appIDs: ids)
        await flood(managers, apps, collector, 0..<50, mustBeRefused: false)
        let heardBefore = apps.map { $0.recorder.all }

        let endless = EndlessFlood(managers, apps, from: 50)
        try restartManagerdDuringTheFlood(side: 1, collector)
        expectEveryValueOnceAndInOrder(endless, collector)
        XCTAssertEqual(apps.map { $0.recorder.all }, heardBefore, "the apps heard nothing of the restart (no resetting, no subscription again)")
        XCTAssertFalse(collector.recorder.all.contains("disconnected"))

        // The successor knows the apps' services: in the background their values go through it, and arrive.
        let sent = floodUUIDs.map { collector.received($0).count }
        let throughManagerd = try counters(1).publisherValues
        XCTAssertTrue(Self.setAppState(ids, .background, managerd: socket(1)))
        await flood(managers, apps, collector, sent[0]..<sent[0] + 50, mustBeRefused: false)
        XCTAssertGreaterThan(try counters(1).publisherValues, throughManagerd, "through the new managerd, which owns their services")
        withExtendedLifetime((managers, central)) {}
    }

    func testNotificationsFlowToACentralAppThroughItsManagerdsRestartAndItsSuccessorKnowsItsSubscriptions() async throws {
        let apps = floodUUIDs.map { Flooder($0) }
        let (managers, central, collector) = try await publishAndSubscribe(apps)
        await flood(managers, apps, collector, 0..<50, mustBeRefused: false)
        let heardBefore = collector.recorder.all

        let endless = EndlessFlood(managers, apps, from: 50)
        try restartManagerdDuringTheFlood(side: 0, collector)
        expectEveryValueOnceAndInOrder(endless, collector)
        XCTAssertEqual(collector.recorder.all, heardBefore, "the central app heard nothing of the restart (no resetting, no disconnection)")

        // The successor knows the app holds the link and which values it hears: unsubscribing goes through it.
        let peripheral = try XCTUnwrap(collector.subscribed.withLock { $0 })
        XCTAssertEqual(peripheral.state, .connected)
        let characteristic = try XCTUnwrap(peripheral.services?.flatMap { $0.characteristics ?? [] }.first { $0.uuid == BluetoothUUID(floodUUIDs[0]) })
        peripheral.setNotifyValue(false, for: characteristic)
        XCTAssertTrue(eventually { collector.recorder.all.contains("notifying \(BluetoothUUID(self.floodUUIDs[0])) false") }, "\(collector.recorder.all)")
        withExtendedLifetime((managers, central)) {}
    }
}
