/// On-air timing of LE data channel PDUs (Core Vol 6 Part B §2.1 packet format, §4.1.1 T_IFS = 150 µs).
public enum AirTime {
    public static let interFrameSpace: Duration = .microseconds(150)

    /// Microseconds one PDU with `payload` octets occupies on `phy` (1 or 2 Mbit/s): preamble (1 octet on 1M,
    /// 2 on 2M), access address (4), header (2), payload, MIC (4 when encrypted) and CRC (3).
    public static func pduDuration(payload: Int, phy: Int, encrypted: Bool) -> Duration {
        let preamble = phy == 2 ? 2 : 1
        let octets = preamble + 4 + 2 + payload + (encrypted && payload > 0 ? 4 : 0) + 3
        let microseconds = phy == 2 ? octets * 4 : octets * 8
        return .microseconds(Int64(microseconds))
    }

    /// One data PDU and the empty PDU that acknowledges it, each followed by T_IFS.
    public static func exchangeDuration(payload: Int, phy: Int, encrypted: Bool) -> Duration {
        pduDuration(payload: payload, phy: phy, encrypted: encrypted) + interFrameSpace
            + pduDuration(payload: 0, phy: phy, encrypted: encrypted) + interFrameSpace
    }

    /// The most PDUs of `payload` octets one direction can carry in a connection event as long as the interval.
    public static func pdusPerEvent(interval: Duration, payload: Int, phy: Int, encrypted: Bool) -> Int {
        max(1, Int(interval.microseconds / exchangeDuration(payload: payload, phy: phy, encrypted: encrypted).microseconds))
    }

    /// Link-layer payload bytes per second one direction can carry when every event is full.
    public static func maximumThroughput(interval: Duration, payload: Int, phy: Int, encrypted: Bool) -> Double {
        let pdus = pdusPerEvent(interval: interval, payload: payload, phy: phy, encrypted: encrypted)
        return Double(pdus * payload) / (Double(interval.microseconds) / 1_000_000)
    }
}
