import Foundation
import Hiredis
import ReceiptCore

/// One worker lane's view of the Redis queues: reliable fetch with BLMOVE into its own processing
/// list, and every state change as one MULTI/EXEC so a job is always in exactly one place.
///
/// Not thread-safe: a lane owns it and calls it from its own thread.
public final class RedisWorkQueue: JobQueue {
    /// Dead-letter retention, trimmed on every burial (Sidekiq's defaults).
    public struct DeadLetterRetention: Sendable {
        public var maxJobs: Int
        public var maxAge: Duration
        /// Creates a retention policy (defaults 10,000 jobs / 180 days).
        public init(maxJobs: Int = 10_000, maxAge: Duration = .seconds(180 * 86_400)) {
            self.maxJobs = maxJobs
            self.maxAge = maxAge
        }
    }

    private let connection: RedisConnection
    private let keys: RedisKeys
    private let workerID: String
    private let queueKey: String
    private let processingKey: String
    private let retention: DeadLetterRetention
    private let resultTTLSeconds = 60
    private let startedAt = Date()
    /// Set when a call failed: the lane's processing list may then hold a job the lane no longer
    /// knows about: a BLMOVE that ran but whose reply was lost, or a job whose acknowledgement
    /// (or retry, or burial) failed when Redis went away. Such a job would stay there for good,
    /// since the janitor only empties the lists of lanes whose heartbeat lapsed, and this lane
    /// keeps beating. The next `reserve` gives those jobs back first (true at start too, for a lane
    /// rebuilt with the id of one that held jobs).
    private var mayHoldStrays = true
    /// How long a heartbeat stays valid; the janitor takes the lane's jobs back once it lapses.
    public var heartbeatTTLSeconds = 30

    /// Creates a lane's queue.
    /// - Parameters:
    ///   - connection: the lane's own connection (its command timeout must exceed the reserve timeout).
    ///   - keys: the key schema.
    ///   - workerID: unique per lane and process (host, pid, lane).
    ///   - kind: which queue the lane serves.
    ///   - retention: dead-letter caps.
    public init(
        connection: RedisConnection, keys: RedisKeys, workerID: String, kind: JobKind = .validate,
        retention: DeadLetterRetention = DeadLetterRetention()
    ) {
        self.connection = connection
        self.keys = keys
        self.workerID = workerID
        self.queueKey = keys.queue(kind.rawValue)
        self.processingKey = keys.processing(workerID)
        self.retention = retention
    }

    public func reserve(timeout: Duration) throws -> ReservedJob? {
        try tracked {
            // A lane reserves only with empty hands, so whatever its list still holds is a stray.
            if mayHoldStrays { try requeueStrays() }
            let seconds = String(format: "%.3f", max(timeout.seconds, 0.01))
            let reply = try connection.send(["BLMOVE", queueKey, processingKey, "RIGHT", "LEFT", seconds])
            guard case .bulk(let bytes) = reply else { return nil }
            return ReservedJob(raw: bytes)
        }
    }

    /// Moves every job left in this lane's processing list back to the head of its queue, one
    /// atomic LMOVE each (a janitor may be draining the same list: each job moves once). Not a
    /// recovery in the poison-job sense: the lane did not die. A replay is harmless, since the store
    /// is idempotent (a job already stored is stored again unchanged, same attempt).
    private func requeueStrays() throws {
        while case .bulk = try connection.send(["LMOVE", processingKey, queueKey, "RIGHT", "RIGHT"]) {}
        mayHoldStrays = false
    }

    /// Runs `body`, remembering a failure: see ``mayHoldStrays``.
    private func tracked<T>(_ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch {
            mayHoldStrays = true
            throw error
        }
    }

    public func acknowledge(_ job: ReservedJob, result: [UInt8]?) throws {
        var commands: [[[UInt8]]] = [["MULTI"].map(bytes)]
        if let id = job.envelope?.id.uuidString.lowercased(), let result {
            commands.append([bytes("LPUSH"), bytes(keys.result(id)), result])
            commands.append(["EXPIRE", keys.result(id), String(resultTTLSeconds)].map(bytes))
            commands.append(["DEL", keys.pending(id)].map(bytes))
        }
        commands.append([bytes("LREM"), bytes(processingKey), bytes("1"), job.raw])
        try exec(commands)
    }

    public func scheduleRetry(_ job: ReservedJob, updated: JobEnvelope, runAt: Date) throws {
        try exec([
            ["MULTI"].map(bytes),
            [bytes("ZADD"), bytes(keys.retry), bytes(String(milliseconds(runAt))), updated.encoded()],
            [bytes("LREM"), bytes(processingKey), bytes("1"), job.raw],
        ])
    }

    public func bury(_ job: ReservedJob, updated: JobEnvelope?, at date: Date) throws {
        let now = milliseconds(date)
        let oldest = now - Int64(retention.maxAge.seconds * 1000)
        var commands: [[[UInt8]]] = [
            ["MULTI"].map(bytes),
            [bytes("ZADD"), bytes(keys.dead), bytes(String(now)), updated?.encoded() ?? job.raw],
            ["ZREMRANGEBYSCORE", keys.dead, "-inf", "(\(oldest)"].map(bytes),
            ["ZREMRANGEBYRANK", keys.dead, "0", String(-(retention.maxJobs + 1))].map(bytes),
            [bytes("LREM"), bytes(processingKey), bytes("1"), job.raw],
        ]
        if let id = updated?.id.uuidString.lowercased() { commands.append(["DEL", keys.pending(id)].map(bytes)) }
        try exec(commands)
    }

    public func heartbeat(busy: Int) throws {
        let host = ProcessInfo.processInfo.hostName
        let pid = String(ProcessInfo.processInfo.processIdentifier)
        try exec(
            [
                ["MULTI"],
                ["SADD", keys.workers, workerID],
                [
                    "HSET", keys.worker(workerID), "host", host, "pid", pid, "busy", String(busy),
                    "started_at", String(milliseconds(startedAt)), "beat_at", String(milliseconds(Date())),
                ],
                // Three missed beats and the janitor may take this lane's jobs back.
                ["EXPIRE", keys.worker(workerID), String(heartbeatTTLSeconds)],
            ].map { $0.map(bytes) })
    }

    private func exec(_ commands: [[[UInt8]]]) throws {
        try tracked { try execUntracked(commands) }
    }

    private func execUntracked(_ commands: [[[UInt8]]]) throws {
        var all = commands
        all.append(["EXEC"].map(bytes))
        // Byte-exact: LREM must match the stored job to the byte, even a poison job that is not UTF-8.
        let replies = try connection.pipeline(bytes: all)
        if case .error(let message)? = replies.last { throw RedisQueueError.transactionFailed(message) }
        if case .null? = replies.last { throw RedisQueueError.transactionFailed("EXEC aborted") }
        // A command can fail inside EXEC (e.g. WRONGTYPE) while the others ran: say so loudly
        // rather than report a move that half happened.
        if case .array(let results)? = replies.last, let failure = results.first(where: { if case .error = $0 { true } else { false } }),
            case .error(let message) = failure
        {
            throw RedisQueueError.transactionFailed("a command inside EXEC failed: \(message)")
        }
    }
}

/// Errors of the Redis queue adapter.
public struct RedisQueueError: Error, CustomStringConvertible, Equatable {
    /// A bounded code.
    public var code: String
    /// What Redis said (no job contents).
    public var message: String

    static func transactionFailed(_ message: String) -> RedisQueueError {
        RedisQueueError(code: "transaction_failed", message: message)
    }

    public var description: String { "RedisQueueError.\(code): \(message)" }
}

@inline(__always) func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

func milliseconds(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1000).rounded()) }
