import BerylSupervisor
import Foundation

/// A demo step that did not go as expected: what it expected and what came instead.
struct DemoFailure: Error {
    var expected: String
    var got: String
}

/// How the demo tells its story: one readable line per step (what happened, on which side, how long it took), or
/// one JSON object per event with `--json`. Long waits report progress every few seconds.
final class DemoShow {
    let json: Bool
    private let started = ContinuousClock.now
    private var current = ""

    init(json: Bool) { self.json = json }

    /// Runs one step; `body` returns the detail to print after "ok".
    func step(_ name: String, side: String, _ body: () throws -> String) throws {
        try step(name, side: side, reporting: { (try body(), [:]) })
    }

    /// Runs one step whose JSON event also carries `fields` (a pid, say), for scripts to read rather than the detail.
    func step(_ name: String, side: String, reporting body: () throws -> (detail: String, fields: [String: Any])) throws {
        current = name
        let began = ContinuousClock.now
        if !json { out("demo: " + "[\(side)] \(name)".padding(toLength: 62, withPad: " ", startingAt: 0)) }
        do {
            let (detail, fields) = try body()
            let milliseconds = Self.milliseconds(ContinuousClock.now - began)
            if json {
                emit(fields.merging(["event": "step", "step": name, "side": side, "ok": true, "ms": milliseconds, "detail": detail]) { $1 })
            } else {
                out("ok" + (detail.isEmpty ? "" : ", \(detail)") + " (\(Self.readable(milliseconds)))" + "\n")
            }
        } catch let failure as DemoFailure {
            if json {
                emit(["event": "step", "step": name, "side": side, "ok": false, "ms": Self.milliseconds(ContinuousClock.now - began),
                      "expected": failure.expected, "got": failure.got])
            } else {
                out("FAILED\ndemo:   expected: \(failure.expected)\ndemo:   got:      \(failure.got)" + "\n")
            }
            throw failure
        }
    }

    /// Waits for `condition`, saying every 3 s what it is waiting for; fails with `expected` and what `got` says.
    func wait(_ timeout: Duration, for what: String, got: () -> String = { "nothing in time" }, _ condition: () -> Bool) throws {
        let deadline = ContinuousClock.now + timeout
        var nextReport = ContinuousClock.now + .seconds(3)
        let began = ContinuousClock.now
        while !condition() {
            guard ContinuousClock.now < deadline else { throw DemoFailure(expected: "\(what) within \(timeout)", got: got()) }
            if ContinuousClock.now >= nextReport {
                let seconds = Self.milliseconds(ContinuousClock.now - began) / 1000
                if json {
                    emit(["event": "progress", "step": current, "waitingFor": what, "seconds": seconds])
                } else {
                    out("\ndemo:   … waiting for \(what) (\(seconds) s)".padding(toLength: 68, withPad: " ", startingAt: 0))
                }
                nextReport = ContinuousClock.now + .seconds(3)
            }
            usleep(50_000)
        }
    }

    func note(_ line: String) {
        if json { emit(["event": "note", "text": line]) } else { out("demo:   \(line)\n") }
    }

    func finished(ok: Bool) {
        let milliseconds = Self.milliseconds(ContinuousClock.now - started)
        if json { emit(["event": "done", "ok": ok, "ms": milliseconds]) } else { out("demo: \(ok ? "done" : "failed") in \(Self.readable(milliseconds))\n") }
    }

    /// Straight to the descriptor: a step's line is written in two parts, before and after the step.
    private func out(_ text: String) { Console.out(text) }

    private func emit(_ object: [String: Any]) { EventPrinter(json: true).emit(object) }

    static func milliseconds(_ duration: Duration) -> Int { Int(duration / .milliseconds(1)) }
    static func readable(_ milliseconds: Int) -> String { milliseconds < 1000 ? "\(milliseconds) ms" : String(format: "%.1f s", Double(milliseconds) / 1000) }
}
