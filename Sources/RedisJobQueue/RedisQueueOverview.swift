import Foundation
import Hiredis
import ReceiptCore

/// The queues at a glance, from Redis: list lengths, set sizes, the workers' heartbeats, the outage
/// circuit and the last hour's activity, in at most two round trips.
public struct RedisQueueOverview: QueueOverview {
    /// How many minutes of activity a snapshot holds, the current one included.
    public static let activityMinutes = 60

    private let pool: RedisConnectionPool
    private let keys: RedisKeys
    private let minutes: Int
    private let now: @Sendable () -> Date

    /// Creates the overview on the API's pool.
    /// - Parameters:
    ///   - pool: the API's connections.
    ///   - keys: the key schema.
    ///   - activityMinutes: how many minutes of activity a snapshot reads (0 for none: the
    ///     metrics need only the counts).
    ///   - now: the injected clock: which minutes are the last hour, and whether an open circuit's
    ///     period is over.
    public init(
        pool: RedisConnectionPool, keys: RedisKeys, activityMinutes: Int = Self.activityMinutes,
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.pool = pool
        self.keys = keys
        self.minutes = max(0, activityMinutes)
        self.now = now
    }

    public func snapshot() async throws -> QueueSnapshot {
        let keys = self.keys
        let now = self.now()
        let current = RedisActivity.minute(of: now)
        let minutes = (0..<Int64(self.minutes)).reversed().map { current - $0 }
        return try await pool.withConnectionRetryingOnce { connection in
            // Everything whose keys are known up front goes in one pipeline; only the workers' own
            // keys need a second.
            let counts = try connection.pipeline(
                [
                    ["LLEN", keys.queue(JobKind.validate.rawValue)], ["LLEN", keys.queue(JobKind.repoll.rawValue)],
                    ["ZCARD", keys.retry], ["ZCARD", keys.dead], ["SMEMBERS", keys.workers],
                    ["HMGET", keys.circuitState, "open_until", "failed_probes"],
                    ["HMGET", keys.verifyReceiptLifecycle, "gone_since", "deprecation", "sunset"],
                    ["LLEN", keys.queue(JobKind.notification.rawValue)], ["LLEN", keys.queue(JobKind.webhook.rawValue)],
                    ["LLEN", keys.queue(JobEnvelope.importQueue)],
                    [
                        "ZREVRANGEBYSCORE", keys.importRuns, "+inf", String(milliseconds(now) - Self.importsShownFor * 1000), "LIMIT", "0",
                        String(Self.importsShown),
                    ],
                    ["INFO", "replication"],
                ] + minutes.map { ["HGETALL", keys.activity(minute: $0)] })
            let circuit = Self.circuit(counts[5], now: now)
            let lifecycle = (counts[6].array ?? []).map { value in
                value.string.flatMap(Double.init).map { Date(timeIntervalSince1970: $0 / 1000) }
            }
            let verifyReceipt =
                lifecycle.count == 3
                ? VerifyReceiptLifecycle(goneSince: lifecycle[0], deprecation: lifecycle[1], sunset: lifecycle[2]) : VerifyReceiptLifecycle()
            let activity = zip(minutes, counts.dropFirst(12)).map { minute, reply in
                ActivityMinute(minute: RedisActivity.date(ofMinute: minute), tally: RedisActivity.tally(reply))
            }
            let lanes = (counts[4].array ?? []).compactMap(\.string).sorted()
            let importIDs = (counts[10].array ?? []).compactMap { $0.string.flatMap(UUID.init(uuidString:)) }
            // A lane whose heartbeat hash expired is dead: the janitor takes its jobs back, and it is
            // not listed as live.
            let second =
                lanes.isEmpty && importIDs.isEmpty
                ? []
                : try connection.pipeline(
                    lanes.flatMap { [["HGETALL", keys.worker($0)], ["LLEN", keys.processing($0)]] }
                        + importIDs.map { ["HGETALL", keys.importRun($0.canonical)] })
            let details = Array(second.prefix(2 * lanes.count))
            let imports = zip(importIDs, second.dropFirst(2 * lanes.count)).compactMap { id, reply in Self.importRun(id, reply) }
            var workers: [WorkerStatus] = []
            for (index, lane) in lanes.enumerated() {
                guard let hash = Self.hash(details[2 * index]) else { continue }
                func date(_ key: String) -> Date? { Self.date(milliseconds: hash[key]) }
                workers.append(
                    WorkerStatus(
                        id: lane, host: hash["host"], pid: hash["pid"].flatMap(Int.init), busy: hash["busy"].flatMap(Int.init),
                        startedAt: date("started_at"), lastHeartbeatAt: date("beat_at"), processing: details[2 * index + 1].int ?? 0))
            }
            return QueueSnapshot(
                queued: [
                    .validate: counts[0].int ?? 0, .repoll: counts[1].int ?? 0, .notification: counts[7].int ?? 0,
                    .webhook: counts[8].int ?? 0,
                ],
                retries: counts[2].int ?? 0,
                dead: counts[3].int ?? 0, workers: workers, circuit: circuit, activity: activity, verifyReceipt: verifyReceipt,
                importQueued: counts[9].int ?? 0, imports: imports, replication: ReplicationStatus.parse(info: counts[11].string ?? ""))
        }
    }

    /// How far back imports are listed (seconds since their last batch or settlement), and how many.
    static let importsShownFor: Int64 = 86_400
    static let importsShown = 20

    /// An `HGETALL` reply as a dictionary of its text fields; nil for a missing (expired) hash.
    static func hash(_ reply: RedisValue) -> [String: String]? {
        let fields = reply.array ?? []
        guard !fields.isEmpty else { return nil }
        var hash: [String: String] = [:]
        for pair in stride(from: 0, to: fields.count - 1, by: 2) {
            if let key = fields[pair].string, let value = fields[pair + 1].string { hash[key] = value }
        }
        return hash
    }

    /// A time stored as Unix milliseconds.
    static func date(milliseconds text: String?) -> Date? { text.flatMap(Double.init).map { Date(timeIntervalSince1970: $0 / 1000) } }

    /// An import's progress from its hash (nil when it expired between the two reads).
    static func importRun(_ id: UUID, _ reply: RedisValue) -> ImportRun? {
        guard let hash = hash(reply) else { return nil }
        func count(_ key: String) -> Int { hash[key].flatMap(Int.init) ?? 0 }
        func date(_ key: String) -> Date? { Self.date(milliseconds: hash[key]) }
        return ImportRun(
            id: id, appID: hash["app"].flatMap(UUID.init(uuidString:)), startedAt: date("started_ms"), updatedAt: date("updated_ms"),
            queued: count("queued"), duplicates: count("duplicates"), invalid: count("invalid"), stored: count("stored"),
            failed: count("failed"), firstStoredAt: date("first_stored_ms"), lastStoredAt: date("last_stored_ms"))
    }

    /// The circuit from its state hash, by ``RedisOutageCircuit``'s rules: no `open_until` means
    /// closed; before it, open; after it, half-open until a probe's verdict closes or re-opens it.
    static func circuit(_ reply: RedisValue, now: Date) -> CircuitSnapshot {
        let fields = reply.array ?? []
        let failedProbes = fields.count > 1 ? fields[1].int ?? 0 : 0
        guard let openUntil = fields.first?.int.map(Int64.init) else { return CircuitSnapshot(status: .closed) }
        let status: CircuitStatus =
            milliseconds(now) < openUntil ? .open(until: Date(timeIntervalSince1970: Double(openUntil) / 1000)) : .halfOpen
        return CircuitSnapshot(status: status, failedProbes: failedProbes)
    }
}

// Redis's report format is the adapter's to know; the port only carries the numbers.
extension ReplicationStatus {
    /// Parses the text of `INFO replication` (`slave0:ip=…,state=online,offset=…,lag=…` lines and
    /// `master_repl_offset`); anything else (a replica's answer, an empty one) is no replicas.
    public static func parse(info: String) -> ReplicationStatus {
        var fields: [Substring: Substring] = [:]
        for line in info.split(whereSeparator: \.isNewline) {
            guard let colon = line.firstIndex(of: ":") else { continue }
            fields[line[..<colon]] = line[line.index(after: colon)...]
        }
        guard fields["role"] == "master", let primaryOffset = fields["master_repl_offset"].flatMap({ Int($0) }) else {
            return ReplicationStatus()
        }
        var status = ReplicationStatus()
        for (name, value) in fields where name.hasPrefix("slave") && name.dropFirst(5).allSatisfy(\.isNumber) {
            var replica: [Substring: Substring] = [:]
            for pair in value.split(separator: ",") {
                let parts = pair.split(separator: "=", maxSplits: 1)
                if parts.count == 2 { replica[parts[0]] = parts[1] }
            }
            guard replica["state"] == "online", let offset = replica["offset"].flatMap({ Int($0) }) else { continue }
            status.replicas += 1
            status.lagSeconds = max(status.lagSeconds, replica["lag"].flatMap { Int($0) } ?? 0)
            status.lagBytes = max(status.lagBytes, primaryOffset - offset)
        }
        return status
    }
}
