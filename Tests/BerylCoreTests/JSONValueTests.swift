import BerylCore
import Foundation
import XCTest

/// The JSON reader behind adapter profiles and app manifests, in place of JSONSerialization's NSNumber casts.
final class JSONValueTests: XCTestCase {
    private func parse(_ text: String) throws -> JSONValue { try JSONValue.parse(Data(text.utf8)) }

    func testEveryKindReadsBackAsItself() throws {
        let value = try parse(#"{"s": "x", "t": true, "n": 2.5, "i": 7, "z": null, "a": ["p", "q"], "o": {"k": false}}"#)
        let object = try XCTUnwrap(value.object)
        XCTAssertEqual(object["s"]?.string, "x")
        XCTAssertEqual(object["t"]?.bool, true)
        XCTAssertEqual(object["n"]?.double, 2.5)
        XCTAssertEqual(object["i"]?.int, 7)
        XCTAssertEqual(object["z"], .null)
        XCTAssertEqual(object["a"]?.strings, ["p", "q"])
        XCTAssertEqual(object["o"]?.object?["k"]?.bool, false)
    }

    /// NSNumber let `true as? Int` and `1 as? Bool` through; a profile's `"maxACLBuffers": true` is now refused.
    func testABooleanIsNoNumberAndAFractionIsNoInt() throws {
        XCTAssertNil(try parse("true").int)
        XCTAssertNil(try parse("true").double)
        XCTAssertNil(try parse("1").bool)
        XCTAssertNil(try parse("1.5").int)
        XCTAssertEqual(try parse("3.0").int, 3)
        XCTAssertNil(try parse("1e300").int, "past what a Double holds exactly")
        XCTAssertNil(try parse(#"["a", 1]"#).strings, "strings only for an all-string array")
    }

    func testWhatIsNotJSONIsAnErrorNotACrash() {
        // (FoundationEssentials' reader takes a trailing comma, "[1,]", as JSONSerialization did not.)
        for text in ["", "{", #"{"a": }"#, "[1 2]", "\u{0}"] {
            XCTAssertThrowsError(try parse(text), text)
        }
    }
}
