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
        -- receiptq:promote_due:v1
        local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
        for _, job in ipairs(due) do
          redis.call('ZREM', KEYS[1], job)
          redis.call('RPUSH', KEYS[2], job)
        end
        return #due
        """

    private let connection: RedisConnection
    private let keys: RedisKeys
    private var promoteSHA: String?

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
        let keyArgs = [keys.retry, keys.queue("validate")]
        if promoteSHA == nil {
            promoteSHA = try connection.send(["SCRIPT", "LOAD", Self.promoteScript]).string
        }
        do {
            return try connection.send(["EVALSHA", promoteSHA ?? "", "2"] + keyArgs + args).int ?? 0
        } catch let error as RedisError where error.message.hasPrefix("NOSCRIPT") {
            // Redis restarted without persistence of scripts: load again, once.
            promoteSHA = try connection.send(["SCRIPT", "LOAD", Self.promoteScript]).string
            return try connection.send(["EVALSHA", promoteSHA ?? "", "2"] + keyArgs + args).int ?? 0
        }
    }

    /// Requeues the jobs of worker lanes whose heartbeat has lapsed (crashed or killed processes).
    /// - Returns: how many jobs were given back.
    @discardableResult
    public func requeueOrphans() throws -> Int {
        guard case .array(let members) = try connection.send(["SMEMBERS", keys.workers]) else { return 0 }
        var moved = 0
        for member in members {
            guard let worker = member.string else { continue }
            if try connection.send(["EXISTS", keys.worker(worker)]).int == 1 { continue }
            // LMOVE one at a time: each job is either still in processing or back in the queue.
            while case .bulk = try connection.send(["LMOVE", keys.processing(worker), keys.queue("validate"), "RIGHT", "RIGHT"]) {
                moved += 1
            }
            _ = try connection.send(["SREM", keys.workers, worker])
        }
        return moved
    }
}
