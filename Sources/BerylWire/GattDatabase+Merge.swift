/// What a client knows of a peer's database grows with each discovery (Core Bluetooth's rule: discovery adds to what
/// was found before). managerd keeps it for restoration; the library mirrors the same steps in its objects.
extension Beryl_Ipc_V1_GattDatabase {
    /// Adds what one discovery of `depth` over `range` found. Services are matched by their start handle and
    /// characteristics by their value handle, so that a second discovery never duplicates what the first found.
    public mutating func merge(_ found: Beryl_Ipc_V1_GattDatabase, depth: Beryl_Ipc_V1_GattDiscoveryDepth, range: ClosedRange<UInt32>) {
        switch depth {
        case .whole, .UNRECOGNIZED:
            for service in found.services {
                services.removeAll { $0.startHandle == service.startHandle }
                services.append(service)
            }
        case .services:
            for service in found.services where !services.contains(where: { $0.startHandle == service.startHandle }) {
                services.append(service)
            }
        case .included:
            guard let index = services.firstIndex(where: { $0.startHandle == range.lowerBound }) else { return }
            services[index].included = found.services.first?.included ?? []
        case .characteristics:
            guard let index = services.firstIndex(where: { $0.startHandle == range.lowerBound }) else { return }
            for characteristic in found.services.first?.characteristics ?? []
            where !services[index].characteristics.contains(where: { $0.valueHandle == characteristic.valueHandle }) {
                services[index].characteristics.append(characteristic)
            }
            services[index].characteristics.sort { $0.valueHandle < $1.valueHandle }
        case .descriptors:
            // A characteristic's descriptors follow its value (Core Vol 3 Part G §3.3).
            for serviceIndex in services.indices {
                guard let index = services[serviceIndex].characteristics.firstIndex(where: { $0.valueHandle + 1 == range.lowerBound }) else { continue }
                services[serviceIndex].characteristics[index].descriptors = found.services.first?.characteristics.first?.descriptors ?? []
                return
            }
        }
        services.sort { $0.startHandle < $1.startHandle }
    }
}
