import BerylCore
import BerylManager
import XCTest

/// A lab's factory reset as steps on virtual time: what each step asks, and what ends it.
final class LabResetTests: XCTestCase {
    func testLinksAreEndedFirstAndTheControllerIsResetWhenTheLastIsDown() throws {
        var reset = LabReset()
        XCTAssertEqual(try reset.start(keepBonds: false, links: [0x41, 0x40], at: .seconds(5)),
                       [.endLabWork, .removeLabBonds, .disconnect(handle: 0x40), .disconnect(handle: 0x41)])
        XCTAssertTrue(reset.isUnderWay)
        XCTAssertFalse(reset.isResettingController)
        XCTAssertEqual(reset.linkEnded(0x40, at: .seconds(5)), [])
        XCTAssertEqual(reset.linkEnded(0x77, at: .seconds(5)), [], "a link that was not waited for changes nothing")
        XCTAssertEqual(reset.linkEnded(0x41, at: .seconds(5)), [.resetController])
        XCTAssertTrue(reset.isResettingController, "apps stay poweredOn through it")
        XCTAssertNil(reset.nextDeadline)
        XCTAssertEqual(reset.controllerReset(failure: nil), [.forgetLabPeripherals, .finished(failure: nil)])
        XCTAssertFalse(reset.isUnderWay)
    }

    func testALinkThatDoesNotEndInTimeDoesNotHoldTheResetUp() throws {
        var reset = LabReset()
        XCTAssertEqual(try reset.start(keepBonds: true, links: [0x40], at: .seconds(5)), [.endLabWork, .disconnect(handle: 0x40)], "bonds kept")
        XCTAssertEqual(reset.nextDeadline, .seconds(6))
        XCTAssertEqual(reset.tick(at: .milliseconds(5_999)), [], "a timer firing early waits on")
        XCTAssertEqual(reset.tick(at: .seconds(6)), [.resetController])
        XCTAssertEqual(reset.tick(at: .seconds(7)), [], "asked once")
        XCTAssertEqual(reset.controllerReset(failure: nil), [.finished(failure: nil)], "identifiers are kept with the bonds")
    }

    func testNoLinksResetsAtOnceAndAFailedResetSaysWhy() throws {
        var reset = LabReset()
        XCTAssertEqual(try reset.start(keepBonds: false, links: [], at: .zero), [.endLabWork, .removeLabBonds, .resetController])
        XCTAssertThrowsError(try reset.start(keepBonds: false, links: [], at: .zero)) { XCTAssertEqual($0 as? LabReset.Refusal, .underWay) }
        XCTAssertEqual(reset.controllerReset(failure: "hcid is not attached"), [.finished(failure: "hcid is not attached")],
                       "nothing is forgotten after a reset that did not happen")
        XCTAssertEqual(reset.controllerReset(failure: nil), [], "an answer to no reset is ignored")
        XCTAssertNoThrow(try reset.start(keepBonds: true, links: [], at: .zero), "a reset may follow a failed one")
    }

    // An identifier the lab made known and an app now connects to, or waits for, outlives the reset.
    func testAResetForgetsOnlyWhatNoManagerStillWants() {
        var book = ConnectionBook()
        let app = ManagerKey(session: 5, manager: 1)
        _ = book.connect(app, identifier: "LINKED", address: DeviceAddress("C0:FF:EE:00:00:01/random")!)
        _ = book.connected(identifier: "LINKED", handle: 0x40, address: DeviceAddress("C0:FF:EE:00:00:01/random")!, isCentral: true)
        _ = book.connect(app, identifier: "AWAITED", address: DeviceAddress("C0:FF:EE:00:00:02/random")!)
        let (forget, keep) = LabReset.peripheralsToForget(["LINKED", "GONE", "AWAITED", "OTHER"], book: book)
        XCTAssertEqual(forget, ["GONE", "OTHER"])
        XCTAssertEqual(keep, ["LINKED", "AWAITED"])
    }
}
