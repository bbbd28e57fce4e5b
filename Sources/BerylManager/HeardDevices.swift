import BerylCore
import BerylGAP

/// What each device around says: its latest advertising PDU joined with the scan response that answered it, as
/// Core Bluetooth reports them (one advertisementData with both), and when a report of it is due.
public struct HeardDevices: Sendable {
    public private(set) var advertisements: [DeviceAddress: AdvertisementData] = [:]
    /// The latest signal strength heard (a report's 127 means the controller did not measure it, Core Vol 4 Part E §7.7.65.2).
    public private(set) var rssi: [DeviceAddress: Int8] = [:]
    private var lastAdvertising: [DeviceAddress: [UInt8]] = [:]
    private var lastScanResponse: [DeviceAddress: [UInt8]] = [:]
    private var advertisingKind: [DeviceAddress: AdvertisingReport.Kind] = [:]
    private var waitingForScanResponse: Set<DeviceAddress> = []

    public init() {}

    public enum Heard: Equatable, Sendable {
        /// Malformed AD structures (Core Supplement Part A §1): dropped, what was heard before stands.
        case malformed(AdvertisingDataError)
        /// What the device says now, and whether apps' scans hear of it now or when its scan response comes.
        case heard(AdvertisementData, reportNow: Bool)
    }

    /// `appsScanning`: only an app's scan waits for scan responses and reports; a lab's scan just listens.
    public mutating func received(_ report: AdvertisingReport, appsScanning: Bool) -> Heard {
        let address = report.address
        if report.kind == .scanResponse {
            lastScanResponse[address] = report.data
        } else {
            // New advertising content (a device rotating several apps' data) makes the old scan response stale.
            if lastAdvertising[address] != report.data {
                lastScanResponse[address] = nil
                waitingForScanResponse.remove(address)
            }
            lastAdvertising[address] = report.data
            advertisingKind[address] = report.kind
        }
        var merged = AdvertisementData()
        for part in [lastAdvertising[address], lastScanResponse[address]].compactMap({ $0 }) {
            if case .failure(let error) = merged.merge(part) { return .malformed(error) }
        }
        merged.isConnectable = advertisingKind[address]?.isConnectable ?? false
        advertisements[address] = merged
        if report.rssi != 127 { rssi[address] = report.rssi }
        guard appsScanning else { return .heard(merged, reportNow: false) }
        // A scannable advertiser's report waits for its scan response (its name is usually there), as iOS reports them
        // together; if none comes, the next advertisement is reported without it.
        let scannable = report.kind == .connectableUndirected || report.kind == .scannableUndirected
        if scannable, lastScanResponse[address] == nil, waitingForScanResponse.insert(address).inserted { return .heard(merged, reportNow: false) }
        return .heard(merged, reportNow: true)
    }
}
