import BerylIPC
import BerylTools
import Foundation
import XCTest

/// What `beryl serve --json` and the pairing events write: objects JSONSerialization takes whole (nested writes
/// included), each naming its event, with the fields a script needs and no parsing of the line for people.
final class ServeReportTests: XCTestCase {
    private func object(_ fields: [String: any Sendable]) throws -> [String: Any] {
        let data = try JSONSerialization.data(withJSONObject: fields as [String: Any], options: [.sortedKeys])
        return try XCTUnwrap(JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    func testEveryReportIsAJSONObjectNamingItsEvent() throws {
        var prompt = Beryl_Ipc_V1_PairingPrompt()
        prompt.peer = "C0:FF:EE:00:00:01/random"
        prompt.kind = .displayPasskey
        prompt.number = 42
        var finished = Beryl_Ipc_V1_PairingFinished()
        finished.peer = prompt.peer
        finished.reason = 0x04
        let reports: [(ServeReport, String)] = [
            (.published(service: "180D", handles: 10...16, characteristics: 3), "published"),
            (.advertising(name: "Beryl HR", privateAddress: nil), "advertising"),
            (.advertisingRefused(reason: "no"), "advertising-refused"),
            (.centralConnected(peer: "AA:BB:CC:DD:EE:FF"), "central-connected"),
            (.centralDisconnected, "central-disconnected"),
            (.readRequested(.init(attribute: "2A38", offset: 22, bytes: 8)), "read-requested"),
            (.writeRequested([.init(attribute: "0x12", offset: 0, bytes: 2), .init(attribute: "0x12", offset: 2, bytes: 3)], refusal: 0x80), "write-requested"),
            (.subscription(attribute: "2A37", central: nil, subscribed: false, indications: true), "unsubscribed"),
            (.pairing(.prompt(prompt, line: "pairing with C0:FF:EE:00:00:01/random: passkey 000042")), "pairing"),
            (.pairing(.finished(finished)), "pairing-failed"),
            (.securityChanged(link: 0x40, encrypted: true, status: 0, bonded: true), "security"),
            (.stackState("resetting"), "state"),
            (.warning("command 0xc0a failed"), "warning"),
            (.failure("lost attd"), "error"),
        ]
        for (report, event) in reports {
            XCTAssertEqual(try object(report.fields)["event"] as? String, event, report.text)
        }

        let write = try object(ServeReport.writeRequested([.init(attribute: "0x12", offset: 0, bytes: 2), .init(attribute: "0x12", offset: 2, bytes: 3)],
                                                          refusal: 0x80).fields)
        XCTAssertEqual((write["writes"] as? [[String: Any]])?.compactMap { $0["offset"] as? Int }, [0, 2], "a prepared write's parts, in order")
        XCTAssertEqual(write["refusal"] as? Int, 0x80)
        XCTAssertNil(try object(ServeReport.writeRequested([.init(attribute: "0x12", offset: 0, bytes: 2)], refusal: nil).fields)["refusal"])

        let shown = try object(PairingEvent.prompt(prompt, line: "").fields)
        XCTAssertEqual(shown["kind"] as? String, "displayPasskey")
        XCTAssertEqual(shown["number"] as? Int, 42, "the passkey as a number, not a line to search")
        let failed = try object(PairingEvent.finished(finished).fields)
        XCTAssertEqual(failed["reason"] as? Int, 0x04)
        XCTAssertEqual(failed["endedByPeer"] as? Bool, false)
        XCTAssertEqual(failed["detail"] as? String, "pairing with C0:FF:EE:00:00:01/random failed: we ended it, reason 0x4")
    }

    /// The lines people read stay as they were before the reports were typed.
    func testTheLinesForPeople() {
        XCTAssertEqual(ServeReport.advertising(name: "Beryl HR", privateAddress: nil).text, "advertising as \"Beryl HR\"")
        XCTAssertEqual(ServeReport.writeRequested([.init(attribute: "0x12", offset: 0, bytes: 2)], refusal: 0x80).text, "write 0x12[0] 2 bytes refused (0x80)")
        XCTAssertEqual(ServeReport.subscription(attribute: "2A37", central: "C", subscribed: true, indications: false).text, "central subscribed to 2A37 (C)")
        XCTAssertEqual(ServeReport.securityChanged(link: 0x40, encrypted: true, status: 0, bonded: true).text, "link 0x40 encrypted with a bonded peer")
    }
}
