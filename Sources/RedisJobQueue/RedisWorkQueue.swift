import Foundation
import Hiredis
import ReceiptCore

/// One worker process's view of the Redis queues: reliable fetch into the process's own processing
/// list, in batches, and every settlement of a batch in one MULTI/EXEC round trip.
///
/// Not thread-safe: each worker thread (the fetcher, each committer) owns one, on its own
/// connection; instances built with the same `workerID` share one processing list.
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
    /// The queues served, most urgent first.
    private let queueKeys: [String]
    private let processingKey: String
    /// The bulk imports' queue, served after the others with spare capacity only.
    private let importKey: String
    /// The import queue was empty at the last look (or never looked at).
    private var importIdle = true
    /// The last reserve found every live queue short of what it asked (none may hold more).
    private var liveDrained = false
    /// When the import queue was last looked at.
    private var lastImportProbe: ContinuousClock.Instant?
    private let retention: DeadLetterRetention
    private let startedAt = Date()
    /// How many `LMOVE`s the next reserve pipelines: grows while the queue keeps them all busy,
    /// shrinks when it runs dry, so an idle queue costs few commands and a deep one few round trips.
    private var burst = 4
    /// Which queue goes first when there are fewer free slots than queues (they take turns).
    private var turn = 0
    /// The queues (indices) the last full reserve found empty: probed, not given a share.
    private var idle: Set<Int> = []
    /// How long a heartbeat stays valid; the janitor takes the process's jobs back once it lapses.
    public var heartbeatTTLSeconds = 30

    /// Creates a worker thread's queue.
    /// - Parameters:
    ///   - connection: the thread's own connection (its command timeout must exceed the reserve timeout).
    ///   - keys: the key schema.
    ///   - workerID: unique per worker process (host, pid, a random instance).
    ///   - kinds: the queues the worker serves, most urgent first (default: validations,
    ///     notifications, webhook deliveries, then re-polls).
    ///   - retention: dead-letter caps.
    public init(
        connection: RedisConnection, keys: RedisKeys, workerID: String, kinds: [JobKind] = [.validate, .notification, .webhook, .repoll],
        retention: DeadLetterRetention = DeadLetterRetention()
    ) {
        self.connection = connection
        self.keys = keys
        self.workerID = workerID
        self.queueKeys = (kinds.isEmpty ? [.validate] : kinds).map { keys.queue($0.rawValue) }
        self.processingKey = keys.processing(workerID)
        self.importKey = keys.queue(JobEnvelope.importQueue)
        self.retention = retention
    }

    public func reserve(max: Int, timeout: Duration) throws -> [ReservedJob] {
        try reserve(max: max, background: 0, timeout: timeout)
    }

    /// The live queues first; the import queue only for what they leave of `max`, at most
    /// `background` jobs (the engine's spare share), so an import runs on idle capacity and a
    /// backlog of live jobs takes every slot. Blocks (up to `timeout`) only when neither had a job.
    public func reserve(max: Int, background: Int, timeout: Duration) throws -> [ReservedJob] {
        // An import queue found empty is looked at again only every quarter second: live jobs pay
        // no extra round trip for imports that are not there.
        let probing =
            background > 0 && (!importIdle || lastImportProbe.map { ContinuousClock.now - $0 >= .milliseconds(250) } ?? true)
        guard probing else {
            // No room for imports while they have jobs waiting: block only briefly, so the slots
            // they free are refilled soon (the engine asks again with room), not after a whole
            // reserve timeout spent on an empty live queue.
            return try reserveLive(max: max, timeout: background == 0 && !importIdle ? min(timeout, .milliseconds(20)) : timeout)
        }
        let live = try reserveLive(max: max, timeout: .zero)
        let take = Swift.min(background, max - live.count)
        guard take > 0, liveDrained else { return live }
        // An import queue found empty is probed with one move until it has jobs again.
        let imported = try connection.pipeline(
            bytes: Array(repeating: ["LMOVE", importKey, processingKey, "RIGHT", "LEFT"].map(bytes), count: importIdle ? 1 : take)
        ).compactMap { reply -> ReservedJob? in
            guard case .bulk(let raw) = reply else { return nil }
            return ReservedJob(raw: raw)
        }
        importIdle = imported.isEmpty
        lastImportProbe = .now
        if live.isEmpty, imported.isEmpty { return try block(timeout) }
        return live + imported
    }

    private func reserveLive(max: Int, timeout: Duration) throws -> [ReservedJob] {
        let count = Swift.max(1, Swift.min(max, burst))
        func move(_ queueKey: String) -> [[UInt8]] { ["LMOVE", queueKey, processingKey, "RIGHT", "LEFT"].map(bytes) }
        var commands: [[[UInt8]]] = []
        /// The queue (index) each command moves from.
        var owners: [Int] = []
        // Too few slots for every queue: they take turns, and the others are tried after.
        var untried: [Int] = []
        if count < queueKeys.count {
            // The queues that had jobs take turns first and the idle ones are tried after them,
            // except every few reserves, when the idle ones go first: a queue that was empty is
            // not left behind a flood for good.
            let active = queueKeys.indices.filter { !idle.contains($0) }
            let rotated = active.indices.map { active[(turn + $0) % active.count] }
            let order = turn % queueKeys.count == 0 ? idle.sorted() + rotated : rotated + idle.sorted()
            turn &+= 1
            commands = order.prefix(count).map { move(queueKeys[$0]) }
            owners = Array(order.prefix(count))
            untried = Array(order.dropFirst(count))
        } else {
            // The queues that had jobs last time share the burst: the most urgent gets most of it,
            // each later one about a fifth of what is left, at least one move each, so a flood of
            // validations never starves notifications, webhook deliveries or re-polls. A queue that
            // was empty is only probed with one move: idle queues must not eat the burst (it would
            // never grow past them).
            let active = queueKeys.indices.filter { !idle.contains($0) }
            for (rank, index) in active.enumerated() {
                let left = count - commands.count
                let later = active.count - 1 - rank
                let share = later == 0 ? left : Swift.max(1, left - later - (left - later) / 5)
                commands += Array(repeating: move(queueKeys[index]), count: Swift.max(0, share))
                owners += Array(repeating: index, count: Swift.max(0, share))
            }
            for index in queueKeys.indices where idle.contains(index) {
                commands.append(move(queueKeys[index]))
                owners.append(index)
            }
        }
        var jobs: [ReservedJob] = []
        var answered = Set<Int>()
        var asked: [Int: Int] = [:]
        var brought: [Int: Int] = [:]
        for owner in owners { asked[owner, default: 0] += 1 }
        for (reply, owner) in zip(try connection.pipeline(bytes: commands), owners) {
            guard case .bulk(let raw) = reply else { continue }
            jobs.append(ReservedJob(raw: raw))
            answered.insert(owner)
            brought[owner, default: 0] += 1
        }
        idle.subtract(answered)
        idle.formUnion(Set(owners).subtracting(answered))
        burst = Swift.min(Swift.max(jobs.count * 2, 4), 512)
        // A queue that filled every move asked of it may hold more: the live queues are drained
        // only when every one was asked and each came up short.
        liveDrained = untried.isEmpty && asked.allSatisfy { brought[$0.key, default: 0] < $0.value }
        if !jobs.isEmpty { return jobs }
        // The queues whose turn it was are empty; another may not be.
        for index in untried {
            if case .bulk(let raw) = try connection.send(bytes: move(queueKeys[index])) {
                idle.remove(index)
                return [ReservedJob(raw: raw)]
            }
            idle.insert(index)
        }
        liveDrained = true
        return try block(timeout)
    }

    /// Nothing ready: block on the most urgent queue, so an idle worker costs one command per
    /// timeout and a validation is taken the moment it arrives; the others (notifications,
    /// webhook deliveries, re-polls, imports) are looked at again when the wait ends, so the
    /// timeout is the longest they wait at an idle worker (`WORKER_IDLE_WAIT_MS`).
    private func block(_ timeout: Duration) throws -> [ReservedJob] {
        guard timeout > .zero else { return [] }
        // Whole milliseconds as Swift prints a Double ("0.05", "2.0": no exponent at 10 ms and up),
        // not String(format:)'s printf, which was 1 % of a busy worker's CPU.
        let seconds = String(Double(Swift.max(Int((timeout.seconds * 1000).rounded()), 10)) / 1000)
        guard case .bulk(let raw) = try connection.send(["BLMOVE", queueKeys[0], processingKey, "RIGHT", "LEFT", seconds]) else {
            return []
        }
        return [ReservedJob(raw: raw)]
    }

    public func reconcile(keeping inFlight: [[UInt8]], settledAgain: (ReservedJob) -> Settlement?) throws -> Reconciliation {
        guard case .array(let listed) = try connection.send(["LRANGE", processingKey, "0", "-1"]) else { return Reconciliation() }
        var kept: [[UInt8]: Int] = [:]
        for raw in inFlight { kept[raw, default: 0] += 1 }
        var again: [Settlement] = []
        var tally = Reconciliation()
        for case .bulk(let raw) in listed {
            if let left = kept[raw], left > 0 {
                kept[raw] = left - 1
                continue
            }
            let job = ReservedJob(raw: raw)
            if let settlement = settledAgain(job) {
                again.append(settlement)
                continue
            }
            // Only if the job is still there (a janitor may have taken it meanwhile), counted as no
            // recovery: nothing died, a reply was lost.
            let envelope = job.envelope
            let id = envelope?.id.uuidString.lowercased() ?? "raw-\(fnv1a(raw))"
            let queue = keys.queue(envelope?.queueName ?? JobKind.validate.rawValue)
            let arguments = [raw, [], bytes(String(milliseconds(Date()))), bytes("0")]
            let moved = try RedisScriptRunner.run(
                RedisScripts.rescueOrphan, keys: [processingKey, queue, keys.dead, keys.recoveries(id)], arguments: arguments, on: connection
            ).int
            if moved == 1 { tally.requeued += 1 }
        }
        // Its moves are as idempotent as the first settle's; no activity: that was counted once.
        if !again.isEmpty {
            try settle(again, activity: ActivityTally())
            tally.resettled = again.count
        }
        return tally
    }

    public func settle(_ settlements: [Settlement], activity: ActivityTally) throws {
        guard !settlements.isEmpty else { return }
        let now = Date()
        var commands: [[[UInt8]]] = [["MULTI"].map(bytes)]
        var buried = false
        for settlement in settlements {
            switch settlement {
            case .acknowledge(let job, let result):
                if let envelope = job.envelope, result != nil {
                    commands.append(["DEL", keys.pending(envelope.id.uuidString.lowercased())].map(bytes))
                }
                if let envelope = job.envelope, let replyTo = envelope.replyTo {
                    commands.append(publish(envelope, to: replyTo, result: result))
                }
            case .retry(_, let updated, let runAt):
                // The waiting request can answer "queued" now instead of at the end of its wait, and
                // the later attempts have nobody left to tell.
                if let replyTo = updated.replyTo { commands.append(publish(updated, to: replyTo, result: nil)) }
                var later = updated
                later.replyTo = nil
                commands.append([bytes("ZADD"), bytes(keys.retry), bytes(String(milliseconds(runAt))), later.encoded()])
            case .bury(let job, let updated, let date):
                var parked = updated
                parked?.replyTo = nil
                commands.append([bytes("ZADD"), bytes(keys.dead), bytes(String(milliseconds(date))), parked?.encoded() ?? job.raw])
                if let id = updated?.id.uuidString.lowercased() { commands.append(["DEL", keys.pending(id)].map(bytes)) }
                if let updated, let replyTo = updated.replyTo { commands.append(publish(updated, to: replyTo, result: nil)) }
                buried = true
            }
            // From the tail: jobs are reserved to the head and finish roughly in order, so the
            // scan stops after a few elements even with a thousand jobs in flight.
            commands.append([bytes("LREM"), bytes(processingKey), bytes("-1"), settlement.job.raw])
        }
        commands += importProgress(settlements, now: now)
        if buried {
            let oldest = milliseconds(now) - Int64(retention.maxAge.seconds * 1000)
            commands.append(["ZREMRANGEBYSCORE", keys.dead, "-inf", "(\(oldest)"].map(bytes))
            commands.append(["ZREMRANGEBYRANK", keys.dead, "0", String(-(retention.maxJobs + 1))].map(bytes))
        }
        // Counted inside the same MULTI: no extra round trip per batch. A repeat of this settle after
        // an unknown outcome (the engine retries until Redis takes it) may count the batch twice,
        // where the moves above would find nothing left to move; the counters feed a chart and are
        // approximate, so that is accepted. The minute is this worker's clock, like the retention.
        commands += RedisActivity.increments(activity, keys: keys, now: now).map { $0.map(bytes) }
        try exec(commands)
    }

    /// Bulk imports' progress (``ImportRun``): each import's jobs stored or buried in this batch,
    /// counted in the same MULTI (approximate on a repeated settle, like the activity counters).
    private func importProgress(_ settlements: [Settlement], now: Date) -> [[[UInt8]]] {
        var tallies: [UUID: (stored: Int, failed: Int)] = [:]
        for settlement in settlements {
            switch settlement {
            case .acknowledge(let job, _):
                if let id = job.envelope?.importID { tallies[id, default: (0, 0)].stored += 1 }
            case .bury(let job, let updated, _):
                if let id = updated?.importID ?? job.envelope?.importID { tallies[id, default: (0, 0)].failed += 1 }
            case .retry:
                continue
            }
        }
        let at = String(milliseconds(now))
        return tallies.flatMap { id, tally -> [[[UInt8]]] in
            let run = keys.importRun(id.canonical)
            var commands: [[String]] = [["HSET", run, "updated_ms", at]]
            if tally.stored > 0 {
                commands += [
                    ["HINCRBY", run, "stored", String(tally.stored)], ["HSETNX", run, "first_stored_ms", at], ["HSET", run, "last_stored_ms", at],
                ]
            }
            if tally.failed > 0 { commands.append(["HINCRBY", run, "failed", String(tally.failed)]) }
            // 0 keeps it forever: PERSIST undoes the expiry an earlier setting gave it.
            let kept = keys.importRunRetention
            commands += [kept > 0 ? ["EXPIRE", run, String(kept)] : ["PERSIST", run], ["ZADD", keys.importRuns, at, id.canonical]]
            return commands.map { $0.map(bytes) }
        }
    }

    /// A message for the ingestion node waiting on `envelope`: the id, then the stored resource when
    /// there is one (nothing after the id means "not validated yet"). Publishing to a node that
    /// stopped waiting costs nothing: nobody receives it.
    private func publish(_ envelope: JobEnvelope, to node: String, result: [UInt8]?) -> [[UInt8]] {
        var message = bytes(envelope.id.uuidString.lowercased())
        if let result { message += [UInt8(ascii: " ")] + result }
        return [bytes("PUBLISH"), bytes(keys.results(node)), message]
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
                // Three missed beats and the janitor may take this process's jobs back.
                ["EXPIRE", keys.worker(workerID), String(heartbeatTTLSeconds)],
            ].map { $0.map(bytes) })
    }

    private func exec(_ commands: [[[UInt8]]]) throws {
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

@inline(__always) func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

func milliseconds(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1000).rounded()) }
