import BerylCore
import BerylDaemonKit
import BerylEventLoop
import BerylIPC
import BerylSim
import BerylTransport
import Glibc

/// The sockets of one simulated controller and the host attached to it (one at a time, as on a UART).
final class ControllerPort {
    let index: Int
    let socketPath: String
    var tcpPort: UInt16 = 0
    var listeners: [EventRegistration] = []
    var hostFD: Int32?
    var hostReader: EventRegistration?
    var hostWriter: EventRegistration?
    var pending: [UInt8] = []

    init(index: Int, socketPath: String) {
        self.index = index
        self.socketPath = socketPath
    }
}

/// berylsim's shell: feeds host bytes into the sans-IO air, writes its output back, and wakes for its next deadline.
final class SimDaemon {
    static let maxPendingBytes = 4 * 1024 * 1024
    let host: DaemonHost
    let air: SimAir
    let seed: UInt64
    var ports: [ControllerPort] = []
    var timer: EventRegistration?
    var listenerFDs: [Int32] = []

    init(host: DaemonHost, air: SimAir, directory: String, tcp: (String, UInt16)?, seed: UInt64) throws {
        self.host = host
        self.air = air
        self.seed = seed
        air.logger = { [unowned host] in host.logger.debug($0) }
        try host.paths.createDirectories()
        for index in air.controllers.indices {
            let port = ControllerPort(index: index, socketPath: "\(directory)/controller-\(index).sock")
            let unixFD = try StreamSocket.listenUnix(path: port.socketPath)
            listenerFDs.append(unixFD)
            port.listeners.append(try host.loop.onReadable(unixFD) { [unowned self, unowned port] in self.accept(unixFD, for: port) })
            if let (address, base) = tcp {
                let tcpFD = try StreamSocket.listenTCP(host: address, port: base + UInt16(index))
                listenerFDs.append(tcpFD)
                port.tcpPort = StreamSocket.localPort(tcpFD)
                port.listeners.append(try host.loop.onReadable(tcpFD) { [unowned self, unowned port] in self.accept(tcpFD, for: port) })
            }
            ports.append(port)
        }
        host.handle = { [unowned self] incoming in self.handleControl(incoming) }
        host.onShutdown = { [unowned self] in self.shutdown() }
        host.logger.info("\(air.controllers.count) controllers in \(directory)" + (tcp.map { ", TCP from \($0.0):\($0.1)" } ?? "")
                         + (air.config.airTime ? ", air-time model on" : ""))
        pump()
    }

    private func accept(_ listener: Int32, for port: ControllerPort) {
        while let fd = StreamSocket.accept(listener) {
            guard port.hostFD == nil else {
                host.logger.warning("controller \(port.index) already has a host; refusing another")
                close(fd)
                continue
            }
            port.hostFD = fd
            port.pending.removeAll()
            _ = air.takeOutput(controller: port.index)
            port.hostReader = try? host.loop.onReadable(fd) { [unowned self, unowned port] in self.readHost(port) }
            host.logger.info("host attached to controller \(port.index)")
        }
    }

    private func readHost(_ port: ControllerPort) {
        guard let fd = port.hostFD else { return }
        switch StreamSocket.read(fd) {
        case .data(let bytes):
            air.receive(fromHost: bytes, controller: port.index, at: host.loop.uptime)
            pump()
        case .wouldBlock:
            return
        case .closed:
            detach(port, reason: "host disconnected")
        }
    }

    private func detach(_ port: ControllerPort, reason: String) {
        guard let fd = port.hostFD else { return }
        port.hostReader?.cancel()
        port.hostWriter?.cancel()
        port.hostReader = nil
        port.hostWriter = nil
        port.pending.removeAll()
        close(fd)
        port.hostFD = nil
        host.logger.info("controller \(port.index): \(reason)")
    }

    /// Brings the air up to now, hands each host its bytes, and sleeps until the air's next deadline.
    func pump() {
        air.advance(to: host.loop.uptime)
        for port in ports {
            let bytes = air.takeOutput(controller: port.index)
            guard port.hostFD != nil else { continue }  // no host: the bytes fall on the floor, as on an unplugged UART
            port.pending += bytes
            flush(port)
        }
        timer?.cancel()
        timer = nil
        if let next = air.nextDeadline {
            let wait = max(next - host.loop.uptime, .microseconds(50))
            timer = try? host.loop.after(wait) { [unowned self] in self.pump() }
        }
    }

    private func flush(_ port: ControllerPort) {
        guard let fd = port.hostFD, !port.pending.isEmpty else { return }
        guard let written = StreamSocket.write(fd, port.pending[...]) else {
            detach(port, reason: "host gone while writing")
            return
        }
        port.pending.removeFirst(written)
        if port.pending.count > Self.maxPendingBytes {
            detach(port, reason: "host stopped reading (\(port.pending.count) bytes pending)")
            return
        }
        if port.pending.isEmpty {
            port.hostWriter?.cancel()
            port.hostWriter = nil
        } else if port.hostWriter == nil {
            port.hostWriter = try? host.loop.onWritable(fd) { [unowned self, unowned port] in self.flush(port) }
        }
    }

    private func shutdown() {
        timer?.cancel()
        for port in ports {
            detach(port, reason: "simulator stopping")
            port.listeners.forEach { $0.cancel() }
            unlink(port.socketPath)
        }
        listenerFDs.forEach { close($0) }
    }
}
