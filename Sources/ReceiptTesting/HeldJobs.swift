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
    ///
    /// One snapshot (`MULTI`/`EXEC`): read one key after another, a retry promoted back to its
    /// queue between the queues' read and the retry set's was in neither, and a system with a job
    /// still to run read as settled (the conformance CI run under the whole suite's load: a
    /// customer's first purchase answered `[]` right after the driver's settle). The lanes are read
    /// inside the snapshot too; a lane that joined since the look that named the lists to read
    /// (a worker started meanwhile) makes it look again.
    public func counts(_ kinds: Set<JobKind>? = nil) throws -> [String: Int] {
        func counted(_ members: [RedisValue]) -> Int {
            guard let kinds else { return members.count }
            return members.count { member in member.bytes.flatMap { try? JobEnvelope.decode($0) }.map { kinds.contains($0.kind) } ?? false }
        }
        let queues = (kinds ?? Set(JobKind.allCases)).map { keys.queue($0.rawValue) }.sorted()
        var lanes = try laneNames()
        while true {
            let processing = lanes.map(keys.processing)
            let commands: [[String]] =
                [["MULTI"]] + queues.map { ["LLEN", $0] } + processing.map { ["LRANGE", $0, "0", "-1"] }
                + [["ZRANGE", keys.retry, "0", "-1"], ["SMEMBERS", keys.workers], ["EXEC"]]
            guard case .array(let replies) = try redis.pipeline(commands).last, replies.count == queues.count + processing.count + 2
            else { throw HeldJobsError.snapshotRefused }
            let lanesNow = (replies.last?.array?.compactMap(\.string) ?? []).sorted()
            guard Set(lanesNow).isSubset(of: lanes) else {
                lanes = lanesNow
                continue
            }
            var held: [String: Int] = [:]
            for (key, reply) in zip(queues, replies) where (reply.int ?? -1) != 0 { held[key] = reply.int ?? -1 }
            // Redis deletes an empty list: every processing key left holds a job, of some kind.
            for (key, reply) in zip(processing, replies.dropFirst(queues.count)) {
                let jobs = counted(reply.array ?? [])
                if jobs != 0 { held[key] = jobs }
            }
            let retrying = counted(replies[queues.count + processing.count].array ?? [])
            if retrying != 0 { held[keys.retry] = retrying }
            return held
        }
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
    private func processingKeys() throws -> [String] { try laneNames().map(keys.processing) }

    private func laneNames() throws -> [String] {
        (try redis.send(["SMEMBERS", keys.workers]).array?.compactMap(\.string) ?? []).sorted()
    }
}

/// Why ``HeldJobs`` could not read its snapshot.
public enum HeldJobsError: Error, Equatable {
    /// `EXEC` did not answer the transaction's replies (it was aborted).
    case snapshotRefused
}
