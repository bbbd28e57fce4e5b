import BerylCore
import BerylManager
import BerylStore
import FoundationEssentials
import Glibc

/// managerd's peripheral store is the directory its core asks for identifiers; a device is seen now.
extension PeripheralStore: DeviceDirectory {
    public func identifier(at address: DeviceAddress) -> String? { device(at: address)?.identifier }

    public func address(of identifier: String) -> DeviceAddress? { device(identifier)?.address }

    public func seen(_ address: DeviceAddress, name: String?) -> String {
        seen(address, name: name, at: Date().timeIntervalSince1970).identifier
    }
}
