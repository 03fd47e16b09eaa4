/// The one error type of the Redis queue adapter, for what Redis did that the adapter cannot
/// accept (connection failures surface as the façade's `RedisError`).
///
/// Match on ``code``, never on the message: the code is a closed set whose ``Code/rawValue`` is
/// stable, for logs and metric labels. ``message`` says what Redis answered, never a job's contents.
///
/// ```swift
/// do { try queue.settle(settlements, activity: tally) } catch let error as RedisQueueError where error.code == .transactionFailed { … }
/// ```
public struct RedisQueueError: Error, CustomStringConvertible, Equatable {
    /// What went wrong, as a closed set.
    public enum Code: String, Sendable, CaseIterable {
        /// A `MULTI`/`EXEC` or a script did not do what it was sent to do: aborted, refused, or a
        /// command inside it failed.
        case transactionFailed = "transaction_failed"
        /// Redis answered with a reply of a shape the command or script never returns: another
        /// program wrote the keys, or another script version runs under the name.
        case unexpectedReply = "unexpected_reply"
        /// Fewer replicas than `REDIS_MIN_REPLICAS_ACK` acknowledged a write in time.
        case replicationTimeout = "replication_timeout"
    }

    /// What went wrong.
    public var code: Code
    /// What Redis said (no job contents).
    public var message: String

    public var description: String { "RedisQueueError.\(code.rawValue): \(message)" }

    static func transactionFailed(_ message: String) -> RedisQueueError {
        RedisQueueError(code: .transactionFailed, message: message)
    }

    /// Redis answered `command` (or a script) with a reply of an unexpected shape.
    static func unexpectedReply(_ command: String) -> RedisQueueError {
        RedisQueueError(code: .unexpectedReply, message: "unexpected reply to \(command)")
    }
}
