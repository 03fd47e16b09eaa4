import Foundation
import Hiredis
import ReceiptCore

/// The dead letters (`{rq}:dead`) or the retries (`{rq}:retry`) in Redis, for the dashboard and
/// `receiptq dlq`.
///
/// ```swift
/// let dead = RedisJobSet.dead(pool: pool, keys: RedisKeys())
/// let page = try await dead.list(filter: JobSetFilter(errorCode: .sharedSecretMismatch), offset: 0, limit: 50)
/// // After fixing the app's shared secret:
/// let moved = try await dead.retryAll(matching: JobSetFilter(errorCode: .sharedSecretMismatch))
/// ```
///
/// Every change is made on the member's exact stored bytes, so it never touches a member that
/// changed or left the set in the meantime. Retrying rewrites the envelope in Swift
/// (``ReceiptCore/JobEnvelope/requeued(by:)``) and moves it with a versioned Lua script that
/// pushes only when its `ZREM` removed the member: two operators retrying the same job at once
/// requeue it once. Bulk operations read the set in chunks and act in batches of
/// ``batchSize``, each batch atomic, so a 10,000-entry set never blocks Redis for long.
///
/// `retry(ids:)` puts its few jobs at the front of the queue (taken next); `retryAll(matching:)`
/// puts its jobs at the back, behind the jobs already queued, like fresh API jobs.
///
/// The dead letters list newest first; the retries list soonest first (the next to run on top).
public struct RedisJobSet: JobSetStore {
    /// Options of a job set.
    public struct Options: Sendable {
        /// Who requeued the jobs, written into their envelopes (default `.dashboard`; the CLI passes `.cli`).
        public var origin: JobOrigin
        /// The most members one filtered listing examines (default 50,000). The dead letters are capped
        /// well below this; the retries are not, and after a long Apple outage can hold every
        /// receipt of the outage, so a filtered page stops here and says its total is not exact.
        public var filterScanLimit: Int

        /// Creates options.
        /// - Parameters:
        ///   - origin: written into requeued envelopes; default `.dashboard`.
        ///   - filterScanLimit: the most members a filtered listing examines; default 50,000.
        public init(origin: JobOrigin = .dashboard, filterScanLimit: Int = 50_000) {
            self.origin = origin
            self.filterScanLimit = filterScanLimit
        }
    }

    /// Which end of its queue a requeued job goes to.
    enum Placement: String {
        /// Taken next: someone is waiting for these few receipts.
        case front
        /// Behind every job already queued, as a fresh API job is.
        case back
    }

    /// Members read per `ZRANGE` while scanning.
    static let scanChunk = 500
    /// Members moved per script call or removed per `ZREM`: each batch is one atomic step.
    static let batchSize = 200
    /// Up to this many job ids are found one by one with `ZSCAN MATCH` (server-side, no receipts
    /// sent over); more are found in one scan of the whole set.
    static let idLookupLimit = 16

    /// Which set this is.
    public let kind: JobSetKind
    private let pool: RedisConnectionPool
    private let keys: RedisKeys
    private let key: String
    private let options: Options

    private init(kind: JobSetKind, pool: RedisConnectionPool, keys: RedisKeys, options: Options) {
        self.kind = kind
        self.pool = pool
        self.keys = keys
        self.key = kind == .dead ? keys.dead : keys.retry
        self.options = options
    }

    /// The dead letters, `keys.dead` (score = died at), newest first.
    /// - Parameters:
    ///   - pool: connections to Redis.
    ///   - keys: the key schema.
    ///   - options: who requeues, and the scan limit of filtered listings.
    /// - Returns: the store.
    public static func dead(pool: RedisConnectionPool, keys: RedisKeys, options: Options = Options()) -> RedisJobSet {
        RedisJobSet(kind: .dead, pool: pool, keys: keys, options: options)
    }

    /// The jobs waiting in backoff, `keys.retry` (score = run at), soonest first; retrying one runs
    /// it now.
    /// - Parameters:
    ///   - pool: connections to Redis.
    ///   - keys: the key schema.
    ///   - options: who requeues, and the scan limit of filtered listings.
    /// - Returns: the store.
    public static func retries(pool: RedisConnectionPool, keys: RedisKeys, options: Options = Options()) -> RedisJobSet {
        RedisJobSet(kind: .retry, pool: pool, keys: keys, options: options)
    }

    /// Listing order: the dead letters newest first, the retries soonest first.
    private var listsDescending: Bool { kind == .dead }

    // MARK: - Reading

    public func count() async throws -> Int {
        guard let count = try await pool.commandRetryingOnce(["ZCARD", key]).int else { throw RedisQueueError.unexpectedReply("ZCARD") }
        return count
    }

    public func list(filter: JobSetFilter, offset: Int, limit: Int) async throws -> JobSetPage {
        let offset = max(0, offset)
        let limit = max(0, limit)
        if filter.isEmpty {
            // No filter: the rank is the offset, so one round trip serves any page.
            var commands = [["ZCARD", key]]
            if limit > 0 { commands.append(Self.rangeCommand(key, from: offset, count: limit, descending: listsDescending)) }
            let replies = try await pool.withConnectionRetryingOnce { [commands] in try $0.pipeline(commands) }
            guard let total = replies.first?.int else { throw RedisQueueError.unexpectedReply("ZCARD") }
            let entries = try replies.count > 1 ? Self.entries(fromPairs: replies[1], command: "ZRANGE") : []
            return JobSetPage(entries: entries, totalMatching: total, offset: offset, limit: limit)
        }
        // A filter has to look at every member. That is affordable because the dead letters are
        // capped (10,000 by default) and this serves an operator's page view, not a hot path; an
        // index would have to be kept in step with every worker's writes. The retries are not
        // capped, hence `filterScanLimit`.
        var total = 0
        var entries: [JobSetEntry] = []
        let complete = try await scan(descending: listsDescending, limit: options.filterScanLimit) { chunk in
            for entry in chunk where filter.matches(entry) {
                if total >= offset && entries.count < limit { entries.append(entry) }
                total += 1
            }
            return 0
        }
        return JobSetPage(entries: entries, totalMatching: total, offset: offset, limit: limit, totalIsExact: complete)
    }

    public func entry(id: JobSetEntry.ID) async throws -> JobSetEntry? {
        try await members(withIDs: [id]).max { $0.score < $1.score }
    }

    // MARK: - Changing

    @discardableResult
    public func retry(ids: [JobSetEntry.ID]) async throws -> Int {
        // An operator retrying a few receipts by hand: someone is waiting for them.
        try await requeue(members(withIDs: Set(ids)), to: .front)
    }

    @discardableResult
    public func retryAll(matching filter: JobSetFilter) async throws -> Int {
        var moved = 0
        try await scan(descending: true) { chunk in
            let selected = chunk.filter { !$0.isPoison && filter.matches($0) }
            // Thousands of old jobs at the front would starve the fresh API jobs behind them.
            moved += try await requeue(selected, to: .back)
            // Each selected member has left the set, moved by us or by someone else first.
            return selected.count
        }
        return moved
    }

    @discardableResult
    public func delete(ids: [JobSetEntry.ID]) async throws -> Int {
        try await remove(members(withIDs: Set(ids)).map(\.raw))
    }

    @discardableResult
    public func deleteAll(matching filter: JobSetFilter) async throws -> Int {
        if filter.isEmpty {
            let key = self.key
            let replies = try await pool.withConnection { try $0.pipeline([["MULTI"], ["ZCARD", key], ["DEL", key], ["EXEC"]]) }
            guard case .array(let results)? = replies.last, let removed = results.first?.int else {
                throw RedisQueueError.transactionFailed("delete all not committed")
            }
            return removed
        }
        var removed = 0
        try await scan(descending: true) { chunk in
            let selected = chunk.filter(filter.matches)
            removed += try await remove(selected.map(\.raw))
            return selected.count
        }
        return removed
    }

    // MARK: - Scanning

    /// Hands the set to `visit` in chunks of ``scanChunk`` and returns whether it reached the end.
    ///
    /// `visit` returns how many of the chunk's members it took out of the set, so the next chunk
    /// starts at the right rank. Bulk changes scan highest score first: what the workers and the
    /// promoter remove concurrently (trimmed old dead letters, due retries) lies at the low end,
    /// past the cursor, so no member is skipped; what they add shifts the cursor back, which only
    /// shows a member twice, and every change is a no-op the second time. Only another operator's
    /// change in the middle of the set can make one pass miss a member; running it again finds it.
    @discardableResult
    private func scan(
        descending: Bool, limit: Int = .max, _ visit: ([JobSetEntry]) async throws -> Int
    ) async throws -> Bool {
        var rank = 0
        var examined = 0
        while examined < limit {
            try Task.checkCancellation()
            let command = Self.rangeCommand(key, from: rank, count: min(Self.scanChunk, limit - examined), descending: descending)
            let chunk = try Self.entries(fromPairs: await pool.withConnectionRetryingOnce { try $0.send(command) }, command: "ZRANGE")
            if chunk.isEmpty { return true }
            examined += chunk.count
            rank += chunk.count - (try await visit(chunk))
            if chunk.count < Self.scanChunk { return true }
        }
        return false
    }

    /// The members carrying these ids (all of them, should a job be in the set twice).
    private func members(withIDs ids: Set<JobSetEntry.ID>) async throws -> [JobSetEntry] {
        let jobIDs = ids.compactMap(\.jobID)
        if !ids.isEmpty && jobIDs.count == ids.count && jobIDs.count <= Self.idLookupLimit {
            var found: [JobSetEntry] = []
            for jobID in jobIDs { found += try await members(withJobID: jobID) }
            return found
        }
        // Poison ids are hashes of the bytes, which only a full scan can compare.
        var found: [JobSetEntry] = []
        var seen = Set<[UInt8]>()
        guard !ids.isEmpty else { return found }
        try await scan(descending: true) { chunk in
            for entry in chunk where ids.contains(entry.id) && seen.insert(entry.raw).inserted { found.append(entry) }
            return 0
        }
        return found
    }

    /// Finds one job with `ZSCAN MATCH` on its id's text, so Redis skips every other member (and
    /// its receipt) server-side. The glob is case-insensitive so an id written in either case is
    /// found; decoding then keeps only members whose envelope *is* that job, not one that merely
    /// mentions the id (in its metadata, say).
    private func members(withJobID jobID: UUID) async throws -> [JobSetEntry] {
        let id = JobSetEntry.ID(job: jobID)
        let glob = id.rawValue.map { $0.isLetter ? "[\($0)\($0.uppercased())]" : String($0) }.joined()
        let key = self.key
        return try await pool.withConnection { connection in
            var found: [JobSetEntry] = []
            var seen = Set<[UInt8]>()
            var cursor = "0"
            repeat {
                let reply = try connection.send(["ZSCAN", key, cursor, "MATCH", "*\(glob)*", "COUNT", "1000"])
                guard case .array(let parts) = reply, parts.count == 2, let next = parts[0].string else {
                    throw RedisQueueError.unexpectedReply("ZSCAN")
                }
                cursor = next
                // ZSCAN may return a member more than once.
                for entry in try Self.entries(fromPairs: parts[1], command: "ZSCAN")
                where entry.id == id && seen.insert(entry.raw).inserted {
                    found.append(entry)
                }
            } while cursor != "0"
            return found
        }
    }

    // MARK: - Moving and removing

    /// Requeues `entries` (poison members skipped) to one end of their kind's queue.
    /// - Returns: how many were moved.
    private func requeue(_ entries: [JobSetEntry], to placement: Placement) async throws -> Int {
        var moves: [(queue: String, old: [UInt8], new: [UInt8])] = []
        for entry in entries {
            guard let envelope = entry.envelope else { continue }
            moves.append((keys.queue(envelope.queueName), entry.raw, envelope.requeued(by: options.origin).encoded()))
        }
        guard !moves.isEmpty else { return 0 }
        let batches = Dictionary(grouping: moves, by: \.queue).flatMap { queue, group in
            stride(from: 0, to: group.count, by: Self.batchSize).map { start in
                (queue: queue, pairs: group[start..<min(start + Self.batchSize, group.count)].map { ($0.old, $0.new) })
            }
        }
        let key = self.key
        return try await pool.withConnection { connection in
            var moved = 0
            for batch in batches {
                var arguments = [bytes(placement.rawValue)]
                for (old, new) in batch.pairs { arguments += [old, new] }
                let reply = try RedisScriptRunner.run(RedisScripts.requeueFromSet, keys: [key, batch.queue], arguments: arguments, on: connection)
                guard let count = reply.int else {
                    throw RedisQueueError.unexpectedReply(RedisScripts.requeueFromSet.name)
                }
                moved += count
            }
            return moved
        }
    }

    /// Removes these exact members.
    /// - Returns: how many were still there.
    private func remove(_ members: [[UInt8]]) async throws -> Int {
        guard !members.isEmpty else { return 0 }
        let commands = stride(from: 0, to: members.count, by: Self.batchSize).map { start in
            [bytes("ZREM"), bytes(key)] + members[start..<min(start + Self.batchSize, members.count)]
        }
        let replies = try await pool.withConnection { try $0.pipeline(bytes: commands) }
        return try replies.reduce(0) { sum, reply in
            guard let count = reply.int else { throw RedisQueueError.unexpectedReply("ZREM") }
            return sum + count
        }
    }

    // MARK: - Replies

    private static func rangeCommand(_ key: String, from start: Int, count: Int, descending: Bool) -> [String] {
        ["ZRANGE", key, String(start), String(start + count - 1)] + (descending ? ["REV"] : []) + ["WITHSCORES"]
    }

    /// Parses a `WITHSCORES` reply (member, score, member, score, …).
    private static func entries(fromPairs reply: RedisValue, command: String) throws -> [JobSetEntry] {
        guard case .array(let items) = reply, items.count.isMultiple(of: 2) else { throw RedisQueueError.unexpectedReply(command) }
        return try stride(from: 0, to: items.count, by: 2).map { index in
            guard case .bulk(let raw) = items[index], let score = items[index + 1].string.flatMap(Double.init) else {
                throw RedisQueueError.unexpectedReply(command)
            }
            return JobSetEntry(raw: raw, score: Date(timeIntervalSince1970: score / 1000))
        }
    }
}
