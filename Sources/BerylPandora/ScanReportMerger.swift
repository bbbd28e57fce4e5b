import Foundation

/// What a scan shows a lab: one report per advertisement, a scannable one joined with the scan response that answered it
/// (an active scanner's SCAN_REQ is answered by the same advertiser, Core Vol 6 Part B §4.4.3), as Pandora peers report
/// them. Sans-IO: reports in, reports out.
public struct ScanReportMerger: Sendable {
    /// An HCI LE Advertising Report's event type (Core Vol 4 Part E §7.7.65.2).
    public enum Kind: UInt32, Sendable {
        case advInd = 0, advDirectInd = 1, advScanInd = 2, advNonconnInd = 3, scanResponse = 4

        var isScannable: Bool { self == .advInd || self == .advScanInd }
        var isConnectable: Bool { self == .advInd || self == .advDirectInd }
    }

    public struct Report: Equatable, Sendable {
        public var address: String
        public var kind: Kind
        public var rssi: Int32
        public var data: [UInt8]

        public init(address: String, kind: Kind, rssi: Int32, data: [UInt8]) {
            self.address = address
            self.kind = kind
            self.rssi = rssi
            self.data = data
        }
    }

    public struct Advertisement: Equatable, Sendable {
        public var address: String
        public var connectable: Bool
        public var scannable: Bool
        public var rssi: Int32
        /// The advertising data, then the scan response's, if one came.
        public var data: [UInt8]
    }

    private let active: Bool
    private var awaitingResponse: [String: Report] = [:]

    public init(active: Bool) { self.active = active }

    public mutating func take(_ report: Report) -> [Advertisement] {
        if report.kind == .scanResponse {
            // A scan response with no advertisement held answers one already reported (or another scanner's request).
            guard let held = awaitingResponse.removeValue(forKey: report.address) else { return [] }
            return [Advertisement(address: held.address, connectable: held.kind.isConnectable, scannable: true, rssi: report.rssi, data: held.data + report.data)]
        }
        var out: [Advertisement] = []
        if let earlier = awaitingResponse.removeValue(forKey: report.address) { out.append(alone(earlier)) }
        if active, report.kind.isScannable {
            awaitingResponse[report.address] = report
        } else {
            out.append(alone(report))
        }
        return out
    }

    private func alone(_ report: Report) -> Advertisement {
        Advertisement(address: report.address, connectable: report.kind.isConnectable, scannable: report.kind.isScannable, rssi: report.rssi, data: report.data)
    }
}
