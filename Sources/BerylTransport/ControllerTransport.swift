import CBerylHCISocket
import Glibc

/// Why a controller transport could not be opened, in Core Bluetooth's terms: `unsupported` (this
/// machine cannot do it), `unauthorized` (not allowed), `unavailable` (not there now; worth retrying).
public enum TransportOpenError: Error, Equatable, Sendable, CustomStringConvertible {
    case unsupported(String)
    case unauthorized(String)
    case unavailable(String)

    public var description: String {
        switch self {
        case .unsupported(let why), .unauthorized(let why), .unavailable(let why): why
        }
    }
}

public enum ControllerTransport {
    /// Opens the transport and returns a non-blocking fd carrying H4 (user channel: HCI packets with the same type byte).
    /// A `tcp:` connection may still be under way: wait for the fd to be writable, then ask `connectionFailure`.
    public static func open(_ spec: TransportSpec) throws(TransportOpenError) -> Int32 {
        var why = [CChar](repeating: 0, count: 256)
        switch spec {
        case .userChannel(let device):
            let fd = beryl_hci_user_channel_open(Int32(device), &why, why.count)
            guard fd >= 0 else { throw classify(-fd, text(why)) }
            return fd
        case .uart(let path, let baud, let flow):
            let fd = beryl_uart_open(path, Int32(baud), flow ? 1 : 0, &why, why.count)
            guard fd >= 0 else { throw classify(-fd, text(why)) }
            return fd
        case .tcp(let host, let port):
            do {
                return try StreamSocket.connectTCP(host: host, port: port, nonBlocking: true)
            } catch {
                throw .unavailable("cannot reach the controller at \(host):\(port): \(error)")
            }
        case .unix(let path):
            do {
                let fd = try StreamSocket.connectUnix(path: path)
                setNonBlocking(fd)
                return fd
            } catch {
                throw .unavailable("cannot reach the controller at \(path): \(error)")
            }
        }
    }

    private static func text(_ buffer: [CChar]) -> String {
        String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Why an in-progress connection failed, or nil once it is up.
    public static func connectionFailure(_ fd: Int32, _ spec: TransportSpec) -> String? {
        let code = StreamSocket.pendingError(fd)
        return code == 0 ? nil : "cannot reach the controller at \(spec): \(String(cString: strerror(code)))"
    }

    public static func setUARTBaud(_ fd: Int32, _ baud: Int) -> Bool { beryl_uart_set_baud(fd, Int32(baud)) == 0 }

    private static func classify(_ code: Int32, _ why: String) -> TransportOpenError {
        switch code {
        case EAFNOSUPPORT, EPROTONOSUPPORT: .unsupported(why)
        case EPERM, EACCES: .unauthorized(why)
        default: .unavailable(why)
        }
    }

    private static func setNonBlocking(_ fd: Int32) {
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
    }
}

/// A pseudo-terminal whose master end this process holds; the slave path works like a serial device.
public enum PseudoTerminal {
    public static func open() -> (master: Int32, slavePath: String)? {
        var path = [CChar](repeating: 0, count: 128)
        let master = beryl_pty_open(&path, path.count)
        guard master >= 0 else { return nil }
        return (master, String(decoding: path.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
    }
}
