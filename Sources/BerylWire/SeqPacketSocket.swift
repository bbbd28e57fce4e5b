import CBerylSys
#if canImport(Glibc)
import Glibc
#endif

public enum IPCSocketError: Error, Equatable, Sendable, CustomStringConvertible {
    case pathTooLong(String)
    case alreadyRunning(String)
    case notASocket(String)
    case system(call: String, path: String, errno: Int32)

    public var description: String {
        switch self {
        case .pathTooLong(let path): "socket path is longer than a UNIX socket allows (107 bytes): \(path)"
        case .alreadyRunning(let path): "another process is already serving \(path)"
        case .notASocket(let path): "\(path) exists and is not a socket; refusing to replace it"
        case .system(let call, let path, let code): "\(call) \(path): \(String(cString: strerror(code)))"
        }
    }
}

/// Who is on the other end of a UNIX socket, from the kernel (SO_PEERCRED), not from anything the peer says.
public struct PeerCredentials: Sendable, Equatable {
    public var pid: Int32
    public var uid: UInt32
    public var gid: UInt32

    public init(pid: Int32, uid: UInt32, gid: UInt32) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
    }
}

/// What one non-blocking receive produced.
public enum Received: Equatable {
    case message([UInt8])
    /// The datagram was longer than the cap; the kernel discarded it and reported its true length.
    case tooLarge(length: Int)
    case wouldBlock
    case closed
}

public enum Sent: Equatable {
    case sent
    case wouldBlock
    case closed
}

/// Thin helpers over AF_UNIX SOCK_SEQPACKET sockets: the kernel keeps message boundaries, so there is no framing code.
public enum SeqPacketSocket {
    public static func makeAddress(_ path: String) throws(IPCSocketError) -> sockaddr_un {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard bytes.count < capacity else { throw .pathTooLong(path) }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        return address
    }

    static func newSocket(path: String, nonBlocking: Bool) throws(IPCSocketError) -> Int32 {
        var type = Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        if nonBlocking { type |= Int32(SOCK_NONBLOCK.rawValue) }
        let fd = socket(AF_UNIX, type, 0)
        guard fd >= 0 else { throw .system(call: "socket", path: path, errno: errno) }
        return fd
    }

    /// Connects (blocking). Returns the fd or throws with the errno, e.g. ENOENT or ECONNREFUSED.
    public static func connect(path: String, nonBlocking: Bool = false) throws(IPCSocketError) -> Int32 {
        var address = try makeAddress(path)
        let fd = try newSocket(path: path, nonBlocking: false)
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard result == 0 else {
            let code = errno
            close(fd)
            throw .system(call: "connect", path: path, errno: code)
        }
        if nonBlocking { setNonBlocking(fd) }
        return fd
    }

    /// Binds and listens at `path`. A live server already there is refused; a stale socket file
    /// (nobody accepting, as a crashed daemon leaves behind) is replaced; any other file is left alone.
    public static func listen(path: String, mode: mode_t = 0o660) throws(IPCSocketError) -> Int32 {
        try clearStale(path: path)
        var address = try makeAddress(path)
        let fd = try newSocket(path: path, nonBlocking: true)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard bound == 0 else {
            let code = errno
            close(fd)
            throw code == EADDRINUSE ? .alreadyRunning(path) : .system(call: "bind", path: path, errno: code)
        }
        chmod(path, mode)
        guard Glibc.listen(fd, 128) == 0 else {
            let code = errno
            close(fd)
            unlink(path)
            throw .system(call: "listen", path: path, errno: code)
        }
        return fd
    }

    static func clearStale(path: String) throws(IPCSocketError) {
        var info = stat()
        guard lstat(path, &info) == 0 else { return }
        guard (info.st_mode & S_IFMT) == S_IFSOCK else { throw .notASocket(path) }
        let probe: Int32
        do {
            probe = try connect(path: path)
        } catch {
            guard case .system(_, _, let code) = error, code == ECONNREFUSED || code == ENOENT else { throw error }
            // Nobody accepts there: a crashed daemon's leftover.
            if code == ECONNREFUSED { unlink(path) }
            return
        }
        close(probe)
        throw .alreadyRunning(path)
    }

    public static func accept(listener: Int32) -> Int32? {
        let fd = beryl_accept_nonblocking(listener)
        return fd >= 0 ? fd : nil
    }

    public static func setNonBlocking(_ fd: Int32) {
        let flags = fcntl(fd, F_GETFL)
        _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
    }

    public static func peerCredentials(_ fd: Int32) -> PeerCredentials? {
        var pid: pid_t = 0, uid: uid_t = 0, gid: gid_t = 0
        guard beryl_peer_credentials(fd, &pid, &uid, &gid) == 0 else { return nil }
        return PeerCredentials(pid: pid, uid: uid, gid: gid)
    }

    public static func send(_ fd: Int32, _ bytes: [UInt8]) -> Sent {
        let result = bytes.withUnsafeBytes { raw in
            Glibc.send(fd, raw.baseAddress, raw.count, Int32(MSG_NOSIGNAL) | Int32(MSG_DONTWAIT))
        }
        if result >= 0 { return .sent }
        switch errno {
        case EAGAIN, EWOULDBLOCK, ENOBUFS: return .wouldBlock
        case EINTR: return send(fd, bytes)
        default: return .closed
        }
    }

    /// Receives one datagram of at most `cap` bytes without blocking.
    public static func receive(_ fd: Int32, cap: Int, buffer: inout [UInt8]) -> Received {
        if buffer.count < cap { buffer = [UInt8](repeating: 0, count: cap) }
        let length = buffer.withUnsafeMutableBytes { raw in
            recv(fd, raw.baseAddress, cap, Int32(MSG_TRUNC) | Int32(MSG_DONTWAIT))
        }
        if length < 0 {
            switch errno {
            case EAGAIN, EWOULDBLOCK: return .wouldBlock
            case EINTR: return receive(fd, cap: cap, buffer: &buffer)
            default: return .closed
            }
        }
        if length > cap { return .tooLarge(length: length) }
        // On SEQPACKET a zero-length read is either an empty datagram or end of stream; the hang-up flag tells which.
        if length == 0 && peerHungUp(fd) { return .closed }
        return .message(Array(buffer[0..<length]))
    }

    /// A connected pair (non-blocking, close-on-exec): one end stays, the other is passed on with `send(_:_:passing:)`.
    public static func pair() throws(IPCSocketError) -> (kept: Int32, passed: Int32) {
        var fds: [Int32] = [-1, -1]
        let result = beryl_seqpacket_pair(&fds)
        guard result == 0 else { throw .system(call: "socketpair", path: "", errno: -result) }
        return (fds[0], fds[1])
    }

    /// Sends one datagram with a descriptor attached (SCM_RIGHTS); the caller still owns `descriptor`.
    public static func send(_ fd: Int32, _ bytes: [UInt8], passing descriptor: Int32) -> Sent {
        let result = bytes.withUnsafeBytes { beryl_send_with_descriptor(fd, $0.baseAddress, UInt($0.count), descriptor) }
        if result >= 0 { return .sent }
        switch Int32(-result) {
        case EAGAIN, EWOULDBLOCK, ENOBUFS: return .wouldBlock
        default: return .closed
        }
    }

    /// As `receive`, and the descriptor the datagram carried (nil when none), which the caller then owns.
    public static func receive(_ fd: Int32, cap: Int, buffer: inout [UInt8], passed: inout Int32?) -> Received {
        if buffer.count < cap { buffer = [UInt8](repeating: 0, count: cap) }
        var descriptor: Int32 = -1
        let length = buffer.withUnsafeMutableBytes { beryl_receive_with_descriptor(fd, $0.baseAddress, UInt(cap), &descriptor) }
        passed = descriptor >= 0 ? descriptor : nil
        if length < 0 {
            switch Int32(-length) {
            case EAGAIN, EWOULDBLOCK: return .wouldBlock
            default: return .closed
            }
        }
        if length > cap { return .tooLarge(length: length) }
        if length == 0 && peerHungUp(fd) { return .closed }
        return .message(Array(buffer[0..<length]))
    }

    static func peerHungUp(_ fd: Int32) -> Bool {
        beryl_peer_hung_up(fd) != 0
    }
}
