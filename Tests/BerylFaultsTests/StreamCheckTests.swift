@testable import BerylFaults
import XCTest

/// The streaming phase's verdict on what a subscriber took: order within an app run's epoch, gaps allowed unless the
/// fault is one no value may be lost to (kill -9 managerd).
final class StreamCheckTests: XCTestCase {
    private func line(epoch: UInt32, sequence: UInt32) -> String {
        let bytes = (0..<4).map { UInt8(truncatingIfNeeded: epoch >> (8 * $0)) } + (0..<4).map { UInt8(truncatingIfNeeded: sequence >> (8 * $0)) }
            + [UInt8](repeating: 0, count: 12)
        return #"{"event":"notification","uuid":"7E570003","value":""# + bytes.map { String(format: "%02x", $0) }.joined() + #""}"#
    }

    func testGapsAndANewEpochPassButARepeatAStepBackOrAnOldEpochDoNot() {
        let good = [line(epoch: 7, sequence: 0), line(epoch: 7, sequence: 1), line(epoch: 7, sequence: 40), line(epoch: 9, sequence: 0),
                    line(epoch: 9, sequence: 1)]
        let passed = StreamCheck(subscribeOutput: (#"{"event":"subscribed"}"# + "\n" + good.joined(separator: "\n")))
        XCTAssertEqual(passed.received, 5)
        XCTAssertEqual(passed.problems, [])

        XCTAssertEqual(StreamCheck(subscribeOutput: [line(epoch: 7, sequence: 3), line(epoch: 7, sequence: 3)].joined(separator: "\n")).problems,
                       ["sequence 3 after 3 in epoch 7"])
        XCTAssertEqual(StreamCheck(subscribeOutput: [line(epoch: 7, sequence: 3), line(epoch: 7, sequence: 2)].joined(separator: "\n")).problems,
                       ["sequence 2 after 3 in epoch 7"])
        XCTAssertEqual(StreamCheck(subscribeOutput: [line(epoch: 7, sequence: 3), line(epoch: 8, sequence: 0), line(epoch: 7, sequence: 4)]
            .joined(separator: "\n")).problems, ["epoch 7 came back after 8, at sequence 4"])
        XCTAssertEqual(StreamCheck(subscribeOutput: #"{"event":"notification","value":"0102"}"#).problems, ["a stream value of the wrong shape: 0102"])
    }

    func testAGaplessStreamRefusesALostValueAndANewEpoch() {
        let whole = [line(epoch: 7, sequence: 0), line(epoch: 7, sequence: 1), line(epoch: 7, sequence: 2)].joined(separator: "\n")
        XCTAssertEqual(StreamCheck(subscribeOutput: whole, gapless: true).problems, [])
        XCTAssertEqual(StreamCheck(subscribeOutput: [line(epoch: 7, sequence: 1), line(epoch: 7, sequence: 4)].joined(separator: "\n"), gapless: true).problems,
                       ["values 2–3 lost in epoch 7"])
        XCTAssertEqual(StreamCheck(subscribeOutput: [line(epoch: 7, sequence: 1), line(epoch: 9, sequence: 0)].joined(separator: "\n"), gapless: true).problems,
                       ["the stream started again (epoch 9 after 7)"])
    }
}
