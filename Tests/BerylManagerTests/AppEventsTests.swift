import BerylManager
import XCTest

final class AppEventsTests: XCTestCase {
    func testAnAlertSaysWhatHappenedAndToWhom() {
        XCTAssertEqual(AlertKind.notification.message(appID: "com.example.watch", peripheral: "Lock"), "com.example.watch: notification from Lock")
        XCTAssertEqual(AlertKind.disconnection.message(appID: "com.example.watch", peripheral: "Lock"), "com.example.watch: disconnection of Lock")
        XCTAssertEqual(AlertKind(rawValue: "connection"), .connection, "the alert command's BERYL_ALERT reads back")
    }

    func testALaunchFailureNamesWhatWasNotRestored() {
        XCTAssertEqual(LaunchFailure.didNotRestore(restoreIDs: ["a", "b"], within: .seconds(2)).description, "did not restore a, b within 2.0 seconds")
        XCTAssertEqual(LaunchFailure.exitedWithoutRestoring(exit: "signal 9", restoreIDs: ["a"]).description, "exited (signal 9) without restoring a")
        XCTAssertNotEqual(LaunchFailure.couldNotStart(reason: "x"), LaunchFailure.exitedWithoutRestoring(exit: "x", restoreIDs: []))
    }
}
