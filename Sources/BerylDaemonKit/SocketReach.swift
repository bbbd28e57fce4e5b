import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// Whether a user could connect to a daemon's UNIX socket, so that managerd can say why an app it launches would be
/// refused before the app finds out alone. connect(2) on a path needs search permission on every directory above the
/// socket and write permission on the socket itself (unix(7)); the kernel checks the owner's bits for the owner, the
/// group's for a member of the file's group, the others' for anyone else, and lets root through.
public enum SocketReach {
    public struct Credentials: Equatable, Sendable {
        public var uid: UInt32
        public var gid: UInt32
        /// Supplementary groups, as initgroups(3) gives the user at launch.
        public var groups: Set<UInt32>

        public init(uid: UInt32, gid: UInt32, groups: Set<UInt32> = []) {
            self.uid = uid
            self.gid = gid
            self.groups = groups
        }

        /// The user's account as the system knows it (nil when there is no such user).
        public static func of(user: String) -> Credentials? {
            guard let entry = getpwnam(user) else { return nil }
            let gid = entry.pointee.pw_gid
            var count: Int32 = 64
            var groups = [gid_t](repeating: 0, count: Int(count))
            if getgrouplist(user, gid, &groups, &count) < 0 {
                groups = [gid_t](repeating: 0, count: Int(count))
                _ = getgrouplist(user, gid, &groups, &count)
            }
            return Credentials(uid: entry.pointee.pw_uid, gid: gid, groups: Set(groups.prefix(Int(max(count, 0)))))
        }
    }

    /// One file on the way to the socket: its path, permission bits and owner.
    public struct Step: Equatable, Sendable, CustomStringConvertible {
        public var path: String
        public var mode: UInt32
        public var uid: UInt32
        public var gid: UInt32
        public var isSocket: Bool

        public init(path: String, mode: UInt32, uid: UInt32, gid: UInt32, isSocket: Bool) {
            (self.path, self.mode, self.uid, self.gid, self.isSocket) = (path, mode, uid, gid, isSocket)
        }

        public var description: String {
            "\(path) (\(String(mode & 0o777, radix: 8)), \(Self.userName(uid)):\(Self.groupName(gid)))"
        }

        static func userName(_ uid: UInt32) -> String { Accounts.user(uid: uid)?.name ?? String(uid) }
        static func groupName(_ gid: UInt32) -> String { Accounts.groupName(gid: gid) ?? String(gid) }
    }

    /// The first step that refuses `who`, or nil when the socket is reachable.
    public static func refusal(for who: Credentials, along steps: [Step]) -> Step? {
        guard who.uid != 0 else { return nil }
        return steps.first { step in
            let needed: UInt32 = step.isSocket ? 0o2 : 0o1  // write on the socket, search on a directory
            let shift: UInt32 = step.uid == who.uid ? 6 : (step.gid == who.gid || who.groups.contains(step.gid)) ? 3 : 0
            return (step.mode >> shift) & needed == 0
        }
    }

    /// The directories from / down to the socket and the socket itself, as they are now (nil: one cannot be read).
    public static func steps(toSocket path: String) -> [Step]? {
        let absolute = URL(fileURLWithPath: path).standardizedFileURL.path
        var prefixes = ["/"]
        var current = ""
        for component in absolute.split(separator: "/") {
            current += "/" + component
            prefixes.append(current)
        }
        var steps: [Step] = []
        for (index, prefix) in prefixes.enumerated() {
            var info = stat()
            guard stat(prefix, &info) == 0 else { return nil }
            steps.append(Step(path: prefix, mode: UInt32(info.st_mode), uid: info.st_uid, gid: info.st_gid,
                              isSocket: index == prefixes.count - 1))
        }
        return steps
    }

    /// Why `user` cannot connect to the socket at `path`, in words a board's administrator can act on; nil when it can
    /// (or when the socket is not there yet to judge).
    public static func whyUnreachable(user: String, socket path: String) -> String? {
        guard let who = Credentials.of(user: user) else { return "there is no user \(user)" }
        guard let steps = steps(toSocket: path), let refused = refusal(for: who, along: steps) else { return nil }
        if refused.isSocket {
            return "\(user) cannot write to \(refused): add \(user) to group \(Step.groupName(refused.gid))"
        }
        return "\(user) cannot search \(refused)"
    }
}
