import Foundation
import Hiredis
import ReceiptCore

/// The scheduler's Redis chores: promote due retries, and give the jobs of dead workers back.
///
/// Blocking; the scheduler runs it on its own Dispatch queue.
public final class RedisMaintenance: QueueMaintenance {
    private let connection: RedisConnection
    private let keys: RedisKeys

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
        return try RedisScriptRunner.run(RedisScripts.promoteDue, keys: keyArgs, arguments: args.map(bytes), on: connection).int ?? 0
    }

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
                    code: .poisonJob, message: "the job was running when \(recoveries + 1) workers died", calls: [],
                    at: Date()
                ).encoded() ?? raw
        }
        let queue = keys.queue(envelope?.queueName ?? JobKind.validate.rawValue)
        let arguments = [raw, buried, bytes(String(Int64(Date().timeIntervalSince1970 * 1000))), bytes(counting ? "1" : "0")]
        return try RedisScriptRunner.run(
            RedisScripts.rescueOrphan, keys: [processing, queue, keys.dead, counter], arguments: arguments, on: connection
        ).int ?? 0
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
