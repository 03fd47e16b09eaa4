import Foundation
import Hiredis
import ReceiptCore

/// The queues at a glance, from Redis: list lengths, set sizes and the workers' heartbeats.
public struct RedisQueueOverview: QueueOverview {
    private let pool: RedisConnectionPool
    private let keys: RedisKeys

    /// Creates the overview on the API's pool.
    public init(pool: RedisConnectionPool, keys: RedisKeys) {
        self.pool = pool
        self.keys = keys
    }

    public func snapshot() async throws -> QueueSnapshot {
        let keys = self.keys
        return try await pool.withConnection { connection in
            let counts = try connection.pipeline([
                ["LLEN", keys.queue(JobKind.validate.rawValue)], ["LLEN", keys.queue(JobKind.repoll.rawValue)],
                ["ZCARD", keys.retry], ["ZCARD", keys.dead], ["SMEMBERS", keys.workers],
            ])
            let lanes = (counts[4].array ?? []).compactMap(\.string).sorted()
            // A lane whose heartbeat hash expired is dead: the janitor takes its jobs back, and it is
            // not listed as live.
            let details =
                lanes.isEmpty ? [] : try connection.pipeline(lanes.flatMap { [["HGETALL", keys.worker($0)], ["LLEN", keys.processing($0)]] })
            var workers: [WorkerStatus] = []
            for (index, lane) in lanes.enumerated() {
                let fields = details[2 * index].array ?? []
                guard !fields.isEmpty else { continue }
                var hash: [String: String] = [:]
                for pair in stride(from: 0, to: fields.count - 1, by: 2) {
                    if let key = fields[pair].string, let value = fields[pair + 1].string { hash[key] = value }
                }
                func date(_ key: String) -> Date? { hash[key].flatMap(Double.init).map { Date(timeIntervalSince1970: $0 / 1000) } }
                workers.append(
                    WorkerStatus(
                        id: lane, host: hash["host"], pid: hash["pid"].flatMap(Int.init), busy: hash["busy"].flatMap(Int.init),
                        startedAt: date("started_at"), lastHeartbeatAt: date("beat_at"), processing: details[2 * index + 1].int ?? 0))
            }
            return QueueSnapshot(
                queued: [.validate: counts[0].int ?? 0, .repoll: counts[1].int ?? 0], retries: counts[2].int ?? 0,
                dead: counts[3].int ?? 0, workers: workers)
        }
    }
}
