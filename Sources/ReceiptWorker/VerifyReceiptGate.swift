import Foundation
import ReceiptCore
import Synchronization

/// A worker process's view of `verifyReceipt`'s lifecycle, like ``CircuitGate`` for outages:
/// answers are counted locally on any thread and reach the shared ``VerifyReceiptWatch`` in
/// batches; the fetcher reads the result when it routes jobs.
///
/// **Threads.** ``record(_:)`` runs anywhere (HTTP engine thread); ``flush(now:)`` and
/// ``lifecycle`` on the fetcher thread only.
final class VerifyReceiptGate: @unchecked Sendable {
    private struct Pending {
        var gone = 0
        var answered = 0
        var deprecation: Date?
        var sunset: Date?
    }

    private let watch: (any VerifyReceiptWatch)?
    private let goneAfter: Int
    private let pending = Mutex(Pending())
    // Fetcher thread only.
    private(set) var lifecycle = VerifyReceiptLifecycle()

    /// Wraps `watch` (nil: `verifyReceipt` is never declared gone).
    init(watch: (any VerifyReceiptWatch)?, goneAfter: Int) {
        self.watch = watch
        self.goneAfter = max(1, goneAfter)
    }

    /// Counts one `verifyReceipt` outcome (Server API outcomes say nothing about it): answered when
    /// Apple gave a `status`.
    func record(_ outcome: ValidationOutcome) {
        guard watch != nil, outcome.backend == .verifyReceipt, !outcome.calls.isEmpty else { return }
        pending.withLock { pending in
            if outcome.notice?.gone == true {
                pending.gone += 1
            } else if outcome.appleStatus != nil {
                pending.answered += 1
            }
            pending.deprecation = outcome.notice?.deprecation ?? pending.deprecation
            pending.sunset = outcome.notice?.sunset ?? pending.sunset
        }
    }

    /// Sends the counts to the shared watch and takes its verdict.
    /// - Returns: whether this flush changed `goneSince` or the announced dates (to log once).
    /// - Throws: when Redis cannot be reached; the counts are dropped (a hint, like the circuit's).
    @discardableResult
    func flush(now: Date) throws -> Bool {
        guard let watch else { return false }
        let batch = pending.withLock { pending in
            defer { pending = Pending() }
            return pending
        }
        let updated = try watch.record(
            gone: batch.gone, answered: batch.answered, deprecation: batch.deprecation, sunset: batch.sunset, goneAfter: goneAfter, now: now)
        defer { lifecycle = updated }
        return updated != lifecycle
    }
}
