import BerylCore

/// Two devices heard with the same address bits, one public and one random (Core Vol 6 Part B §1.3: the type is part
/// of a device's address), and a query that did not say which.
public struct AmbiguousAddress: Error, Equatable, Sendable, CustomStringConvertible {
    public let query: AddressQuery
    public let candidates: [DeviceAddress]

    public var description: String {
        "\(query) was heard as \(candidates.count) devices: \(candidates.map(\.description).joined(separator: " and ")); name one of them"
    }
}

/// Which device an address means. A typed address means itself. One without a type means the one device heard with
/// those bits; if none was heard, the one the stack knows by name alone; if it knows none, the public address (what a
/// bare address has always meant). Two heard, or two known and none heard, is ambiguous and refused.
public enum AddressResolution {
    /// `known`: the devices this stack knows with the query's bits, each with whether it was ever heard on the air.
    public static func resolve(_ query: AddressQuery, known: [(address: DeviceAddress, heard: Bool)]) -> Result<DeviceAddress, AmbiguousAddress> {
        if let type = query.type { return .success(DeviceAddress(query.address, type: type)) }
        let mine = known.filter { $0.address.address == query.address }
        let heard = mine.filter(\.heard)
        let candidates = (heard.isEmpty ? mine : heard).map(\.address).sorted { $0.type.rawValue < $1.type.rawValue }
        switch candidates.count {
        case 0: return .success(DeviceAddress(query.address, type: .public))
        case 1: return .success(candidates[0])
        default: return .failure(AmbiguousAddress(query: query, candidates: candidates))
        }
    }
}
