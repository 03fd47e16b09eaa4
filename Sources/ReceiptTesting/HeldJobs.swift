import Hiredis
import ReceiptCore
import RedisJobQueue

/// The jobs a Redis holds under one key schema: queued, in a worker's hands or waiting to be
/// retried (dead letters do not count: nothing leaves them by itself). Once none is held and
/// nothing is being posted, nothing more will be stored: the barrier the tests' whole system and
/// the conformance deployment wait for before checking what was (or was not) done.
public struct HeldJobs {
    public let redis: RedisConnection
    public let keys: RedisKeys

    public init(_ redis: RedisConnection, keys: RedisKeys) {
        self.redis = redis
        self.keys = keys
    }

    /// The jobs of `kinds` (nil: any) held, counted by key (queues, processing lists, the retry set).
    public func counts(_ kinds: Set<JobKind>? = nil) throws -> [String: Int] {
        func counted(_ members: [RedisValue]) -> Int {
            guard let kinds else { return members.count }
            return members.count { member in member.bytes.flatMap { try? JobEnvelope.decode($0) }.map { kinds.contains($0.kind) } ?? false }
        }
        var held: [String: Int] = [:]
        for kind in kinds ?? Set(JobKind.allCases) {
            let queued = try redis.send(["LLEN", keys.queue(kind.rawValue)]).int ?? -1
            if queued != 0 { held[keys.queue(kind.rawValue)] = queued }
        }
        // Redis deletes an empty list: every processing key left holds a job, of some kind.
        for key in try processingKeys() {
            let jobs = counted(try redis.send(["LRANGE", key, "0", "-1"]).array ?? [])
            if jobs != 0 { held[key] = jobs }
        }
        let retrying = counted(try redis.send(["ZRANGE", keys.retry, "0", "-1"]).array ?? [])
        if retrying != 0 { held[keys.retry] = retrying }
        return held
    }

    /// The jobs in workers' hands, each as its kind, attempt and payload (cut to 300 characters):
    /// what a wait that never ended says about the job that never finished.
    public func inHands() throws -> [String] {
        try processingKeys().flatMap { key in
            try (redis.send(["LRANGE", key, "0", "-1"]).array ?? []).compactMap { member in
                member.bytes.flatMap { try? JobEnvelope.decode($0) }.map { "\($0.kind) attempt \($0.attempt) \($0.payload)".prefix(300).description }
            }
        }
    }

    /// The processing lists of every worker lane registered under the prefix: a lane joins the
    /// workers' set with its first heartbeat, before it reserves a job, and leaves it only when
    /// the janitor has taken its jobs back. Read from that set, not with `KEYS`: a scan of the
    /// whole keyspace took 5 ms on a test Redis of 66,000 keys, blocked every other client
    /// meanwhile, and ran every 50 ms of every wait for a settled system.
    private func processingKeys() throws -> [String] {
        let lanes = try redis.send(["SMEMBERS", keys.workers]).array?.compactMap(\.string) ?? []
        return lanes.sorted().map(keys.processing)
    }
}
