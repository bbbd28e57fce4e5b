#if canImport(Glibc)
import Glibc
#endif

public enum LogLevel: Int, Sendable, Comparable, CaseIterable {
    case error = 1, warning, info, debug, trace

    public static func < (lhs: LogLevel, rhs: LogLevel) -> Bool { lhs.rawValue < rhs.rawValue }

    public var label: String {
        switch self {
        case .error: "error"
        case .warning: "warning"
        case .info: "info"
        case .debug: "debug"
        case .trace: "trace"
        }
    }
}

/// A line logger to stderr. Each process owns one, on its loop's thread.
public final class Logger {
    public let component: String
    public var level: LogLevel

    public init(component: String, level: LogLevel = .info) {
        self.component = component
        self.level = level
    }

    public func log(_ level: LogLevel, _ message: @autoclosure () -> String) {
        guard level <= self.level else { return }
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        var tm = tm()
        var seconds = now.tv_sec
        gmtime_r(&seconds, &tm)
        let stamp = String(format2: tm.tm_hour) + ":" + String(format2: tm.tm_min) + ":" + String(format2: tm.tm_sec)
            + "." + String(now.tv_nsec / 1_000_000).leftPadded(to: 3)
        let line = "\(stamp) \(component)[\(getpid())] \(level.label): \(message())\n"
        StandardError.write(line)
    }

    public func error(_ message: @autoclosure () -> String) { log(.error, message()) }
    public func warning(_ message: @autoclosure () -> String) { log(.warning, message()) }
    public func info(_ message: @autoclosure () -> String) { log(.info, message()) }
    public func debug(_ message: @autoclosure () -> String) { log(.debug, message()) }
}

/// Standard error as write(2) calls, without stdio's buffer or Foundation's FileHandle: a line written in one call stays
/// whole when several processes share a log.
public enum StandardError {
    public static func write(_ text: String) {
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let written = bytes.withUnsafeBytes { Glibc.write(2, $0.baseAddress, $0.count) }
            guard written > 0 else { return }
            bytes = bytes.dropFirst(written)
        }
    }
}

extension String {
    init(format2 value: Int32) {
        self = String(value).leftPadded(to: 2)
    }

    func leftPadded(to width: Int) -> String {
        String(repeating: "0", count: max(0, width - count)) + self
    }
}
