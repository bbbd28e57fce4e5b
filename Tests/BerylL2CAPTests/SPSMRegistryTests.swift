import BerylL2CAP
import XCTest

/// Who listens on which SPSM (Core Vol 3 Part A §4.22: fixed 0x0001–0x007F, dynamic 0x0080–0x00FF).
final class SPSMRegistryTests: XCTestCase {
    func testDynamicSPSMsAreHandedOutInTurnNotReusedAtOnce() {
        var registry = SPSMRegistry()
        XCTAssertEqual(registry.publish(for: 1, security: .none), .success(0x80))
        XCTAssertEqual(registry.publish(for: 2, security: .encryption), .success(0x81))
        XCTAssertTrue(registry.unpublish(0x80, by: 1))
        XCTAssertEqual(registry.publish(for: 3, security: .none), .success(0x82), "0x80 was just given up: a peer may still have it cached")
        XCTAssertEqual(registry.listener(0x81), .init(spsm: 0x81, security: .encryption))
        XCTAssertEqual(registry.owner(of: 0x82), 3)
        XCTAssertFalse(registry.unpublish(0x81, by: 1), "only its owner unpublishes it")
    }

    func testAll128DynamicSPSMsAndThenNone() {
        var registry = SPSMRegistry()
        for index in 0..<128 {
            guard case .success(let spsm) = registry.publish(for: 1, security: .none) else { return XCTFail("SPSM \(index)") }
            XCTAssertTrue(SPSMRegistry.dynamicSPSMs.contains(spsm))
        }
        XCTAssertEqual(registry.publish(for: 2, security: .none), .failure(.exhausted))
        XCTAssertTrue(registry.unpublish(0xC0, by: 1))
        XCTAssertEqual(registry.publish(for: 2, security: .none), .success(0xC0), "wrapping round to the one free")
    }

    func testFixedSPSMsAreTheirOwnersAndAnOwnerGoingFreesAll() {
        var registry = SPSMRegistry()
        XCTAssertEqual(registry.publish(fixed: 0x25, for: 1, security: .encryption), .success(0x25))
        XCTAssertEqual(registry.publish(fixed: 0x25, for: 2, security: .none), .failure(.inUse(0x25)))
        XCTAssertEqual(registry.publish(fixed: 0x80, for: 2, security: .none), .failure(.outOfRange(0x80)))
        XCTAssertEqual(registry.publish(fixed: 0x00, for: 2, security: .none), .failure(.outOfRange(0x00)))
        _ = registry.publish(for: 1, security: .none)
        _ = registry.publish(for: 2, security: .none)
        registry.setAuthorized(false, for: 1)
        XCTAssertEqual(registry.listener(0x25)?.authorized, false)
        XCTAssertEqual(registry.listener(0x81)?.authorized, true)
        XCTAssertEqual(registry.ownerGone(1), [0x25, 0x80])
        XCTAssertEqual(registry.published, [0x81])
    }
}
