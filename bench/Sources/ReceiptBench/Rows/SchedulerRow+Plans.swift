import Foundation
import Hiredis
import Libpq
import Logging
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptScheduler
import RedisJobQueue
import Synchronization

/// The `scheduler` row's counters and `auto_explain` plans, and the timed Redis side it measures.
extension SchedulerRow {

    static func redisCPUSeconds(_ redis: RedisConnection) throws -> Double {
        guard let text = try redis.send(["INFO", "cpu"]).string else { return .nan }
        var seconds = 0.0
        for line in text.split(whereSeparator: \.isNewline) where line.hasPrefix("used_cpu_user:") || line.hasPrefix("used_cpu_sys:") {
            seconds += Double(line.split(separator: ":").last ?? "") ?? 0
        }
        return seconds
    }

    /// Buffers, tuples and WAL of the bench database (`pg_stat_database`, `pg_stat_wal`), for per-batch deltas.
    static func databaseCounters(_ connection: PostgresConnection) throws -> [String: Double] {
        // Statistics are flushed at the end of a transaction; make sure ours are visible.
        _ = try? connection.query("SELECT pg_stat_force_next_flush()")
        var counters: [String: Double] = [:]
        let database = try connection.query(
            """
            SELECT blks_hit, blks_read, tup_fetched, tup_updated, xact_commit FROM pg_stat_database WHERE datname = current_database()
            """
        ).rows.first
        for column in ["blks_hit", "blks_read", "tup_fetched", "tup_updated", "xact_commit"] {
            counters[column] = database?.double(column) ?? 0
        }
        if let wal = try? connection.query("SELECT wal_records, wal_fpi, wal_bytes FROM pg_stat_wal").rows.first {
            for column in ["wal_records", "wal_fpi", "wal_bytes"] { counters[column] = wal.double(column) ?? 0 }
        }
        return counters
    }

    /// The claim's and the advance's plans from auto_explain's notices.
    static func explainSummary(_ notices: [String], wallMs: Double) -> [String: Any] {
        func plan(_ statement: String) -> [String]? {
            guard let notice = notices.first(where: { $0.contains("Query Text: \(statement)") }) else { return nil }
            return notice.split(separator: "\n", omittingEmptySubsequences: false).map { String($0) }
        }
        func duration(_ lines: [String]?) -> Double? {
            guard let head = lines?.first, let range = head.range(of: #"duration: ([0-9.]+) ms"#, options: .regularExpression) else { return nil }
            return Double(head[range].dropFirst("duration: ".count).dropLast(" ms".count))
        }
        /// The plan without the statement's text (the first `Query Text` line and its continuation).
        func planOnly(_ lines: [String]?) -> [String] {
            guard let lines else { return [] }
            guard
                let start = lines.firstIndex(where: { $0.range(of: #"^\s*(Limit|Update|LockRows|Nested Loop)"#, options: .regularExpression) != nil })
            else { return lines }
            return Array(lines[start...])
        }
        let claim = plan("SELECT")
        let advance = plan("UPDATE")
        let claimPlan = planOnly(claim)
        let dueScan = claimPlan.contains { $0.contains("Index Scan using subscriptions_due_idx") }
        let limitFirst = claimPlan.first?.trimmingCharacters(in: .whitespaces).hasPrefix("Limit") ?? false
        return [
            "batch_wall_ms": Format.json(wallMs, places: 100),
            "claim_ms": duration(claim).map { Format.json($0, places: 100) } ?? -1,
            "advance_ms": duration(advance).map { Format.json($0, places: 100) } ?? -1,
            "claim_uses_due_index": dueScan && limitFirst,
            "claim_buffers": claimPlan.first(where: { $0.contains("Buffers:") })?.trimmingCharacters(in: .whitespaces) ?? "?",
            "advance_buffers": planOnly(advance).first(where: { $0.contains("Buffers:") })?.trimmingCharacters(in: .whitespaces) ?? "?",
            "claim_plan": claimPlan,
            "advance_plan": planOnly(advance),
            "notices": notices.count,
        ]
    }

    static func planDetail(label: String, measured: [String: Any]) -> String {
        let sizes = measured["sizes"] as? [String: Any] ?? [:]
        let explain = measured["explain"] as? [String: Any] ?? [:]
        func megabytes(_ key: String) -> String { String(format: "%.1f MB", (sizes[key] as? Double ?? .nan) / 1_048_576) }
        var lines = [
            "scheduler \(label): \(measured["subscriptions"] ?? "?") subscriptions in \(measured["database"] ?? "?"), "
                + "\(measured["due"] ?? "?") due, \(measured["ended"] ?? "?") ended (NULL next_poll_at)",
            "  load \(measured["load_s"] ?? "?") s = insert \(measured["insert_s"] ?? "?") s + keys/indexes \(measured["keys_indexes_s"] ?? "?") s "
                + "+ VACUUM ANALYZE/CHECKPOINT \(measured["vacuum_analyze_checkpoint_s"] ?? "?") s",
            "  subscriptions \(megabytes("subscriptions_total_bytes")) (heap \(megabytes("subscriptions_bytes")), "
                + "indexes \(megabytes("subscriptions_indexes_bytes")): pkey \(megabytes("subscriptions_pkey_bytes")), "
                + "due \(megabytes("subscriptions_due_idx_bytes")), user \(megabytes("subscriptions_user_idx_bytes"))); "
                + "receipts \(megabytes("receipts_total_bytes")); database \(megabytes("database_bytes"))",
        ]
        if let perBatch = measured["postgres_per_batch"] as? [String: Any] {
            lines.append(
                "  per batch: " + perBatch.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))
        }
        if let samples = measured["samples_ms"] as? [Double] {
            lines.append("  samples ms: " + samples.map { String(format: "%.1f", $0) }.joined(separator: " "))
        }
        lines.append(
            "  explained batch (auto_explain ANALYZE BUFFERS, timing on): \(explain["batch_wall_ms"] ?? "?") ms; "
                + "claim SELECT \(explain["claim_ms"] ?? "?") ms, advance UPDATE \(explain["advance_ms"] ?? "?") ms")
        lines.append("  claim plan:")
        lines += (explain["claim_plan"] as? [String] ?? ["(none captured)"]).map { "    " + $0 }
        lines.append("  advance plan:")
        lines += (explain["advance_plan"] as? [String] ?? ["(none captured)"]).map { "    " + $0 }
        return lines.joined(separator: "\n")
    }
}

/// The Redis side as the scheduler uses it, timed: wall nanoseconds spent in acquire + enqueue.
final class TimedRepollQueue: RepollQueue {
    private let base: any RepollQueue
    var nanoseconds: UInt64 = 0

    init(_ base: any RepollQueue) { self.base = base }

    func acquire(_ wanted: Int, now: Date) throws -> Int {
        let start = BenchClock.wall()
        defer { nanoseconds &+= BenchClock.wall() &- start }
        return try base.acquire(wanted, now: now)
    }

    func enqueue(_ jobs: [JobEnvelope]) throws -> Int {
        let start = BenchClock.wall()
        defer { nanoseconds &+= BenchClock.wall() &- start }
        return try base.enqueue(jobs)
    }
}

/// Postgres notices of one session (auto_explain's plans), collected through its logger.
final class NoticeStore: Sendable {
    private let notices = Mutex<[String]>([])

    func append(_ notice: String) { notices.withLock { $0.append(notice) } }
    func removeAll() { notices.withLock { $0.removeAll() } }
    func all() -> [String] { notices.withLock { $0 } }
}

/// A log handler that keeps the `postgres.notice` of each message (the connection logs notices at debug).
struct NoticeCollector: LogHandler {
    let store: NoticeStore
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .debug

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        if let notice = event.metadata?["postgres.notice"] { store.append("\(notice)") }
    }
}
