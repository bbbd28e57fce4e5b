/// Where hcid finds its controller, from `--transport SPEC`.
public enum TransportSpec: Equatable, Sendable, CustomStringConvertible {
    /// `userchannel:hci0`: the kernel's HCI user channel (AF_BLUETOOTH, HCI_CHANNEL_USER) on a board.
    case userChannel(device: UInt16)
    /// `uart:/dev/ttyAMA0,baud=115200,flow`: H4 over a serial line.
    case uart(path: String, baud: Int, flowControl: Bool)
    /// `tcp:HOST:PORT`: H4 over TCP (berylsim, Bumble, Zephyr hci_virt, Android's emulator).
    case tcp(host: String, port: UInt16)
    /// `unix:PATH`: H4 over a UNIX stream socket (berylsim).
    case unix(path: String)

    /// Baud rates termios can set on Linux (B9600 … B4000000).
    public static let supportedBaudRates: Set<Int> = [
        9600, 19200, 38400, 57600, 115200, 230400, 460800, 500000, 576000, 921600,
        1_000_000, 1_152_000, 1_500_000, 2_000_000, 2_500_000, 3_000_000, 3_500_000, 4_000_000,
    ]

    public init(parsing text: String) throws(TransportSpecError) {
        guard let colon = text.firstIndex(of: ":") else { throw .missingScheme(text) }
        let scheme = String(text[..<colon])
        let rest = String(text[text.index(after: colon)...])
        switch scheme {
        case "userchannel":
            guard rest.hasPrefix("hci"), let index = UInt16(rest.dropFirst(3)) else {
                throw .invalid(text, reason: "expected userchannel:hciN, e.g. userchannel:hci0")
            }
            self = .userChannel(device: index)
        case "uart":
            self = try Self.parseUART(rest, spec: text)
        case "tcp":
            guard let portColon = rest.lastIndex(of: ":"),
                  let port = UInt16(rest[rest.index(after: portColon)...]), port > 0 else {
                throw .invalid(text, reason: "expected tcp:HOST:PORT with a port from 1 to 65535")
            }
            let host = String(rest[..<portColon])
            guard !host.isEmpty else { throw .invalid(text, reason: "the host is empty") }
            self = .tcp(host: host, port: port)
        case "unix":
            guard rest.hasPrefix("/") || rest.hasPrefix(".") else {
                throw .invalid(text, reason: "expected unix:PATH with an absolute or ./relative path")
            }
            self = .unix(path: rest)
        default:
            throw .unknownScheme(scheme)
        }
    }

    private static func parseUART(_ rest: String, spec: String) throws(TransportSpecError) -> TransportSpec {
        let parts = rest.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
        guard let path = parts.first, path.hasPrefix("/") else {
            throw .invalid(spec, reason: "expected uart:/dev/DEVICE[,baud=N][,flow|noflow]")
        }
        var baud = 115_200
        var flow = true
        for option in parts.dropFirst() {
            if option.hasPrefix("baud=") {
                guard let value = Int(option.dropFirst(5)), supportedBaudRates.contains(value) else {
                    throw .invalid(spec, reason: "unsupported baud rate in '\(option)'")
                }
                baud = value
            } else if option == "flow" {
                flow = true
            } else if option == "noflow" {
                flow = false
            } else {
                throw .invalid(spec, reason: "unknown UART option '\(option)'")
            }
        }
        return .uart(path: path, baud: baud, flowControl: flow)
    }

    public var description: String {
        switch self {
        case .userChannel(let device): "userchannel:hci\(device)"
        case .uart(let path, let baud, let flow): "uart:\(path),baud=\(baud),\(flow ? "flow" : "noflow")"
        case .tcp(let host, let port): "tcp:\(host):\(port)"
        case .unix(let path): "unix:\(path)"
        }
    }
}

public enum TransportSpecError: Error, Equatable, Sendable, CustomStringConvertible {
    case missingScheme(String)
    case unknownScheme(String)
    case invalid(String, reason: String)

    public var description: String {
        switch self {
        case .missingScheme(let spec): "transport '\(spec)' has no scheme; use userchannel:, uart:, tcp: or unix:"
        case .unknownScheme(let scheme): "unknown transport scheme '\(scheme)'; use userchannel:, uart:, tcp: or unix:"
        case .invalid(let spec, let reason): "transport '\(spec)': \(reason)"
        }
    }
}
