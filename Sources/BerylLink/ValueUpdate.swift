import BerylATT
import BerylCore
import BerylGATT

/// What one `updateValue` sent: how many peers were subscribed, and what the links and the pacer carry out.
public struct ValueUpdate {
    public var peers: UInt32 = 0
    /// Indications each link's server sends (or queues: one is confirmed before the next, Core Vol 3 Part F §3.4.7.2).
    public var indications: [(link: LinkSession, outputs: [ATTServerOutput])] = []
    /// Notifications, paced per link.
    public var transmissions: [TransmitPacer.Output] = []
}

extension TransmitPacer {
    /// Core Bluetooth's updateValue(_:for:onSubscribedCentrals:): a notification goes to every link whose peer
    /// subscribed, or to none — when any of those links' queue is full it is refused whole (nil: updateValue returns
    /// false) and the sender hears ReadyToUpdate once every link has room. Indications are the bearer's to pace, one
    /// confirmed before the next; they are refused the same way when a subscribed link's backlog is full.
    /// An `ordered` sender's indications wait behind its refused notifications too, so that they cannot overtake them.
    public mutating func update(valueHandle: UInt16, value: [UInt8], indicate: Bool, ordered: Bool = false, from sender: UpdateSender,
                                on links: [LinkSession]) -> ValueUpdate? {
        if !indicate || ordered, holdsBack(sender) { return nil }
        let backlogged = indicate ? links.filter { !$0.server.hasIndicationRoom && $0.server.indicates(valueHandle: valueHandle) } : []
        if !backlogged.isEmpty {
            refuseIndication(from: sender, backloggedOn: backlogged.map(\.handle))
            return nil
        }
        if !indicate, links.contains(where: { !hasRoom(on: $0.handle) && $0.server.notification(valueHandle: valueHandle, value: []) != nil }) {
            refuseNotification(from: sender)
            return nil
        }
        var update = ValueUpdate()
        for link in links {
            if indicate {
                let (subscribed, outputs) = link.server.indicate(valueHandle: valueHandle, value: value)
                if subscribed { update.peers += 1 }
                update.indications.append((link, outputs))
            } else if let pdu = link.server.notification(valueHandle: valueHandle, value: value) {
                update.peers += 1
                update.transmissions += enqueue(link.attPDU(pdu), on: link.handle)
            }
        }
        return update
    }
}
