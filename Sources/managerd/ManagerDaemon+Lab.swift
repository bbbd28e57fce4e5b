import BerylCore
import BerylDaemonKit
import BerylGAP
import BerylHCI
import BerylIPC
import BerylManager
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The one lab session (beryl-pandora): what it runs on the controller, beside the apps' managers.
final class LabState {
    let session: UInt64
    var advertising: LabAdvertising?
    var scan: (passive: Bool, ownAddress: LabOwnAddress)?
    /// The connection the lab waits for, answered when the link is up.
    var connecting: (identifier: String, address: DeviceAddress, ownAddress: LabOwnAddress, incoming: IncomingRequest)?

    init(session: UInt64) { self.session = session }

    /// The lab holds its links in the connection book as this manager.
    var key: ManagerKey { ManagerKey(session: session, manager: UInt32.max) }
}

extension ManagerDaemon {
    func handleLab(_ kind: Beryl_Ipc_V1_ManagerRequest.OneOf_Kind, session: IPCSession, app: AppSession, _ incoming: IncomingRequest) {
        if case .labOpen = kind { return openLab(session: session, app: app, incoming) }
        guard let lab, lab.session == session.id else {
            incoming.fail(.permissionDenied, "not a lab session: send LabOpen first")
            return
        }
        switch kind {
        case .labAdvertise(let request):
            let advertising: LabAdvertising
            do {
                advertising = try LabAdvertising(data: Array(request.data), scanResponse: Array(request.scanResponse), connectable: request.connectable,
                                                 scannable: request.scannable, directedTo: try labAddress(request.directedTo, field: "directed_to", optional: true),
                                                 ownAddress: LabOwnAddress(rawValue: UInt8(request.ownAddressType.rawValue)) ?? .public, interval: request.interval)
            } catch let refusal as LabAdvertising.Refusal {
                incoming.fail(.invalidArgument, "\(refusal)", field: refusalField(refusal))
                return
            } catch {
                incoming.fail(.invalidArgument, "\(error)", field: "directed_to")
                return
            }
            lab.advertising = advertising
            updateAdvertising { error in
                if let error { incoming.fail(.internal, error) } else { incoming.respond(.with { $0.ack = .init() }) }
            }
        case .labStopAdvertising:
            lab.advertising = nil
            updateAdvertising()
            incoming.respond(.with { $0.ack = .init() })
        case .labScan(let request):
            lab.scan = (request.passive, LabOwnAddress(rawValue: UInt8(request.ownAddressType.rawValue)) ?? .public)
            controllerScan = .off  // new parameters: the scan is set up again
            command(HCICommandPacket(.leSetScanEnable, parameters: [0x00, 0x00]))
            updateScanning()
            incoming.respond(.with { $0.ack = .init() })
        case .labStopScan:
            lab.scan = nil
            updateScanning()
            incoming.respond(.with { $0.ack = .init() })
        case .labConnect(let request):
            labConnect(request, lab: lab, incoming)
        case .labCancelConnect:
            if let connecting = lab.connecting {
                lab.connecting = nil
                perform(book.cancel(lab.key, identifier: connecting.identifier).actions)
                connecting.incoming.fail(.cancelled, "the connection attempt to \(connecting.address) was cancelled")
            }
            incoming.respond(.with { $0.ack = .init() })
        case .labDisconnect(let request):
            let handle = UInt16(truncatingIfNeeded: request.handle)
            guard request.handle <= 0x0EFF, book.identifier(for: handle) != nil else {
                incoming.fail(.notFound, "no link 0x\(String(request.handle, radix: 16))", field: "handle")
                return
            }
            command(HCICommands.disconnect(handle: handle)) { result in
                switch result {
                case .success(let status) where status.first == 0: incoming.respond(.with { $0.ack = .init() })
                case .success(let status): incoming.fail(.internal, "the controller refused Disconnect (HCI 0x\(String(status.first ?? 0xFF, radix: 16)))")
                case .failure(let error): incoming.fail(.notReady, "\(error)")
                }
            }
        case .labGetLinks:
            incoming.respond(.with { $0.manager.labLinks.links = book.links.values.sorted { $0.handle < $1.handle }.map(labLink) })
        case .labGetInfo:
            answerLabInfo(session: session.id, incoming)
        case .labFactoryReset:
            labFactoryReset(lab)
            incoming.respond(.with { $0.ack = .init() })
        default:
            incoming.fail(.unknownMessage, "not a lab request")
        }
    }

    private func openLab(session: IPCSession, app: AppSession, _ incoming: IncomingRequest) {
        guard !app.saidHello else {
            incoming.fail(.invalidArgument, "an app session cannot become a lab session", field: "lab_open")
            return
        }
        guard labAccessGranted(session.peer) else {
            incoming.fail(.permissionDenied, "unauthorized: a lab session needs root or the \(LabAccess.groupName) group (uid \(session.peer.uid))")
            return
        }
        if let lab, lab.session != session.id, self.session(lab.session) != nil {
            incoming.fail(.busy, "another lab session is open (session \(lab.session))")
            return
        }
        lab = LabState(session: session.id)
        host.logger.info("lab session \(session.id) opened by pid \(session.peer.pid) (uid \(session.peer.uid))")
        setLabRandomAddress()
        answerLabInfo(session: session.id, incoming)
    }

    /// The controller's state and addresses as hcid knows them now (the public one is unknown until bring-up read it).
    private func answerLabInfo(session: UInt64, _ incoming: IncomingRequest) {
        let welcome = { [unowned self] (address: String) in
            _ = incoming.respond(.with {
                $0.manager.labWelcome = .with {
                    $0.sessionID = session
                    $0.state = state
                    $0.publicAddress = address
                    $0.randomAddress = DeviceAddress(labRandomAddress, type: .random).description
                }
            })
        }
        guard let hcid else {
            welcome("")
            return
        }
        var request = Request()
        request.hci.getControllerInfo = .init()
        hcid.request(request) { result in welcome((try? result.get())?.hci.controllerInfo.address ?? "") }
    }

    private func labAccessGranted(_ peer: PeerCredentials) -> Bool {
        var userName: String?
        var primaryGroup: UInt32?
        if let entry = getpwuid(peer.uid) {
            userName = String(cString: entry.pointee.pw_name)
            primaryGroup = entry.pointee.pw_gid
        }
        var labGroup: (gid: UInt32, members: [String])?
        if let group = getgrnam(LabAccess.groupName) {
            var members: [String] = []
            var cursor = group.pointee.gr_mem
            while let member = cursor?.pointee {
                members.append(String(cString: member))
                cursor = cursor?.advanced(by: 1)
            }
            labGroup = (group.pointee.gr_gid, members)
        }
        // The socket's gid is the peer's effective group: a process started under the lab group is granted too.
        return LabAccess.isGranted(uid: peer.uid, primaryGroup: primaryGroup, userName: userName, labGroup: labGroup)
            || (labGroup != nil && peer.gid == labGroup?.gid)
    }

    /// The random address exists on the controller only after LE Set Random Address (Core Vol 4 Part E §7.8.4), and a
    /// reset forgets it; set while the lab's advertising and scanning are off, as the command requires.
    func setLabRandomAddress() {
        guard lab != nil, state == .poweredOn else { return }
        command(HCICommands.leSetRandomAddress(labRandomAddress))
    }

    private func labConnect(_ request: Beryl_Ipc_V1_LabConnect, lab: LabState, _ incoming: IncomingRequest) {
        let address: DeviceAddress
        do {
            guard let parsed = try labAddress(request.address, field: "address", optional: false) else { return }
            address = parsed
        } catch {
            incoming.fail(.invalidArgument, "\(error)", field: "address")
            return
        }
        guard lab.connecting == nil else {
            incoming.fail(.busy, "a connection attempt is under way (to \(lab.connecting!.address))")
            return
        }
        if let link = book.links.values.first(where: { $0.address == address }) {
            incoming.fail(.alreadyExists, "a link to \(address) exists (handle 0x\(String(link.handle, radix: 16)))", field: "address")
            return
        }
        guard let store else {
            incoming.fail(.internal, "the peripheral store is unusable")
            return
        }
        let identifier = store.seen(address, at: Date().timeIntervalSince1970).identifier
        lab.connecting = (identifier, address, LabOwnAddress(rawValue: UInt8(request.ownAddressType.rawValue)) ?? .public, incoming)
        perform(book.connect(lab.key, identifier: identifier, address: address).actions)
    }

    /// The Own_Address_Type for a central attempt: the lab's when the lab asked for that peer.
    func labOwnAddressType(connectingTo address: DeviceAddress) -> UInt8 {
        guard let connecting = lab?.connecting, connecting.address == address else { return 0 }
        return connecting.ownAddress.rawValue
    }

    /// Leaves the controller as the lab found it: no lab advertising, scanning or attempt, and the lab's links down.
    /// Apps' managers and their preserved state are not touched.
    private func labFactoryReset(_ lab: LabState) {
        lab.advertising = nil
        lab.scan = nil
        if let connecting = lab.connecting {
            lab.connecting = nil
            perform(book.cancel(lab.key, identifier: connecting.identifier).actions)
            connecting.incoming.fail(.cancelled, "factory reset")
        }
        for link in book.links.values where link.holders == [lab.key] || (link.holders.isEmpty && !link.isCentral) {
            command(HCICommands.disconnect(handle: link.handle))
        }
        updateAdvertising()
        updateScanning()
    }

    func labSessionClosed(_ id: UInt64) {
        guard let lab, lab.session == id else { return }
        host.logger.info("lab session \(id) closed")
        labFactoryReset(lab)
        self.lab = nil
        updateAdvertising()
        updateScanning()
    }

    // MARK: Events for the lab

    func labReport(_ report: AdvertisingReport) {
        guard let lab, lab.scan != nil else { return }
        var event = Beryl_Ipc_V1_ManagerEvent()
        event.lab.scanReport = .with {
            $0.eventType = UInt32(report.kind.rawValue)
            $0.address = report.address.description
            $0.rssi = Int32(report.rssi)
            $0.data = Data(report.data)
        }
        send(event, to: lab.session)
    }

    func labLinkEvent(_ event: LinkEvent) {
        guard let lab else { return }
        var out = Beryl_Ipc_V1_ManagerEvent()
        switch event {
        case .connected(let handle, _, let peer):
            guard let identifier = book.identifier(for: handle), let link = book.link(for: identifier) else { return }
            out.lab.linkUp = labLink(link)
            if let connecting = lab.connecting, link.isCentral, connecting.address == peer {
                lab.connecting = nil
                connecting.incoming.respond(.with { $0.manager.labLink = labLink(link) })
            }
        case .connectionFailed(let status):
            out.lab.connectFailed = UInt32(status)
        case .disconnected(let handle, let reason):
            out.lab.linkDown = .with { $0.handle = UInt32(handle); $0.reason = UInt32(reason) }
        default:
            return
        }
        send(out, to: lab.session)
    }

    func labTimingChanged(_ timing: LinkTiming, isUpdate: Bool) {
        linkTimings[timing.handle] = timing
        guard isUpdate, let lab, let identifier = book.identifier(for: timing.handle), let link = book.link(for: identifier) else { return }
        var event = Beryl_Ipc_V1_ManagerEvent()
        event.lab.linkUpdated = labLink(link)
        send(event, to: lab.session)
    }

    private func labLink(_ link: ConnectionBook.Link) -> Beryl_Ipc_V1_LabLink {
        .with {
            $0.handle = UInt32(link.handle)
            $0.peer = link.address.description
            $0.central = link.isCentral
            if let timing = linkTimings[link.handle] {
                $0.interval = UInt32(timing.interval)
                $0.latency = UInt32(timing.latency)
                $0.supervisionTimeout = UInt32(timing.supervisionTimeout)
            }
        }
    }

    private func labAddress(_ text: String, field: String, optional: Bool) throws -> DeviceAddress? {
        if text.isEmpty, optional { return nil }
        guard let address = DeviceAddress(text) else { throw LabAddressError(field: field, text: text) }
        return address
    }

    private func refusalField(_ refusal: LabAdvertising.Refusal) -> String {
        switch refusal {
        case .dataTooLong(let field, _): field
        case .directedNotConnectable: "directed_to"
        case .intervalOutOfRange: "interval"
        }
    }
}

struct LabAddressError: Error, CustomStringConvertible {
    var field: String
    var text: String
    var description: String { "\(field): '\(text)' is not an address (AA:BB:CC:DD:EE:FF or AA:BB:CC:DD:EE:FF/random)" }
}
