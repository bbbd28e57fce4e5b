import BerylATT
import BerylCore
import BerylGATT
import BerylLink
import BerylSMP
import BerylWire
import FoundationEssentials
import Glibc

// What publishers and clients send without waiting for a peer's answer (Notify, writes without response), checked
// against the pacer as attd's wire carries them; each refusal is the typed error the sender hears.

extension TransmitPacer {
    /// A publisher's Notify, to every subscribed peer or to those on the links it names: refused when the value is not its own or too long, stale for an ordered sender (sent
    /// before its latest ReadyToUpdate: CANCELLED, it sends it again), or when a queue is full (BUSY: ReadyToUpdate follows).
    public mutating func update(_ notify: Beryl_Ipc_V1_Notify, from publisher: PublisherID, owns: (UInt16) -> Bool,
                                on links: [LinkSession]) -> Result<ValueUpdate, WireFailure> {
        guard notify.valueHandle > 0, notify.valueHandle < 0xFFFF, owns(UInt16(notify.valueHandle)) else {
            return .failure(WireFailure(.notFound, "handle \(notify.valueHandle) is not a value of this session's services", field: "value_handle"))
        }
        // Core Vol 3 Part F §3.2.9: an attribute value is at most 512 octets.
        guard notify.value.count <= ATTServer.maxValueLength else {
            return .failure(WireFailure(.invalidArgument, "values are at most 512 bytes", field: "value"))
        }
        let sender = UpdateSender(publisher: publisher, onBehalfOf: notify.onBehalfOf)
        if notify.ordered, let latest = sentBeforeReady(sender, readySeen: notify.readySeen) {
            return .failure(WireFailure(.cancelled, "sent before ReadyToUpdate \(latest): send it again; no other ReadyToUpdate follows"))
        }
        // Only the named links' peers, when the sender named centrals (updateValue(_:for:onSubscribedCentrals:)).
        let targets = notify.connectionHandles.isEmpty ? links : links.filter { notify.connectionHandles.contains(UInt32($0.handle)) }
        guard let update = update(valueHandle: UInt16(notify.valueHandle), value: Array(notify.value), indicate: notify.indicate,
                                  ordered: notify.ordered, from: sender, on: targets) else {
            return .failure(WireFailure(.busy, "the transmit queue is full; wait for ReadyToUpdate"))
        }
        return .success(update)
    }

    /// A client's write without response on a link, as the Write Command (or Signed Write Command, signed by `sign`) to
    /// send. It has no answer to pace it, so the link's unsent ones are capped and the sender hears when there is room
    /// again (canSendWriteWithoutResponse, peripheralIsReady(toSendWriteWithoutResponse:)). Refused BUSY when full (the
    /// sender is then owed a GattWriteReady), CANCELLED when an ordered sender's is stale.
    public mutating func admitWrite(_ write: Beryl_Ipc_V1_GattWrite, from publisher: PublisherID, on link: LinkSession, encrypted: Bool,
                                    sign: (_ handle: UInt16, _ value: [UInt8]) -> Result<ATTPDU, SigningRefusal>) -> Result<ATTPDU, WireFailure> {
        let sender = UpdateSender(publisher: publisher, onBehalfOf: write.onBehalfOf)
        if write.ordered, let latest = writeSentBeforeReady(sender, on: link.handle, readySeen: write.readySeen) {
            return .failure(WireFailure(.cancelled, "sent before GattWriteReady \(latest): send it again; no other GattWriteReady follows"))
        }
        let hasRoom = hasRoom(on: link.handle) && !holdsBackWrites(from: sender, on: link.handle)
        let (handle, value) = (UInt16(truncatingIfNeeded: write.handle), Array(write.value))
        switch WriteCommand.plan(length: value.count, mtu: link.client.mtu, signedAsked: write.signed, encrypted: encrypted, hasRoom: hasRoom) {
        case .success(.plain):
            return .success(.writeCommand(handle: handle, value: value))
        case .success(.signed):
            return sign(handle, value).mapError { WireFailure($0) }
        case .failure(.queueFull):
            refuseWrite(from: sender, on: link.handle)
            return .failure(WireFailure(.busy, "\(WriteCommand.Refusal.queueFull)"))
        case .failure(let refusal):
            return .failure(WireFailure(.invalidArgument, "\(refusal)", field: "value"))
        }
    }
}

extension WireFailure {
    /// A signed write this stack cannot sign: as a peer would answer an unauthenticated client, pair (and bond) first.
    public init(_ refusal: SigningRefusal) {
        self.init(.securityFailed, refusal == .noKey ? "a signed write needs a bond with this peer whose pairing distributed our CSRK"
                  : "this bond's SignCounter is spent; pair again", detail: RemoteDetail(attError: ATTError.insufficientAuthentication.rawValue))
    }
}

extension Beryl_Ipc_V1_Event {
    /// The link has room again for a sender whose write without response it refused.
    public init(writeReady notice: TransmitPacer.ReadyNotice, link: UInt16) {
        self.init()
        att.gattWriteReady = .with {
            $0.connectionHandle = UInt32(link)
            $0.count = notice.count
            $0.onBehalfOf = notice.sender.onBehalfOf
        }
    }

    /// Every link has room again for a sender whose notification was refused.
    public init(readyToUpdate notice: TransmitPacer.ReadyNotice) {
        self.init()
        att.readyToUpdate = .with {
            $0.count = notice.count
            $0.onBehalfOf = notice.sender.onBehalfOf
        }
    }
}
