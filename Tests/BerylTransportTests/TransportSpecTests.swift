import BerylTransport
import XCTest

final class TransportSpecTests: XCTestCase {
    func testEveryTransportFormParses() throws {
        XCTAssertEqual(try TransportSpec(parsing: "userchannel:hci1"), .userChannel(device: 1))
        XCTAssertEqual(try TransportSpec(parsing: "uart:/dev/ttyAMA0,baud=3000000,flow"),
                       .uart(path: "/dev/ttyAMA0", baud: 3_000_000, flowControl: true))
        XCTAssertEqual(try TransportSpec(parsing: "uart:/dev/ttyUSB0"), .uart(path: "/dev/ttyUSB0", baud: 115_200, flowControl: true))
        XCTAssertEqual(try TransportSpec(parsing: "uart:/dev/ttyS0,noflow"), .uart(path: "/dev/ttyS0", baud: 115_200, flowControl: false))
        XCTAssertEqual(try TransportSpec(parsing: "tcp:127.0.0.1:9000"), .tcp(host: "127.0.0.1", port: 9000))
        XCTAssertEqual(try TransportSpec(parsing: "tcp:[::1]:9000"), .tcp(host: "[::1]", port: 9000))
        XCTAssertEqual(try TransportSpec(parsing: "unix:/tmp/sim/controller-0.sock"), .unix(path: "/tmp/sim/controller-0.sock"))
        XCTAssertEqual(try TransportSpec(parsing: "uart:/dev/ttyS0,noflow").description, "uart:/dev/ttyS0,baud=115200,noflow")
    }

    func testBadSpecsSayWhatIsWrong() {
        let cases: [(String, TransportSpecError)] = [
            ("hci0", .missingScheme("hci0")),
            ("usb:0a12:0001", .unknownScheme("usb")),
        ]
        for (text, expected) in cases {
            XCTAssertThrowsError(try TransportSpec(parsing: text)) { XCTAssertEqual($0 as? TransportSpecError, expected) }
        }
        for text in ["userchannel:hciX", "userchannel:0", "uart:ttyAMA0", "uart:/dev/ttyS0,baud=12345", "uart:/dev/ttyS0,parity",
                     "tcp:localhost", "tcp:localhost:0", "tcp:localhost:70000", "tcp::9000", "unix:relative.sock"] {
            XCTAssertThrowsError(try TransportSpec(parsing: text), text) { error in
                guard case .invalid(let spec, _)? = error as? TransportSpecError else { return XCTFail("\(text): \(error)") }
                XCTAssertEqual(spec, text)
            }
        }
    }
}
