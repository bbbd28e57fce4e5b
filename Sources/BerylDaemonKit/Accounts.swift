import Foundation
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
}
