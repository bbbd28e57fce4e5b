import CBerylSys
#if canImport(Glibc)
import Glibc
#endif

public enum StreamSocketError: Error, Equatable, Sendable, CustomStringConvertible {
    case invalidAddress(String)
    case system(call: String, target: String, errno: Int32)

    public var description: String {
        switch self {
        case .invalidAddress(let target): "not a numeric IPv4 address: \(target)"
        case .system(let call, let target, let code): "\(call) \(target): \(String(cString: strerror(code)))"
        }
    }
}

public enum ReadResult: Equatable {
    case data([UInt8])
    case wouldBlock
    case closed
}

/// Stream sockets (UNIX and TCP) for H4 byte streams: berylsim serves them, hcid connects to them.
public enum StreamSocket {
    private static func unixAddress(_ path: String) throws(StreamSocketError) -> sockaddr_un {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { throw .invalidAddress(path) }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes + [0]) }
        return address
    }

    public static func listenUnix(path: String) throws(StreamSocketError) -> Int32 {
        var address = try unixAddress(path)
        unlink(path)
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { throw .system(call: "socket", target: path, errno: errno) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0, listen(fd, 8) == 0 else {
            let code = errno
            close(fd)
            throw .system(call: "bind", target: path, errno: code)
        }
        return fd
    }

    /// Listens on a numeric IPv4 address; port 0 picks a free one (see `localPort`).
    public static func listenTCP(host: String, port: UInt16) throws(StreamSocketError) -> Int32 {
        var address = try ipv4(host, port)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { throw .system(call: "socket", target: "\(host):\(port)", errno: errno) }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 8) == 0 else {
            let code = errno
            close(fd)
            throw .system(call: "bind", target: "\(host):\(port)", errno: code)
        }
        return fd
    }

    public static func localPort(_ fd: Int32) -> UInt16 {
        var address = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return UInt16(bigEndian: address.sin_port)
    }

    public static func connectUnix(path: String) throws(StreamSocketError) -> Int32 {
        var address = try unixAddress(path)
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .system(call: "socket", target: path, errno: errno) }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard result == 0 else {
            let code = errno
            close(fd)
            throw .system(call: "connect", target: path, errno: code)
        }
        return fd
    }

    /// With `nonBlocking`, returns as soon as the connection is under way: the socket turns writable when it
    /// completes, and `pendingError` then says whether it succeeded (so an event loop never waits on a SYN).
    public static func connectTCP(host: String, port: UInt16, nonBlocking: Bool = false) throws(StreamSocketError) -> Int32 {
        var address = try ipv4(host, port)
        var type = Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        if nonBlocking { type |= Int32(SOCK_NONBLOCK.rawValue) }
        let fd = socket(AF_INET, type, 0)
        guard fd >= 0 else { throw .system(call: "socket", target: "\(host):\(port)", errno: errno) }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 || (nonBlocking && errno == EINPROGRESS) else {
            let code = errno
            close(fd)
            throw .system(call: "connect", target: "\(host):\(port)", errno: code)
        }
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        return fd
    }

    /// The outcome of a non-blocking connect once the socket is writable: 0, or the errno it failed with.
    public static func pendingError(_ fd: Int32) -> Int32 {
        var code: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_ERROR, &code, &length) == 0 else { return errno }
        return code
    }

    private static func ipv4(_ host: String, _ port: UInt16) throws(StreamSocketError) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        let name = host == "localhost" ? "127.0.0.1" : host
        guard inet_pton(AF_INET, name, &address.sin_addr) == 1 else { throw .invalidAddress(host) }
        return address
    }

    public static func accept(_ listener: Int32) -> Int32? {
        let fd = beryl_accept_nonblocking(listener)
        guard fd >= 0 else { return nil }
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        return fd
    }

    public static func read(_ fd: Int32, max: Int = 16384) -> ReadResult {
        var buffer = [UInt8](repeating: 0, count: max)
        let count = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, max) }
        if count > 0 { return .data(Array(buffer[0..<count])) }
        if count == 0 { return .closed }
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? .wouldBlock : .closed
    }

    /// Writes what the socket takes now; returns how many bytes were written, or nil if the peer is gone.
    public static func write(_ fd: Int32, _ bytes: ArraySlice<UInt8>) -> Int? {
        var count = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL) | Int32(MSG_DONTWAIT)) }
        // A serial line is not a socket; write(2) it (daemons ignore SIGPIPE).
        if count < 0, errno == ENOTSOCK { count = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) } }
        if count >= 0 { return count }
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : nil
    }
}
