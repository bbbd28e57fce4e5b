import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// The system's users and groups, as a daemon asks about its peers (getpwuid(3), getgrnam(3)).
public enum Accounts {
    public struct User: Equatable, Sendable {
        public var name: String
        public var primaryGroup: UInt32
    }

    public struct Group: Equatable, Sendable {
        public var gid: UInt32
        /// The group's listed members (not the users whose primary group it is).
        public var members: [String]
    }

    public static func user(uid: UInt32) -> User? {
        guard let entry = getpwuid(uid) else { return nil }
        return User(name: String(cString: entry.pointee.pw_name), primaryGroup: entry.pointee.pw_gid)
    }

    public static func groupName(gid: UInt32) -> String? { getgrgid(gid).map { String(cString: $0.pointee.gr_name) } }

    public static func group(named name: String) -> Group? {
        guard let group = getgrnam(name) else { return nil }
        var members: [String] = []
        var cursor = group.pointee.gr_mem
        while let member = cursor?.pointee {
            members.append(String(cString: member))
            cursor = cursor?.advanced(by: 1)
        }
        return Group(gid: group.pointee.gr_gid, members: members)
    }

    /// A user's uid and primary gid, by name (getpwnam(3)).
    public static func ids(ofUser name: String) -> (uid: UInt32, gid: UInt32)? {
        getpwnam(name).map { ($0.pointee.pw_uid, $0.pointee.pw_gid) }
    }

    /// Why a file that says what to run as whom cannot be trusted: owned by someone other than root or `owner`, or
    /// writable by group or others (anyone who could write it could run commands as the users it names). Nil: it can.
    public static func whyUntrusted(_ path: String, owner: UInt32) -> String? {
        var info = stat()
        guard stat(path, &info) == 0 else { return "cannot stat the file" }
        guard info.st_uid == 0 || info.st_uid == owner else { return "owned by uid \(info.st_uid), not root" }
        guard info.st_mode & 0o022 == 0 else { return "writable by group or others" }
        return nil
    }
}
