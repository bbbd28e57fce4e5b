import BerylIPC

/// What `beryl serve` reports, through managerd or `--direct`: a line for people, or with `--json` one object per
/// line for tests and scripts, so that nothing has to read the stack's state back out of the text.
public enum ServeReport: Sendable, Equatable {
    public struct Access: Sendable, Equatable {
        /// The characteristic's UUID through managerd; its value handle (0x…) with `--direct`, which publishes bare handles.
        public var attribute: String
        public var offset: Int
        public var bytes: Int

        public init(attribute: String, offset: Int, bytes: Int) {
            self.attribute = attribute
            self.offset = offset
            self.bytes = bytes
        }
    }

    case published(service: String, handles: ClosedRange<UInt32>?, characteristics: Int)
    case advertising(name: String?, privateAddress: String?)
    case advertisingRefused(reason: String)
    case centralConnected(peer: String)
    case centralDisconnected
    case readRequested(Access)
    /// `refusal`: the ATT error the write was answered with (Core Vol 3 Part F §3.4.1.1), nil when it was taken.
    case writeRequested([Access], refusal: UInt8?)
    case subscription(attribute: String, central: String?, subscribed: Bool, indications: Bool)
    case pairing(PairingEvent)
    case securityChanged(link: UInt32, encrypted: Bool, status: UInt32, bonded: Bool)
    case stackState(String)
    /// Something went wrong and serving goes on (a command the controller failed, a republication after a reset).
    case warning(String)
    /// Serving stopped.
    case failure(String)

    public var text: String {
        switch self {
        case .published(let service, let handles?, _):
            return "published \(service) at handles \(handles.lowerBound)–\(handles.upperBound)"
        case .published(let service, nil, let characteristics):
            return "published \(service) with \(characteristics) characteristics"
        case .advertising(let name, let privateAddress):
            return "advertising" + (privateAddress.map { " from private address \($0)" } ?? "") + (name.map { " as \"\($0)\"" } ?? "")
        case .advertisingRefused(let reason):
            return "advertising refused: \(reason)"
        case .centralConnected(let peer):
            return "central connected (\(peer))"
        case .centralDisconnected:
            return "central disconnected; advertising again"
        case .readRequested(let read):
            return "read \(read.attribute) offset \(read.offset): \(read.bytes) bytes"
        case .writeRequested(let writes, let refusal):
            return "write \(writes.map { "\($0.attribute)[\($0.offset)] \($0.bytes) bytes" }.joined(separator: ", "))"
                + (refusal.map { " refused (0x\(String($0, radix: 16)))" } ?? "")
        case .subscription(let attribute, let central, let subscribed, let indications):
            return "central \(subscribed ? "subscribed to" : "unsubscribed from") \(attribute)" + (indications ? " (indications)" : "")
                + (central.map { " (\($0))" } ?? "")
        case .pairing(let event):
            return event.text
        case .securityChanged(let link, let encrypted, let status, let bonded):
            return "link 0x\(String(link, radix: 16)) \(encrypted ? "encrypted" : "not encrypted (status 0x\(String(status, radix: 16)))")"
                + (bonded ? " with a bonded peer" : "")
        case .stackState(let state):
            return "the stack is \(state)"
        case .warning(let reason):
            return "warning: \(reason)"
        case .failure(let reason):
            return "error: \(reason)"
        }
    }

    /// The report as a JSON object's fields; `event` names it.
    public var fields: [String: any Sendable] {
        switch self {
        case .published(let service, let handles, let characteristics):
            var fields: [String: any Sendable] = ["event": "published", "service": service, "characteristics": characteristics]
            if let handles { fields["startHandle"] = Int(handles.lowerBound); fields["endHandle"] = Int(handles.upperBound) }
            return fields
        case .advertising(let name, let privateAddress):
            var fields: [String: any Sendable] = ["event": "advertising"]
            if let name { fields["name"] = name }
            if let privateAddress { fields["privateAddress"] = privateAddress }
            return fields
        case .advertisingRefused(let reason):
            return ["event": "advertising-refused", "reason": reason]
        case .centralConnected(let peer):
            return ["event": "central-connected", "peer": peer]
        case .centralDisconnected:
            return ["event": "central-disconnected"]
        case .readRequested(let read):
            return ["event": "read-requested", "attribute": read.attribute, "offset": read.offset, "bytes": read.bytes]
        case .writeRequested(let writes, let refusal):
            var fields: [String: any Sendable] = ["event": "write-requested",
                                                  "writes": writes.map { ["attribute": $0.attribute, "offset": $0.offset, "bytes": $0.bytes] as [String: any Sendable] }]
            if let refusal { fields["refusal"] = Int(refusal) }
            return fields
        case .subscription(let attribute, let central, let subscribed, let indications):
            var fields: [String: any Sendable] = ["event": subscribed ? "subscribed" : "unsubscribed", "attribute": attribute, "indications": indications]
            if let central { fields["central"] = central }
            return fields
        case .pairing(let event):
            return event.fields
        case .securityChanged(let link, let encrypted, let status, let bonded):
            return ["event": "security", "link": Int(link), "encrypted": encrypted, "status": Int(status), "bonded": bonded]
        case .stackState(let state):
            return ["event": "state", "state": state]
        case .warning(let reason):
            return ["event": "warning", "reason": reason]
        case .failure(let reason):
            return ["event": "error", "reason": reason]
        }
    }
}
