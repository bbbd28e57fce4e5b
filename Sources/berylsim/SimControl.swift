import BerylCore
import BerylIPC
import BerylSim

extension SimDaemon {
    /// Control requests from `beryl sim`; each answers with the state after it.
    func handleControl(_ incoming: IncomingRequest) -> Bool {
        guard case .sim(let request)? = incoming.request.kind else { return false }
        let count = air.controllers.count
        func index(_ value: UInt32) -> Int? {
            guard Int(value) < count else {
                incoming.fail(.invalidArgument, "no controller \(value); this air has \(count) (0–\(count - 1))", field: "index")
                return nil
            }
            return Int(value)
        }
        func rate(_ value: Double) -> Double? {
            guard value.isFinite, (0...1).contains(value) else {
                incoming.fail(.invalidArgument, "rate \(value) is not between 0 and 1", field: "rate")
                return nil
            }
            return value
        }
        air.advance(to: host.loop.uptime)
        switch request.kind {
        case .getState?:
            break
        case .move(let move)?:
            guard let i = index(move.index) else { return true }
            guard move.x.isFinite, move.y.isFinite else {
                incoming.fail(.invalidArgument, "position must be finite", field: "x")
                return true
            }
            air.move(i, x: move.x, y: move.y)
        case .range(let range)?:
            guard let i = index(range.index) else { return true }
            air.setInRange(i, range.inRange)
        case .drop(let drop)?:
            guard let value = rate(drop.rate) else { return true }
            air.dropRate = value
        case .delay(let delay)?:
            guard delay.milliseconds <= 60_000 else {
                incoming.fail(.invalidArgument, "delay over 60 s", field: "milliseconds")
                return true
            }
            air.delay = .milliseconds(Int64(delay.milliseconds))
        case .corrupt(let corrupt)?:
            guard let i = index(corrupt.index), let value = rate(corrupt.rate) else { return true }
            air.setCorruptRate(i, value)
        case .freeze(let freeze)?:
            guard let i = index(freeze.index) else { return true }
            air.freeze(i)
        case .thaw(let thaw)?:
            guard let i = index(thaw.index) else { return true }
            air.thaw(i)
        case .wedgeConnectionCancel(let wedge)?:
            guard let i = index(wedge.index) else { return true }
            air.setWedgesConnectionCancel(i, wedge.wedges)
        case .reset?:
            air.resetAll()
        case nil:
            incoming.fail(.unknownMessage, "empty simulator request")
            return true
        }
        pump()
        var response = Response()
        response.sim.state = snapshot()
        incoming.respond(response)
        return true
    }

    func snapshot() -> Beryl_Ipc_V1_SimState {
        var state = Beryl_Ipc_V1_SimState()
        state.dropRate = air.dropRate
        state.delayMs = UInt32(air.delay.components.seconds * 1000 + air.delay.components.attoseconds / 1_000_000_000_000_000)
        state.airTime = air.config.airTime
        state.seed = seed
        state.controllers = air.controllers.map { controller in
            let port = ports[controller.index]
            var info = Beryl_Ipc_V1_SimControllerInfo()
            info.index = UInt32(controller.index)
            info.address = controller.publicAddress.description
            info.x = controller.position.x
            info.y = controller.position.y
            info.inRange = !controller.forcedOutOfRange
            info.frozen = controller.frozen
            info.wedgesConnectionCancel = controller.wedgesConnectionCancel
            info.corruptRate = controller.corruptRate
            info.hostAttached = port.hostFD != nil
            info.advertising = controller.isAdvertising
            info.scanning = controller.isScanning
            info.initiating = controller.isInitiating
            info.connectionHandles = controller.connectionHandles.map(UInt32.init)
            info.commandFlowViolations = UInt32(controller.commandFlowViolations)
            info.aclOverflows = UInt32(controller.aclOverflows)
            info.invalidPackets = UInt32(controller.invalidPackets)
            info.socketPath = port.socketPath
            info.tcpPort = UInt32(port.tcpPort)
            let scan = controller.scanTiming
            info.scanIntervalUs = UInt32(scan.interval) * 625
            info.scanWindowUs = UInt32(scan.window) * 625
            info.scanFilterDuplicates = scan.filterDuplicates
            info.advertisingIntervalUs = UInt32(controller.advertisingIntervalMin) * 625
            return info
        }
        state.links = air.linkSnapshots.map { link in
            var info = Beryl_Ipc_V1_SimLinkInfo()
            info.central = UInt32(link.central)
            info.peripheral = UInt32(link.peripheral)
            info.intervalUs = UInt32(link.interval.components.seconds * 1_000_000 + link.interval.components.attoseconds / 1_000_000_000_000)
            info.encrypted = link.encrypted
            info.phy = UInt32(link.phy)
            info.maxOctets = UInt32(link.maxOctets)
            return info
        }
        return state
    }
}
