import Foundation

/// A job taken from the queue: the exact bytes (needed to acknowledge it) and the parsed envelope.
public struct ReservedJob: Sendable, Equatable {
    /// The bytes as stored in Redis.
    public var raw: [UInt8]
    /// The parsed envelope, or nil when the bytes are not a valid envelope (a poison job).
    public var envelope: JobEnvelope?

    /// Wraps reserved bytes, parsing the envelope.
    public init(raw: [UInt8]) {
        self.raw = raw
        self.envelope = try? JobEnvelope.decode(raw)
    }
}

/// How a reserved job leaves the worker's processing list: each is one atomic move in Redis.
public enum Settlement: Sendable, Equatable {
    /// Done (stored in Postgres, or nothing to store): drop it, publishing `result` for a waiting API request.
    case acknowledge(ReservedJob, result: [UInt8]?)
    /// Back to the retry set, to run again at `runAt`.
    case retry(ReservedJob, updated: JobEnvelope, runAt: Date)
    /// To the dead letters, with its failure history (`updated`), or as it was when unreadable.
    case bury(ReservedJob, updated: JobEnvelope?, at: Date)

    /// The job being settled.
    public var job: ReservedJob {
        switch self {
        case .acknowledge(let job, _), .retry(let job, _, _), .bury(let job, _, _): job
        }
    }
}
