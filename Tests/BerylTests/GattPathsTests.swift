@testable import Beryl
import XCTest

/// Which way a central app's GATT requests go (GattPaths): the data channel while live, managerd otherwise, never
/// both at once, and a request the grant refused goes again through managerd ahead of what followed it.
final class GattPathsTests: XCTestCase {
    private typealias Paths = GattPaths<String>

    func testReadsAndWritesTakeTheDataChannelWhileItIsLiveAndTheRestManagerd() {
        var paths = Paths()
        XCTAssertEqual(paths.send("read 1", dataCapable: true, live: true), .dataChannel)
        XCTAssertEqual(paths.send("read 2", dataCapable: true, live: true), .dataChannel)
        XCTAssertNil(paths.send("discover", dataCapable: false, live: true), "waits until nothing is on the data channel")
        XCTAssertNil(paths.send("read 3", dataCapable: true, live: true), "and what follows waits behind it")
        XCTAssertTrue(paths.answered(on: .dataChannel, live: true).isEmpty)
        let going = paths.answered(on: .dataChannel, live: true)
        XCTAssertEqual(going.map(\.request), ["discover", "read 3"])
        XCTAssertEqual(going.map(\.way), [.managerd, .managerd], "read 3 keeps behind the discovery, through managerd")
        XCTAssertEqual(paths.send("read 4", dataCapable: true, live: true), .managerd, "until managerd has answered")
        _ = paths.answered(on: .managerd, live: true)
        _ = paths.answered(on: .managerd, live: true)
        _ = paths.answered(on: .managerd, live: true)
        XCTAssertEqual(paths.send("read 5", dataCapable: true, live: true), .dataChannel, "then the data channel again")
        XCTAssertEqual(paths.send("read 6", dataCapable: true, live: false), .dataChannel,
                       "while one is on the data channel, even revoked: it will be refused and sent again in turn")
    }

    func testARefusedRequestGoesAgainThroughManagerdAheadOfWhatFollowedIt() {
        var paths = Paths()
        _ = paths.send("write 1", dataCapable: true, live: true)
        _ = paths.send("write 2", dataCapable: true, live: true)
        XCTAssertEqual(paths.answered(on: .dataChannel, refused: "write 1", live: false).map(\.request), ["write 1"])
        XCTAssertNil(paths.send("write 3", dataCapable: true, live: false), "waits: write 2 may come back refused too")
        let going = paths.answered(on: .dataChannel, refused: "write 2", live: false)
        XCTAssertEqual(going.map(\.request), ["write 2", "write 3"], "in the order the app made them")
        XCTAssertEqual(going.map(\.way), [.managerd, .managerd])
        XCTAssertEqual(paths.onDataChannel, 0)
        XCTAssertEqual(paths.throughManagerd, 3)
        XCTAssertEqual(paths.waiting, 0)
    }

    func testWithoutALiveChannelEverythingGoesThroughManagerd() {
        var paths = Paths()
        XCTAssertEqual(paths.send("read", dataCapable: true, live: false), .managerd)
        XCTAssertEqual(paths.send("subscribe", dataCapable: false, live: false), .managerd)
        XCTAssertEqual(paths.send("read", dataCapable: true, live: true), .managerd, "a channel turning live waits until managerd answered")
    }
}
