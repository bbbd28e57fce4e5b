import BerylCore
import BerylStore
import Foundation
import XCTest

/// What a lab made, on disk: kept across restarts, never overwritten unread, and taken back without touching others.
final class LabRecordTests: XCTestCase {
    private var directory: String!

    override func setUpWithError() throws {
        directory = NSTemporaryDirectory() + "beryl-lab-record-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: directory)
    }

    func testARecordSurvivesReopeningAndKeepsEachEntryOnce() throws {
        let path = directory + "/lab.json"
        let file = try LabRecordFile(path: path)
        XCTAssertEqual(file.record, LabRecord(), "no file: nothing recorded")
        try file.update { $0.bonds += ["5A:00:00:00:00:02", "5A:00:00:00:00:02"]; $0.peripherals.append("p-1") }
        let reopened = try LabRecordFile(path: path)
        XCTAssertEqual(reopened.record, LabRecord(bonds: ["5A:00:00:00:00:02"], peripherals: ["p-1"]))
        try reopened.update { $0.peripherals.removeAll() }
        XCTAssertEqual(try LabRecordFile(path: path).record.peripherals, [])
    }

    func testTheFirstLabSessionsBondFileIsTakenIntoTheRecordOnce() throws {
        let legacy = directory + "/lab-bonds.json"
        try Data(#"["5A:00:00:00:00:07"]"#.utf8).write(to: URL(fileURLWithPath: legacy))
        let file = try LabRecordFile.open(stateDir: directory)
        XCTAssertEqual(file.record.bonds, ["5A:00:00:00:00:07"])
        XCTAssertFalse(FileManager.default.fileExists(atPath: legacy), "taken in, the old file goes")
        XCTAssertEqual(try LabRecordFile.open(stateDir: directory).record.bonds, ["5A:00:00:00:00:07"], "kept in lab.json")
    }

    func testADamagedRecordIsRefusedAndLeftAsItWas() throws {
        let path = directory + "/lab.json"
        let damaged = Data("{\"version\": 1, \"bonds\": [".utf8)
        try damaged.write(to: URL(fileURLWithPath: path))
        XCTAssertThrowsError(try LabRecordFile(path: path)) { error in
            guard case LabRecordFile.Failure.unreadable = error else { return XCTFail("\(error)") }
        }
        XCTAssertEqual(FileManager.default.contents(atPath: path), damaged)
    }

    func testARecordFromANewerManagerdIsRefused() throws {
        let path = directory + "/lab.json"
        try Data("{\"version\": 2, \"bonds\": [], \"peripherals\": []}".utf8).write(to: URL(fileURLWithPath: path))
        XCTAssertThrowsError(try LabRecordFile(path: path)) { error in
            guard case LabRecordFile.Failure.newerVersion(_, 2) = error else { return XCTFail("\(error)") }
        }
    }

    func testForgettingAPeripheralGivesItsAddressANewIdentifierAndLeavesOthers() throws {
        let path = directory + "/peripherals.sqlite"
        let labs = DeviceAddress("5A:00:00:00:00:02")!
        let apps = DeviceAddress("C0:FF:EE:00:00:02")!
        let store = try PeripheralStore(path: path)
        let forgotten = store.seen(labs, at: 1).identifier
        let kept = store.seen(apps, at: 1).identifier
        XCTAssertTrue(try store.forget(forgotten))
        XCTAssertFalse(try store.forget(forgotten), "only once")
        XCTAssertNil(store.device(forgotten))
        let reopened = try PeripheralStore(path: path)
        XCTAssertNil(reopened.device(forgotten), "forgotten on disk too")
        XCTAssertEqual(reopened.device(kept)?.address, apps)
        XCTAssertNotEqual(reopened.seen(labs, at: 2).identifier, forgotten)
    }
}
