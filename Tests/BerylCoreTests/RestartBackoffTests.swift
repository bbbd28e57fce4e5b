import BerylCore
import XCTest

final class RestartBackoffTests: XCTestCase {
    func testDoublesToTheCapAndResetsAfterAStableRun() {
        var backoff = RestartBackoff(initial: .milliseconds(100), maximum: .milliseconds(700), stableAfter: .seconds(10))
        let quick = Duration.milliseconds(50)
        XCTAssertEqual(backoff.delay(afterRunning: quick), .milliseconds(100))
        XCTAssertEqual(backoff.delay(afterRunning: quick), .milliseconds(200))
        XCTAssertEqual(backoff.delay(afterRunning: quick), .milliseconds(400))
        XCTAssertEqual(backoff.delay(afterRunning: quick), .milliseconds(700))
        XCTAssertEqual(backoff.delay(afterRunning: quick), .milliseconds(700))
        XCTAssertEqual(backoff.delay(afterRunning: .seconds(11)), .milliseconds(100))
        XCTAssertEqual(backoff.delay(afterRunning: quick), .milliseconds(200))
    }
}
