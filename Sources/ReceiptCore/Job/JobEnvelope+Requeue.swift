import Foundation

extension JobEnvelope {
    /// The envelope an operator sends back to the queue.
    ///
    /// Keeps the history of Apple calls (the audit trail), but gives the job a fresh retry
    /// budget: `RetryPolicy` gives up by the age of `firstFailedAt` and backs off by `attempt`,
    /// so with either kept the requeued job would die again at its next failure, or wait the
    /// longest backoff before its first retry.
    /// - Parameter origin: who requeued it (`.dashboard` or `.cli`).
    /// - Returns: the updated envelope.
    public func requeued(by origin: JobOrigin) -> JobEnvelope {
        var copy = self
        copy.origin = origin
        copy.attempt = 0
        copy.firstFailedAt = nil
        copy.lastFailedAt = nil
        copy.errorCode = nil
        copy.errorMessage = nil
        return copy
    }
}
