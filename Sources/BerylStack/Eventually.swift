import Foundation

/// Waits for `condition` for up to `timeout`, polling; returns whether it became true (for tests and tools that
/// watch another process).
public func eventually(_ timeout: Duration = .seconds(10), _ condition: () -> Bool) -> Bool {
    let clock = ContinuousClock()
    let deadline = clock.now + timeout
    while clock.now < deadline {
        if condition() { return true }
        usleep(20_000)
    }
    return condition()
}
