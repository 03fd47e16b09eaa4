// Linking the worker's modules makes Glibc's timespec/timeval resolve to CDispatch's copy of the
// header, and MemberImportVisibility then wants that module imported to read tv_sec & co.
import CDispatch
import Foundation
import Glibc

/// The clocks every row samples with.
///
/// CPU time is the calling thread's (`CLOCK_THREAD_CPUTIME_ID`): on a shared 2-core machine it
/// counts only the cycles this thread ran, so other people's builds inflate it far less than wall
/// time. Wall time (`CLOCK_MONOTONIC`) is recorded next to it so the two can be compared.
enum BenchClock {
    /// Nanoseconds of CPU this thread has used.
    @inline(__always)
    static func threadCPU() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now)
        return UInt64(now.tv_sec) &* 1_000_000_000 &+ UInt64(now.tv_nsec)
    }

    /// Monotonic wall-clock nanoseconds.
    @inline(__always)
    static func wall() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) &* 1_000_000_000 &+ UInt64(now.tv_nsec)
    }
}

/// Keeps a value alive and opaque to the optimizer, so a measured call is never dropped as dead code.
@inline(never)
@_optimize(none)
func blackHole<T>(_ value: T) {}
