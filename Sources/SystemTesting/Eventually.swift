#if canImport(Glibc)
import Glibc
#endif

/// Polls `condition` until it holds or `timeout` passes: the one way a test waits for something
/// that has no event to wait on (a row in Postgres, a key in Redis, a thread gone). Never a fixed
/// sleep: a fixed sleep is either too short on a loaded machine or wasted on an idle one.
///
/// The bound counts polls (`timeout` ÷ `interval`), not wall time: on two cores a full parallel run
/// can keep a test from running for many seconds, which must not use up its wait.
///
/// ```swift
/// let stored = try await eventually(timeout: .seconds(20)) { try await count() == 100 }
/// #expect(stored, "every job stored")
/// ```
/// - Returns: whether `condition` held.
public func eventually(
    timeout: Duration = .seconds(20), interval: Duration = .milliseconds(50), _ condition: () async throws -> Bool
) async throws -> Bool {
    for _ in 0..<max(1, Int(timeout / interval)) {
        if try await condition() { return true }
        try await Task.sleep(for: interval)
    }
    return try await condition()
}

/// `eventually` for synchronous code on a thread of its own (a throwaway server's synchronous
/// set-up, a body inside `offload { }`): the same bound in polls, the calling thread blocked
/// between them. The one blocking poll of the test house; never call it from the cooperative pool
/// (an async test calls `eventually`).
/// - Returns: whether `condition` held.
public func eventuallyBlocking(
    timeout: Duration = .seconds(20), interval: Duration = .milliseconds(50), _ condition: () throws -> Bool
) rethrows -> Bool {
    let (seconds, attoseconds) = interval.components
    let nanoseconds = seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    for _ in 0..<max(1, Int(timeout / interval)) {
        if try condition() { return true }
        var request = timespec(tv_sec: Int(nanoseconds / 1_000_000_000), tv_nsec: Int(nanoseconds % 1_000_000_000))
        var remaining = timespec()
        while nanosleep(&request, &remaining) != 0, errno == EINTR { request = remaining }
    }
    return try condition()
}
