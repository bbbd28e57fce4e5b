import SwiftProtobuf

// attd's events as an app's: one shape, whether managerd forwards them on the app's session or the app's data channel
// carries them (the library converts those). attd names links by connection handle and knows no managers; an app
// hears a peer by the identifier managerd gave it, through its manager.

extension Beryl_Ipc_V1_ManagerEvent {
    /// What attd's GATT client heard on a link, for the managers holding that peripheral.
    public init?(_ event: Beryl_Ipc_V1_AttEvent.OneOf_Kind, peripheral: String) {
        self.init()
        switch event {
        case .gattNotification(var heard):
            // As a data channel carries it: the peripheral by identifier, nothing of attd's links and audiences.
            heard.peripheral = peripheral
            heard.connectionHandle = 0
            heard.delivered = []
            notification = heard
        case .gattServiceChanged(let change):
            servicesChanged = .with { $0.peripheral = peripheral; $0.change = change }
        case .gattWriteReady(let ready):
            readyToWrite = .with { $0.peripheral = peripheral; $0.count = ready.count }
        default:
            return nil
        }
    }

    /// A remote central's read, for the manager owning the handle (`central`: the identifier the app knows it by).
    public init(_ read: Beryl_Ipc_V1_ReadRequested, manager: UInt32, central: String, maximumUpdateLength: UInt32) {
        self.init()
        readRequest = .with {
            $0.manager = manager
            $0.id = read.id
            $0.central = central
            $0.handle = read.handle
            $0.offset = read.offset
            $0.maximumUpdateLength = maximumUpdateLength
        }
    }

    /// A remote central's write (several, for a reliable write); a write without response carries no request id,
    /// since it takes no answer.
    public init(_ write: Beryl_Ipc_V1_WriteRequested, manager: UInt32, central: String, maximumUpdateLength: UInt32) {
        self.init()
        writeRequest = .with {
            $0.manager = manager
            $0.id = write.withResponse ? write.id : 0
            $0.central = central
            $0.writes = write.writes
            $0.withResponse = write.withResponse
            $0.maximumUpdateLength = maximumUpdateLength
        }
    }
}
