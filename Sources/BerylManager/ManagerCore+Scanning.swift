import BerylCore
import BerylGAP

/// The identifiers this stack gives the devices it hears (managerd's peripheral store): a seam, so that who is told
/// of a device is decided here and tested on an in-memory directory.
public protocol DeviceDirectory {
    func identifier(at address: DeviceAddress) -> String?
    /// The device was heard (its name, when it says one): its identifier, made on first sight.
    func seen(_ address: DeviceAddress, name: String?) -> String
    /// The address of the device this stack gave `identifier` (nil: none).
    func address(of identifier: String) -> DeviceAddress?
}

/// A device an app's scan is told of.
public struct Discovery: Equatable, Sendable {
    public var identifier: String
    public var address: DeviceAddress
    public var advertisement: AdvertisementData
    public var target: ManagerKey
}

extension ManagerCore {
    public enum Heard: Equatable, Sendable {
        /// Malformed AD structures (Core Supplement Part A §1): dropped, what was heard before stands.
        case malformed(AdvertisingDataError)
        case heard([Discovery])
    }

    /// An advertising report: only an app's scan makes a device known (a lab's scan hears every device around and
    /// hands out no identifiers), and the scans it matches are told of it now or once its scan response came.
    public mutating func advertisingReceived(_ report: AdvertisingReport, directory: some DeviceDirectory) -> Heard {
        switch heard.received(report, appsScanning: scans.isScanning) {
        case .malformed(let error):
            return .malformed(error)
        case .heard(let merged, let reportNow):
            guard scans.isScanning else { return .heard([]) }
            let identifier = directory.seen(report.address, name: merged.localName)
            guard reportNow else { return .heard([]) }
            return .heard(scans.route(identifier: identifier, advertisement: merged).map {
                Discovery(identifier: identifier, address: report.address, advertisement: merged, target: $0)
            })
        }
    }

    /// A scan just started is told at once of the known devices already heard that match it, as a fresh scan on iOS
    /// reports cached ones.
    public mutating func alreadyHeard(by key: ManagerKey, directory: some DeviceDirectory) -> [Discovery] {
        heard.advertisements.sorted { $0.key.description < $1.key.description }.flatMap { address, advertisement in
            directory.identifier(at: address).map { identifier in
                scans.route(identifier: identifier, advertisement: advertisement, only: key).map {
                    Discovery(identifier: identifier, address: address, advertisement: advertisement, target: $0)
                }
            } ?? []
        }
    }
}
