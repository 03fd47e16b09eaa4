import Foundation
import Hiredis
import Libpq
import Logging
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptScheduler
import RedisJobQueue

/// `retention` (issue 44's soak): 30 simulated days of constant traffic with short retention
/// windows, days compressed to `--day-seconds` (20) by `RETENTION_DAY_SECONDS`, every
/// `RETENTION_<KIND>_DAYS` set to `--keep-days` (2) so every kind expires within the run.
///
/// On a fresh database (`receiptq_bench_retention`), it runs the pipeline's level (c25, mock App
/// Store, real worker) one "day" at a time with the bench's data kept, and after each day one
/// retention sweep in this process (the scheduler's own ``RetentionSweep``), timed. After the
/// first week and at day 30 it records pg_database_size, the biggest tables and the day's Postgres
/// CPU per validation; the summary prints day 30 ÷ day 7 (target: within 1.1×).
///
/// First version: the sweep runs between the days, not during them, so it cannot yet measure
/// validations stalled by a sweep (the p99 during vs outside one); that is the next step.
enum RetentionRow: BenchRow {
    static let name = "retention"
    static let summary = "30 compressed days of traffic with short retention: database size and Postgres µs/job, day 30 ÷ day 7"
    static let services = PipelineRow.services
    static let products = PipelineRow.products
    static let defaultIterations = 1
    static let options = [
        OptionSpec(name: "--day-seconds", takesValue: true, help: "RETENTION_DAY_SECONDS: a simulated day's seconds (default 20)"),
        OptionSpec(name: "--days", takesValue: true, help: "simulated days (default 30)"),
        OptionSpec(name: "--keep-days", takesValue: true, help: "every RETENTION_<KIND>_DAYS (default 2)"),
        OptionSpec(name: "--concurrency", takesValue: true, help: "WORKER_CONCURRENCY (default 25)"),
    ]

    static let database = "receiptq_bench_retention"
    static let kinds = [
        "APPLE_CALL_ATTEMPTS", "NOTIFICATIONS", "EVENTS", "WEBHOOK_DELIVERIES", "AUDIT_LOG", "DEAD_LETTERS", "SUPERSEDED_RECEIPTS",
    ]

    static func run(_ options: BenchOptions) throws -> [String: Any] {
        let daySeconds = try options.positive("--day-seconds", default: 20)
        let days = try options.positive("--days", default: 30)
        let keep = try options.positive("--keep-days", default: 2)
        let concurrency = try options.positive("--concurrency", default: 25)
        setenv("RETENTION_DAY_SECONDS", "\(daySeconds)", 1)
        for kind in kinds { setenv("RETENTION_\(kind)_DAYS", "\(keep)", 1) }
        setenv("RETENTION_BATCH_PAUSE_MS", "0", 1)
        let original = ProcessInfo.processInfo.environment["POSTGRES_DB"]
        defer { original.map { setenv("POSTGRES_DB", $0, 1) } ?? unsetenv("POSTGRES_DB") }
        let base = try AppConfiguration()
        let admin = try PostgresConnection(configuration: base.postgres, label: "bench-retention-admin")
        defer { admin.close() }
        try PipelineHistoryRow.recreate(database, configuration: base, admin: admin)
        setenv("POSTGRES_DB", database, 1)
        let configuration = try AppConfiguration()
        let logger = Logger(label: "bench-retention")
        let sweep = ReceiptQueueApp.makeRetentionSweep(configuration, logger: logger)
        let connection = try PostgresConnection(configuration: configuration.postgres, label: "bench-retention")
        defer { connection.close() }
        let rows = PostgresExpiredRows(connection: try PostgresConnection(configuration: configuration.postgres, label: "retention"))
        let trim = RedisDeadLetterTrim(
            connection: try RedisConnection(configuration: configuration.redis, label: "retention"), keys: configuration.keys)

        // A day is as much traffic as fits in its seconds once the level's start-up is paid.
        var level = options
        level.iterations = 1
        level.extra = [
            "--concurrency": "\(concurrency)", "--no-peer": "", "--profile-at": "0", "--keep-data": "",
            "--warmup-seconds": "1", "--seconds": "\(max(daySeconds / 2, 4))",
        ]
        let defaults = PipelineRow.Defaults(
            row: "retention", concurrencies: "\(concurrency)", processes: "1", iterations: 1, quietLoad: 0, profileAt: 0,
            alwaysNameProcesses: false)
        let start = Date()
        var snapshots: [String: [String: Any]] = [:]
        var sweeps: [[String: Any]] = []
        var day = 0
        while day < days {
            let outcome = try PipelineRow.run(level, defaults: defaults)
            let clock = BenchClock.wall()
            let report = try sweep.sweep(rows: rows, deadLetters: trim)
            let sweepMs = Double(BenchClock.wall() &- clock) / 1e6
            day = Int(Date().timeIntervalSince(start)) / daySeconds
            sweeps.append([
                "day": day, "ms": Format.json(sweepMs), "partitions_dropped": report.partitionsDropped.values.reduce(0, +),
                "deleted": Dictionary(uniqueKeysWithValues: report.deleted.map { ($0.key.rawValue, $0.value) }),
            ])
            let key = "c\(concurrency)"
            let postgres = PipelineRow.number(
                ((outcome[key] as? [String: Any])?["cpu_us_per_job_by_process"] as? [String: Any])?["postgres"])
            FileHandle.standardError.write(Data("retention: day \(day) of \(days), sweep \(Int(sweepMs)) ms\n".utf8))
            if (day >= 7 && snapshots["week"] == nil) || day >= days {
                snapshots[day >= days ? "end" : "week"] = try snapshot(connection, day: day, postgres: postgres)
            }
        }
        return summarize(snapshots: snapshots, sweeps: sweeps, daySeconds: daySeconds, keep: keep)
    }

    static func snapshot(_ connection: PostgresConnection, day: Int, postgres: Double?) throws -> [String: Any] {
        let size = try connection.query("SELECT pg_database_size(current_database()) AS bytes").rows.first?.int("bytes") ?? -1
        let tables = try connection.query(
            """
            SELECT c.relname AS name, pg_total_relation_size(c.oid) AS bytes FROM pg_class c
            JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') ORDER BY 2 DESC LIMIT 8
            """
        ).rows.map { ["table": $0.string("name") ?? "?", "bytes": $0.int("bytes") ?? -1] as [String: Any] }
        return ["day": day, "database_bytes": size, "biggest_tables": tables, "postgres_cpu_us_per_job": Format.json(postgres ?? -1)]
    }

    static func summarize(snapshots: [String: [String: Any]], sweeps: [[String: Any]], daySeconds: Int, keep: Int) -> [String: Any] {
        var result: [String: Any] = ["day_seconds": daySeconds, "keep_days": keep, "sweeps": sweeps]
        var table = TextTable(
            title: "retention: \(daySeconds) s days, every kind kept \(keep) days", headers: ["when", "day", "database MB", "pg µs/job"])
        for when in ["week", "end"] {
            guard let s = snapshots[when] else { continue }
            result[when] = s
            table.add([
                when, "\(s["day"] ?? "?")", String(format: "%.1f", Double(s["database_bytes"] as? Int ?? -1) / 1e6),
                "\(s["postgres_cpu_us_per_job"] ?? "?")",
            ])
        }
        if let week = snapshots["week"], let end = snapshots["end"], let w = week["database_bytes"] as? Int, let e = end["database_bytes"] as? Int,
            let wc = PipelineRow.number(week["postgres_cpu_us_per_job"]), let ec = PipelineRow.number(end["postgres_cpu_us_per_job"])
        {
            let size = Double(e) / Double(w)
            let cpu = ec / wc
            result["end_over_week"] = ["database_size": Format.json(size, places: 100), "postgres_cpu_us_per_job": Format.json(cpu, places: 100)]
            result["targets"] = ["within_1.1x": ["value": Format.json(max(size, cpu), places: 100), "met": max(size, cpu) <= 1.1]]
            table.notes.append(
                "day 30 ÷ day 7: database size \(Format.json(size, places: 100))×, Postgres CPU per validation \(Format.json(cpu, places: 100))×")
        }
        let longest = sweeps.compactMap { PipelineRow.number($0["ms"]) }.max() ?? 0
        table.notes.append("longest sweep \(Int(longest)) ms (between days; stalls during a sweep not yet measured)")
        print(table.render())
        return result
    }
}
