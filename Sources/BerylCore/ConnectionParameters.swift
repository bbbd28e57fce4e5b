/// Connection parameters as LE signalling and HCI carry them (units of 1.25 ms and 10 ms).
public struct ConnectionParameters: Equatable, Sendable {
    public var intervalMin: UInt16
    public var intervalMax: UInt16
    public var latency: UInt16
    public var timeout: UInt16

    public init(intervalMin: UInt16, intervalMax: UInt16, latency: UInt16, timeout: UInt16) {
        self.intervalMin = intervalMin
        self.intervalMax = intervalMax
        self.latency = latency
        self.timeout = timeout
    }

    /// Core Vol 3 Part A §4.20 (and Vol 4 Part E §7.8.12): the ranges and the timeout-vs-interval rule.
    public var isValid: Bool {
        guard (6...3200).contains(intervalMin), (6...3200).contains(intervalMax), intervalMin <= intervalMax,
              latency <= 499, (10...3200).contains(timeout) else { return false }
        return Int(timeout) * 4 > (1 + Int(latency)) * Int(intervalMax)
    }
}
