import CBerylSys
import FoundationEssentials
import Glibc

public enum SpawnError: Error, CustomStringConvertible {
    case failed(executable: String, errno: Int32)

    public var description: String {
        switch self {
        case .failed(let executable, let code): "cannot start \(executable): \(String(cString: strerror(code)))"
        }
    }
}

public enum Spawn {
    /// The user apps are launched as when a manifest is written here: never root (nobody, when this runs as root),
    /// otherwise whoever runs this.
    public static var unprivilegedUser: String {
        getuid() == 0 ? "nobody" : String(cString: getpwuid(getuid())!.pointee.pw_name)
    }

    /// Starts `arguments[0]` with stdin from /dev/null and output appended to `logPath`.
    /// `diesWithParent`: the child gets SIGTERM when this process dies (a supervisor's daemons); not with `newSession`.
    public static func start(_ arguments: [String], environment: [String: String] = ProcessInfo.processInfo.environment,
                             newSession: Bool = false, logPath: String?, diesWithParent: Bool = false) throws -> Int32 {
        let environmentStrings = environment.map { "\($0.key)=\($0.value)" }
        let pid = withCStrings(arguments) { argv in
            withCStrings(environmentStrings) { envp in
                if diesWithParent {
                    if let logPath { return logPath.withCString { beryl_spawn_bound(argv, envp, $0) } }
                    return beryl_spawn_bound(argv, envp, nil)
                }
                if let logPath {
                    return logPath.withCString { beryl_spawn(argv, envp, newSession ? 1 : 0, $0) }
                }
                return beryl_spawn(argv, envp, newSession ? 1 : 0, nil)
            }
        }
        guard pid > 0 else { throw SpawnError.failed(executable: arguments[0], errno: -pid) }
        return pid
    }

    /// Starts `arguments[0]` in a new session as `uid`/`gid` (dropped to before exec when they are not the caller's),
    /// with `user`'s supplementary groups when named.
    public static func start(_ arguments: [String], environment: [String: String], logPath: String?, uid: UInt32, gid: UInt32,
                             user: String? = nil) throws -> Int32 {
        let environmentStrings = environment.map { "\($0.key)=\($0.value)" }
        let pid = withCStrings(arguments) { argv in
            withCStrings(environmentStrings) { envp in
                withOptionalCString(user) { user in
                    if let logPath { return logPath.withCString { beryl_spawn_as(argv, envp, $0, uid, gid, user) } }
                    return beryl_spawn_as(argv, envp, nil, uid, gid, user)
                }
            }
        }
        guard pid > 0 else { throw SpawnError.failed(executable: arguments[0], errno: -pid) }
        return pid
    }

    /// Reaps one finished child without blocking: (pid, how it ended), or nil when none has finished.
    public static func reap(_ pid: Int32 = -1) -> (pid: Int32, exit: ExitReason)? {
        var code: Int32 = 0
        var signalNumber: Int32 = 0
        let got = beryl_reap(pid, &code, &signalNumber)
        guard got > 0 else { return nil }
        return (got, signalNumber != 0 ? .signal(signalNumber) : .exit(code))
    }

    private static func withCStrings<R>(_ strings: [String], _ body: (UnsafePointer<UnsafePointer<CChar>?>) -> R) -> R {
        let duplicates = strings.map { strdup($0) }
        defer { duplicates.forEach { free($0) } }
        var pointers: [UnsafePointer<CChar>?] = duplicates.map { UnsafePointer($0) }
        pointers.append(nil)
        return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
    }
}

public enum ExitReason: Equatable, Sendable, CustomStringConvertible {
    case exit(Int32)
    case signal(Int32)

    public var description: String {
        switch self {
        case .exit(let code): "exit \(code)"
        case .signal(let number): "signal \(number)"
        }
    }
}

/// Where the stack's executables live: beside the running binary, or `$BERYL_BIN_DIR`.
public enum Executables {
    public static func directory() -> String {
        if let override = ProcessInfo.processInfo.environment["BERYL_BIN_DIR"] { return override }
        let me = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        // The directory part, as NSString's deletingLastPathComponent gives it ("/" for a file in the root).
        guard let slash = me.lastIndex(of: "/") else { return "" }
        return slash == me.startIndex ? "/" : String(me[..<slash])
    }

    public static func path(_ name: String) -> String { "\(directory())/\(name)" }
}

private func withOptionalCString<R>(_ text: String?, _ body: (UnsafePointer<CChar>?) -> R) -> R {
    guard let text else { return body(nil) }
    return text.withCString { body($0) }
}
