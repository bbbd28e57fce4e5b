import BerylCore
import BerylCrypto
import BerylSMP
import BerylStore
import Foundation
import XCTest

final class BondStoreTests: XCTestCase {
    private var directory: String!

    override func setUp() {
        directory = NSTemporaryDirectory() + "beryl-bonds-\(UUID().uuidString)"
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    }

    override func tearDown() { try? FileManager.default.removeItem(atPath: directory) }

    private func sampleBond(_ text: String = "D0:00:00:00:00:02/random") -> Bond {
        Bond(identity: DeviceAddress(text)!, irk: SecureRandom.bytes(16), peerLTK: SecureRandom.bytes(16), localLTK: SecureRandom.bytes(16),
             localEDIV: 0x1234, localRand: SecureRandom.bytes(8), csrk: SecureRandom.bytes(16), authenticated: true, secureConnections: true)
    }

    func testBondsCCCDsAndTheLocalIRKSurviveReopening() throws {
        let path = directory + "/bonds.sqlite"
        var bond = sampleBond()
        bond.pairedFrom = DeviceAddress("F1:02:03:04:05:06/random")
        var irk: [UInt8] = []
        do {
            let store = try BondStore(path: path)
            irk = try store.localIRK()
            try store.save(bond)
            try store.saveClientState(bond.identity, configurations: [12: 1, 20: 2, 30: 0], features: [1])
            try store.addPendingServiceChange(bond.identity, 40...50)
            try store.addPendingServiceChange(bond.identity, 30...45)
            try store.saveClientState(DeviceAddress("11:11:11:11:11:11")!, configurations: [12: 1], features: [0])
        }
        let reopened = try BondStore(path: path)
        XCTAssertEqual(try reopened.localIRK(), irk, "the IRK is made once")
        XCTAssertEqual(try reopened.bonds(), [bond])
        let state = try reopened.clientState(bond.identity)
        XCTAssertEqual(state.configurations, [12: 1, 20: 2])
        XCTAssertEqual(state.features, [1])
        XCTAssertEqual(try reopened.clientState(DeviceAddress("11:11:11:11:11:11")!).configurations, [:], "no CCCDs kept for a peer without a bond")
        XCTAssertEqual(try reopened.takePendingServiceChange(bond.identity), 30...50)
        XCTAssertNil(try reopened.takePendingServiceChange(bond.identity))
        XCTAssertTrue(try reopened.remove(bond.identity))
        XCTAssertFalse(try reopened.remove(bond.identity))
        XCTAssertEqual(try reopened.clientState(bond.identity).configurations, [:], "CCCDs go with their bond")
        XCTAssertEqual(try reopened.integrityCheck(), "ok")
    }

    /// Data signing's state (Core Vol 3 Part C §10.4): our CSRK, the counter our next signed write uses (moved on
    /// before it is used, and kept), the last counter accepted from the peer; a new pairing starts both over.
    func testSignCountersSurviveReopeningAndANewPairingStartsThemOver() throws {
        let path = directory + "/bonds.sqlite"
        var bond = sampleBond()
        bond.localCSRK = SecureRandom.bytes(16)
        do {
            let store = try BondStore(path: path)
            try store.save(bond)
            XCTAssertEqual(try store.takeLocalSignCounter(bond.identity), 0)
            XCTAssertEqual(try store.takeLocalSignCounter(bond.identity), 1)
            XCTAssertNil(try store.peerSignCounter(bond.identity))
            try store.setPeerSignCounter(bond.identity, 41)
            XCTAssertNil(try store.takeLocalSignCounter(DeviceAddress("11:11:11:11:11:11")!), "no bond, no counter")
        }
        let reopened = try BondStore(path: path)
        XCTAssertEqual(try reopened.bonds(), [bond], "the local CSRK is kept")
        XCTAssertEqual(try reopened.takeLocalSignCounter(bond.identity), 2)
        XCTAssertEqual(try reopened.peerSignCounter(bond.identity), 41)
        try reopened.save(bond)
        XCTAssertEqual(try reopened.takeLocalSignCounter(bond.identity), 0)
        XCTAssertNil(try reopened.peerSignCounter(bond.identity))
    }

    /// Our GATT client's note of where the bonded peer's Service Changed is: kept across reopening, nothing for an
    /// identity without a bond, and gone with a new pairing (the peer's database may be another).
    func testThePeersServiceChangedHandleSurvivesReopeningAndGoesWithANewPairing() throws {
        let path = directory + "/bonds.sqlite"
        let bond = sampleBond()
        do {
            let store = try BondStore(path: path)
            try store.save(bond)
            XCTAssertNil(try store.peerServiceChanged(bond.identity))
            try store.setPeerServiceChanged(bond.identity, 0x0009)
            let stranger = DeviceAddress("11:11:11:11:11:11")!
            try store.setPeerServiceChanged(stranger, 0x0003)
            XCTAssertNil(try store.peerServiceChanged(stranger), "no bond, nothing kept")
        }
        let reopened = try BondStore(path: path)
        XCTAssertEqual(try reopened.peerServiceChanged(bond.identity), 0x0009)
        try reopened.save(bond)
        XCTAssertNil(try reopened.peerServiceChanged(bond.identity))
    }

    func testABondIsRecognisedAtItsPrivateAddresses() throws {
        var bond = sampleBond("11:22:33:44:55:66")
        let staticAddress = DeviceAddress("F1:02:03:04:05:06/random")!
        XCTAssertFalse(bond.matches(staticAddress))
        bond.pairedFrom = staticAddress
        XCTAssertTrue(bond.matches(staticAddress), "a peer with a public identity that paired from a static random address")
        let rpa = try AddressResolution.make(irk: try XCTUnwrap(bond.irk))
        XCTAssertTrue(bond.matches(DeviceAddress(rpa, type: .random)))
        XCTAssertTrue(bond.matches(bond.identity))
        XCTAssertFalse(bond.matches(DeviceAddress(rpa, type: .public)), "a public address is never resolved")
        XCTAssertFalse(bond.matches(DeviceAddress(try AddressResolution.make(irk: SecureRandom.bytes(16)), type: .random)))
    }

    /// Core Vol 3 Part H §2.4.2: which stored key answers the controller's LTK request.
    func testTheKeyForAnLTKRequestFollowsTheBondsKind() {
        let secure = sampleBond()
        XCTAssertEqual(secure.localKey(ediv: 0, rand: [UInt8](repeating: 0, count: 8)), secure.localLTK)
        XCTAssertNil(secure.localKey(ediv: 1, rand: [UInt8](repeating: 0, count: 8)))
        var legacy = sampleBond()
        legacy.secureConnections = false
        XCTAssertEqual(legacy.localKey(ediv: legacy.localEDIV, rand: legacy.localRand), legacy.localLTK)
        XCTAssertNil(legacy.localKey(ediv: 0, rand: [UInt8](repeating: 0, count: 8)), "EDIV and Rand we never handed out")
    }

    func testARowWithABadKeyIsATypedError() throws {
        let path = directory + "/bonds.sqlite"
        let store = try BondStore(path: path)
        try store.save(sampleBond())
        let raw = try SQLiteDatabase(path: path)
        try raw.execute("UPDATE bonds SET peer_ltk = x'0102'")
        XCTAssertThrowsError(try store.bonds()) { error in
            guard case .corruptRow(let why)? = error as? BondStoreError else { return XCTFail("\(error)") }
            XCTAssertTrue(why.contains("peer LTK"), why)
        }
    }

    func testAFileThatIsNotADatabaseIsATypedError() throws {
        let path = directory + "/bonds.sqlite"
        try Data("not a database at all, just text".utf8).write(to: URL(fileURLWithPath: path))
        XCTAssertThrowsError(try BondStore(path: path)) { XCTAssertNotNil($0 as? BondStoreError) }
    }
}
