import Foundation
import Hiredis
import ReceiptCore

/// The scheduler's Redis chores: promote due retries, and give the jobs of dead workers back.
///
/// Blocking; the scheduler runs it on its own Dispatch queue.
public final class RedisMaintenance: QueueMaintenance {
    /// Moves due retries to the front of their queue. Versioned (the name carries the version) so a
    /// changed script never runs under an old SHA; atomic, so a job is never in both places.
    static let promoteScript = """
        -- receiptq:promote_due:v5
        -- KEYS: retry zset, validate queue, repoll queue, notification queue, webhook queue, import queue; ARGV: now ms, limit
        local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
        for _, job in ipairs(due) do
          redis.call('ZREM', KEYS[1], job)
          -- Read the kind only; the job's bytes are pushed unchanged (never re-encoded by cjson).
          local ok, envelope = pcall(cjson.decode, job)
          local queue = KEYS[2]
          if ok and type(envelope) == 'table' and envelope.kind == 'repoll' then queue = KEYS[3] end
          if ok and type(envelope) == 'table' and envelope.kind == 'notification' then queue = KEYS[4] end
          if ok and type(envelope) == 'table' and envelope.kind == 'webhook' then queue = KEYS[5] end
          if ok and type(envelope) == 'table' and envelope.kind == 'validate' and type(envelope.import_id) == 'string' then queue = KEYS[6] end
          redis.call('RPUSH', queue, job)
        end
        return #due
        """

    private let connection: RedisConnection
    private let keys: RedisKeys
    private var promoteSHA: String?
    private var rescueSHA: String?

    /// Creates the maintenance helper on its own connection.
    public init(connection: RedisConnection, keys: RedisKeys) {
        self.connection = connection
        self.keys = keys
    }

    /// Moves up to `limit` retries whose time has come back to the validate queue.
    /// - Returns: how many were moved.
    @discardableResult
    public func promoteDueRetries(now: Date, limit: Int) throws -> Int {
        let args = [String(Int64(now.timeIntervalSince1970 * 1000)), String(limit)]
        let keyArgs = [
            keys.retry, keys.queue(JobKind.validate.rawValue), keys.queue(JobKind.repoll.rawValue),
            keys.queue(JobKind.notification.rawValue), keys.queue(JobKind.webhook.rawValue), keys.queue(JobEnvelope.importQueue),
        ]
        if promoteSHA == nil {
            promoteSHA = try connection.send(["SCRIPT", "LOAD", Self.promoteScript]).string
        }
        do {
            return try connection.send(["EVALSHA", promoteSHA ?? "", "6"] + keyArgs + args).int ?? 0
        } catch let error as RedisError where error.message.hasPrefix("NOSCRIPT") {
            // Redis restarted without persistence of scripts: load again, once.
            promoteSHA = try connection.send(["SCRIPT", "LOAD", Self.promoteScript]).string
            return try connection.send(["EVALSHA", promoteSHA ?? "", "6"] + keyArgs + args).int ?? 0
        }
    }

    /// Moves one job out of a dead worker's processing list, only if it is still there (another
    /// janitor may have taken it), either back to its queue (counting the recovery) or to the dead
    /// letters. Versioned like the promotion script.
    static let rescueScript = """
        -- receiptq:rescue_orphan:v2
        -- KEYS: processing list, queue, dead zset, recovery counter
        -- ARGV: job, buried job or '', now ms, '1' to count the recovery (a crash) or '0' (a shutdown)
        if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then return 0 end
        if ARGV[2] ~= '' then
          redis.call('ZADD', KEYS[3], ARGV[3], ARGV[2])
          redis.call('DEL', KEYS[4])
          return 2
        end
        if ARGV[4] == '1' then
          redis.call('INCR', KEYS[4])
          redis.call('EXPIRE', KEYS[4], 604800)
        end
        redis.call('RPUSH', KEYS[2], ARGV[1])
        return 1
        """

    /// How many times a job may be rescued from a dead worker before it is taken for a poison job
    /// (one that kills every worker that runs it) and buried.
    public var maxRecoveries = 3

    /// Requeues the jobs of worker lanes whose heartbeat lapsed (crashed or killed processes); a
    /// job rescued more than ``maxRecoveries`` times goes to the dead letters as `poison_job`.
    /// - Returns: how many jobs were given back.
    @discardableResult
    public func requeueOrphans() throws -> Int {
        guard case .array(let members) = try connection.send(["SMEMBERS", keys.workers]) else { return 0 }
        var moved = 0
        for member in members {
            guard let worker = member.string else { continue }
            if try connection.send(["EXISTS", keys.worker(worker)]).int == 1 { continue }
            moved += try drain(worker: worker, counting: true)
        }
        return moved
    }

    /// Gives back every job a live worker lane holds, without counting it as a recovery: for a
    /// graceful shutdown whose deadline passed while the lane was still blocked in a call.
    /// - Returns: how many jobs were given back.
    @discardableResult
    public func requeueInFlight(worker: String) throws -> Int {
        _ = try connection.send(["DEL", keys.worker(worker)])
        return try drain(worker: worker, counting: false)
    }

    private func drain(worker: String, counting: Bool) throws -> Int {
        var moved = 0
        let processing = keys.processing(worker)
        while case .array(let jobs) = try connection.send(["LRANGE", processing, "-100", "-1"]), !jobs.isEmpty {
            for case .bulk(let raw) in jobs.reversed() {
                moved += try rescue(raw, from: processing, counting: counting) == 1 ? 1 : 0
            }
        }
        _ = try connection.send(["SREM", keys.workers, worker])
        return moved
    }

    private func rescue(_ raw: [UInt8], from processing: String, counting: Bool) throws -> Int {
        let envelope = try? JobEnvelope.decode(raw)
        let id = envelope?.id.uuidString.lowercased() ?? "raw-\(fnv1a(raw))"
        let counter = keys.recoveries(id)
        let recoveries = try connection.send(["GET", counter]).int ?? 0
        var buried: [UInt8] = []
        if counting, recoveries >= maxRecoveries {
            buried =
                envelope?.failed(
                    code: "poison_job", message: "the job was running when \(recoveries + 1) workers died", calls: [],
                    at: Date()
                ).encoded() ?? raw
        }
        if rescueSHA == nil { rescueSHA = try connection.send(["SCRIPT", "LOAD", Self.rescueScript]).string }
        let queue = keys.queue(envelope?.queueName ?? JobKind.validate.rawValue)
        let arguments: [[UInt8]] =
            [Array("EVALSHA".utf8), Array((rescueSHA ?? "").utf8), Array("4".utf8)]
            + [processing, queue, keys.dead, counter].map { Array($0.utf8) }
            + [raw, buried, Array(String(Int64(Date().timeIntervalSince1970 * 1000)).utf8), Array((counting ? "1" : "0").utf8)]
        do {
            return try connection.send(bytes: arguments).int ?? 0
        } catch let error as RedisError where error.message.hasPrefix("NOSCRIPT") {
            rescueSHA = try connection.send(["SCRIPT", "LOAD", Self.rescueScript]).string
            var retried = arguments
            retried[1] = Array((rescueSHA ?? "").utf8)
            return try connection.send(bytes: retried).int ?? 0
        }
    }
}

/// A stable name for bytes that are not an envelope (a hash for bookkeeping, not for security).
func fnv1a(_ bytes: [UInt8]) -> String {
    var hash: UInt64 = 0xcbf2_9ce4_8422_2325
    for byte in bytes {
        hash ^= UInt64(byte)
        hash &*= 0x100_0000_01b3
    }
    return String(hash, radix: 16)
}
