import FoundationEssentials
import Glibc

/// Memory figures of a process from /proc, for Status and the benchmarks.
public enum ProcessStats {
    /// Resident set size in bytes (VmRSS), nil if the process is gone.
    public static func residentBytes(pid: Int32) -> UInt64? {
        field("VmRSS:", in: "/proc/\(pid)/status").map { $0 * 1024 }
    }

    /// Proportional set size in bytes: shared pages divided among the processes sharing them.
    public static func proportionalBytes(pid: Int32) -> UInt64? {
        field("Pss:", in: "/proc/\(pid)/smaps_rollup").map { $0 * 1024 }
    }

    /// Unique set size in bytes: pages no other process maps (Private_Clean + Private_Dirty). Unlike PSS it does not
    /// move with whatever else on the machine maps the same libraries.
    public static func privateBytes(pid: Int32) -> UInt64? {
        // One read of the file: both fields of the same moment.
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/smaps_rollup", encoding: .utf8),
              let clean = field("Private_Clean:", inText: text), let dirty = field("Private_Dirty:", inText: text) else { return nil }
        return (clean + dirty) * 1024
    }

    public static func openFileCount(pid: Int32) -> Int? {
        try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count
    }

    public static func isAlive(pid: Int32) -> Bool {
        guard pid > 0, kill(pid, 0) == 0 || errno == EPERM, let state = statFields(pid: pid)?.first else { return false }
        // A zombie is dead for every purpose here.
        return state != "Z" && state != "X"
    }

    /// When the process started, in clock ticks since boot: with the pid, names one process even after pids wrap.
    public static func startTicks(pid: Int32) -> UInt64? {
        statFields(pid: pid).flatMap { $0.count > 19 ? UInt64($0[19]) : nil }
    }

    /// User plus system CPU time consumed so far.
    public static func cpuTime(pid: Int32) -> Duration? {
        // The process's CPU clock counts nanoseconds, exited threads included; /proc's ticks (10 ms) are too coarse
        // for CPU per read over a few hundred reads.
        // The clock id packs the pid into its bits: one above PID_MAX_LIMIT would name another clock.
        guard pid > 0, pid < 1 << 22, kill(pid, 0) == 0 || errno == EPERM else { return nil }
        var clock = clockid_t()
        var time = timespec()
        if clock_getcpuclockid(pid, &clock) == 0, clock_gettime(clock, &time) == 0 {
            return .seconds(time.tv_sec) + .nanoseconds(time.tv_nsec)
        }
        guard let fields = statFields(pid: pid), fields.count > 13, let user = Int64(fields[11]), let system = Int64(fields[12]) else { return nil }
        let ticks = Int64(sysconf(Int32(_SC_CLK_TCK)))
        return .milliseconds((user + system) * 1000 / max(ticks, 1))
    }

    /// /proc/PID/stat's fields from the state on (field 3, at index 0; proc(5)): what comes before is the command name,
    /// in parentheses, which may itself hold spaces and parentheses.
    private static func statFields(pid: Int32) -> [Substring]? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")"), stat.index(close, offsetBy: 2, limitedBy: stat.endIndex) != nil else { return nil }
        return stat[stat.index(close, offsetBy: 2)...].split(separator: " ")
    }

    private static func field(_ name: String, in path: String) -> UInt64? {
        (try? String(contentsOfFile: path, encoding: .utf8)).flatMap { field(name, inText: $0) }
    }

    private static func field(_ name: String, inText text: String) -> UInt64? {
        for line in text.split(separator: "\n") where line.hasPrefix(name) {
            let digits = line.dropFirst(name.count).split(whereSeparator: { $0 == " " || $0 == "\t" }).first
            return digits.flatMap { UInt64($0) }
        }
        return nil
    }
}
