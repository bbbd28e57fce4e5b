@testable import Beryl
import BerylWire
import Synchronization
import XCTest

/// A long-running app hears hundreds of thousands of events: the closures that carry them must not grow with use (a
/// closure stored bare in a Mutex gained two thunks per delivery and overflowed the stack after about 130,000 events
/// on a main thread, 37,000 on a dispatch worker).
final class ClosureStorageTests: XCTestCase {
    func testTheEventRelayDeliversHalfAMillionEvents() {
        let relay = EventRelay()
        let delivered = Atomic<Int>(0)
        relay.bind { _ in delivered.add(1, ordering: .relaxed) }
        let event = Event()
        for _ in 0..<500_000 { relay.deliver(event) }
        XCTAssertEqual(delivered.load(ordering: .relaxed), 500_000)
    }

    func testAMisuseHandlerHearsHalfAMillionReports() {
        let reporter = MisuseReporter()
        let heard = Atomic<Int>(0)
        reporter.current = { _ in heard.add(1, ordering: .relaxed) }
        for _ in 0..<500_000 { reporter.report(.apiMisuse("again")) }
        XCTAssertEqual(heard.load(ordering: .relaxed), 500_000)
    }
}
