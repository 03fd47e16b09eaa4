import Foundation
import Hiredis
import Libpq
import Logging
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptScheduler
import ReceiptTesting
import RedisJobQueue
import Synchronization

/// `scheduler`: the time to find and queue one batch of due subscription re-polls, at 1 M and 10 M
/// subscriptions. The issue's requirement: the cost must not grow with the table.
///
/// Each size gets its own database (`receiptq_bench_scheduler_<size>`), created and migrated by the
/// row and dropped at the end (`--keep` keeps it), so millions of rows never reach the main
/// database. The data is made inside Postgres (`INSERT … SELECT … FROM generate_series`): one app,
/// `--receipts` (5,000) receipts whose text is `--receipt-chars` (5,608: the base64 of the `receipt`
/// row's 4,205-byte forged receipt) of fake base64, stored out of line as receiptq stores them, and
/// the subscriptions referencing them round-robin. Each subscription's `next_poll_at` comes from a
/// hash of its number, so due rows are spread over the whole heap as in a table filled over months:
/// ≈ `--due` (100,000) are due (over the past 7 days), 20 % have ended (NULL, outside the partial
/// index), the rest are due within 30 days. The table's keys and indexes are dropped for the load
/// and rebuilt from their own definitions (`pg_get_constraintdef`, `pg_indexes`), then VACUUM
/// ANALYZE and a CHECKPOINT.
///
/// One sample is one `Repoller.runBatch` of `--batch` (1,000), exactly as `receiptq schedule` runs
/// it, on its own Postgres connection: `PostgresSubscriptionSchedule.claimDue` (SELECT … FOR UPDATE
/// SKIP LOCKED on the due index, joined to the receipts) → `RedisRepollQueue.acquire` (the global
/// token bucket, with a rate so high it never limits) → `enqueue` (the Lua script: a marker per
/// poll, one `LPUSH` per job) → UPDATE of the claimed rows to the lease → COMMIT (`fsync` as
/// configured, reported). Every sample must queue the whole batch (checked: the return value and
/// the queue's `LLEN`). Between samples, untimed, the run's Redis keys are deleted, so Redis stays
/// flat. Wall time per batch (p50, p90, min), split into the Redis part (acquire + enqueue,
/// including the jobs' JSON) and the rest (Postgres and decoding its rows); the CPU per batch of
/// the bench, the Postgres backend and Redis. After the samples, one more batch runs with
/// `auto_explain` (ANALYZE, BUFFERS) in the scheduler's session: the plans of the real claim and
/// advance statements, printed with `--detail`.
enum SchedulerRow: BenchRow {
    static let name = "scheduler"
    static let summary =
        "find + queue a batch of 1,000 due re-polls (Repoller.runBatch: Postgres claim, Redis enqueue) at 1 M and 10 M subscriptions (ms)"
    static let services = ["redis", "postgres"]
    static let defaultIterations = 30
    static let options = [
        OptionSpec(name: "--sizes", takesValue: true, help: "subscriptions per run, comma-separated (default 1000000,10000000)"),
        OptionSpec(name: "--batch", takesValue: true, help: "subscriptions per claim (default 1000)"),
        OptionSpec(name: "--due", takesValue: true, help: "due subscriptions made per size (default 100000)"),
        OptionSpec(name: "--receipts", takesValue: true, help: "receipts the subscriptions reference (default 5000)"),
        OptionSpec(name: "--receipt-chars", takesValue: true, help: "length of each receipt's base64 text (default 5608)"),
        OptionSpec(name: "--database", takesValue: true, help: "database name prefix (default receiptq_bench_scheduler); _<size> is added"),
        OptionSpec(name: "--keep", takesValue: false, help: "keep the bench databases (dropped by default)"),
        OptionSpec(
            name: "--checkpoint-each", takesValue: false,
            help: "CHECKPOINT before every sample (untimed): each batch writes full-page images of every page it touches"),
    ]

    /// The lease `receiptq schedule` gives a claimed row by default (retry budget 72 h + 1 h).
    static let lease: Duration = .seconds(73 * 3600)
    /// Share of subscriptions that ended (`next_poll_at` NULL).
    static let endedShare = 0.2
    /// Rows per INSERT statement while loading (progress is printed between them).
    static let loadChunk = 1_000_000

    struct Settings {
        var batch: Int
        var due: Int
        var receipts: Int
        var receiptChars: Int
        var database: String
        var keep: Bool
        var checkpointEach: Bool
        var iterations: Int
        var warmup: Int
    }

    static func run(_ options: BenchOptions) throws -> [String: Any] {
        func integer(_ name: String, _ fallback: Int, minimum: Int = 1) throws -> Int {
            guard let text = options.extra[name] else { return fallback }
            guard let value = Int(text.replacingOccurrences(of: "_", with: "")), value >= minimum else {
                throw BenchFailure(description: "\(name) needs an integer ≥ \(minimum), not \(text)")
            }
            return value
        }
        let sizes = try (options.extra["--sizes"] ?? "1000000,10000000").split(separator: ",").map { text -> Int in
            guard let value = Int(text.trimmingCharacters(in: .whitespaces).replacingOccurrences(of: "_", with: "")), value > 0 else {
                throw BenchFailure(description: "--sizes needs positive integers, not \(text)")
            }
            return value
        }
        let iterations = options.iterations(default: defaultIterations)
        let settings = Settings(
            batch: try integer("--batch", 1_000), due: try integer("--due", 100_000), receipts: try integer("--receipts", 5_000),
            receiptChars: try integer("--receipt-chars", 5_608), database: options.extra["--database"] ?? "receiptq_bench_scheduler",
            keep: options.has("--keep"), checkpointEach: options.has("--checkpoint-each"), iterations: iterations,
            warmup: options.warmup(forIterations: iterations))
        guard settings.database.range(of: "^[a-z_][a-z0-9_]{0,40}$", options: .regularExpression) != nil else {
            throw BenchFailure(description: "--database must be a lowercase SQL identifier of at most 41 characters")
        }
        // Warm-up, samples and the explained batch each take a whole batch of due rows.
        let needed = (settings.warmup + settings.iterations + 1) * settings.batch
        guard settings.due >= needed + needed / 10 else {
            throw BenchFailure(description: "--due \(settings.due) is too few for \(needed) claims (warm-up + samples + 1, with 10 % to spare)")
        }
        for size in sizes where Double(settings.due) > Double(size) * (1 - endedShare) {
            throw BenchFailure(description: "--due \(settings.due) does not fit in \(size) subscriptions")
        }

        let configuration = try AppConfiguration()
        let admin = try PostgresConnection(configuration: configuration.postgres, label: "bench-admin")
        defer { admin.close() }
        let redis = try RedisConnection(configuration: configuration.redis, label: "bench")
        defer { redis.close() }
        let server = try serverSettings(admin)

        var table = TextTable(
            title: "scheduler: Repoller.runBatch of \(settings.batch) due subscriptions (claim in Postgres, enqueue in Redis); "
                + "\(settings.iterations) samples after \(settings.warmup) warm-up, wall ms per batch",
            headers: [
                "subscriptions", "due", "load s", "table+idx MB", "p50 ms", "p90 ms", "min ms", "rows/s", "pg part p50", "redis part p50",
                "bench cpu ms", "pg cpu ms", "redis cpu ms", "machine busy %",
            ])
        var result: [String: Any] = [
            "batch": settings.batch, "iterations": settings.iterations, "warmup": settings.warmup, "due_target": settings.due,
            "receipts": settings.receipts, "receipt_chars": settings.receiptChars, "ended_share": endedShare, "lease_s": lease.seconds,
            "checkpoint_each": settings.checkpointEach,
            "postgres": server,
            "method": [
                "sample": "wall time of one Repoller.runBatch (claimDue: BEGIN, SELECT … FOR UPDATE SKIP LOCKED, acquire + enqueue in Redis, "
                    + "UPDATE to the lease, COMMIT), scheduler's own Postgres connection; Redis keys deleted between samples (untimed)",
                "redis_part": "RedisRepollQueue.acquire + enqueue (Lua scripts, jobs' JSON encoding included)",
                "pg_part": "the sample minus the Redis part: Postgres statements, commit, decoding the rows, building the jobs",
                "cpu": "per batch: bench process utime+stime; the Postgres backend's /proc stat (10 ms ticks, summed over samples); "
                    + "Redis INFO cpu",
                "data": "generate_series; next_poll_at from a hash of the row number (due rows spread over the heap); "
                    + "keys and indexes rebuilt after the load, VACUUM ANALYZE, CHECKPOINT",
            ],
        ]
        var p50s: [(size: Int, p50: Double)] = []
        var plans: [String] = []
        var usesDueIndex = true
        for size in sizes {
            let label = sizeLabel(size)
            FileHandle.standardError.write(Data("scheduler: \(label) subscriptions…\n".utf8))
            let measured = try measureSize(size, settings: settings, configuration: configuration, admin: admin, redis: redis)
            result["n\(label)"] = measured
            func value(_ key: String) -> Double { (measured[key] as? Double) ?? .nan }
            let p50 = value("p50_ms")
            p50s.append((size, p50))
            let relations = measured["sizes"] as? [String: Any] ?? [:]
            table.add([
                "\(size)", "\(measured["due"] ?? "?")", String(format: "%.0f", value("load_s")),
                String(format: "%.0f", (relations["subscriptions_total_bytes"] as? Double ?? .nan) / 1_048_576),
                String(format: "%.1f", p50), String(format: "%.1f", value("p90_ms")), String(format: "%.1f", value("min_ms")),
                Format.rate(value("rows_per_s")), String(format: "%.1f", value("pg_part_ms_p50")),
                String(format: "%.1f", value("redis_part_ms_p50")), String(format: "%.1f", value("bench_cpu_ms_per_batch")),
                String(format: "%.1f", value("pg_backend_cpu_ms_per_batch")), String(format: "%.1f", value("redis_cpu_ms_per_batch")),
                String(format: "%.0f", value("machine_busy_pct")),
            ])
            let explain = measured["explain"] as? [String: Any] ?? [:]
            if explain["claim_uses_due_index"] as? Bool != true { usesDueIndex = false }
            plans.append(planDetail(label: label, measured: measured))
        }
        result["p50_ms"] = Dictionary(uniqueKeysWithValues: p50s.map { ("n" + sizeLabel($0.size), Format.json($0.p50, places: 100)) })
        table.notes = [
            "one batch = claim \(settings.batch) due rows (SELECT … FOR UPDATE SKIP LOCKED, joined to receipts) + token bucket + enqueue "
                + "script + UPDATE to the lease + COMMIT (fsync \(server["fsync"] ?? "?"), synchronous_commit \(server["synchronous_commit"] ?? "?"))",
            "redis part = acquire + enqueue incl. the jobs' JSON; pg part = the rest; cpu = per batch (pg = the scheduler's backend)",
            "receipts of \(settings.receiptChars) base64 chars (out of line); table+idx = pg_total_relation_size(subscriptions)",
        ]
        if settings.checkpointEach { table.notes.append("--checkpoint-each: a CHECKPOINT (untimed) before every sample") }
        if let smallest = p50s.min(by: { $0.size < $1.size }), let largest = p50s.max(by: { $0.size < $1.size }), largest.size > smallest.size {
            let ratio = largest.p50 / smallest.p50
            let growth = Double(largest.size) / Double(smallest.size)
            // "Must not grow with the table": well under the table's growth, with room for this VM's noise.
            let met = ratio <= 1.5 && usesDueIndex
            result["ratio_p50"] = Format.json(ratio, places: 1_000)
            result["targets"] = [
                "cost_independent_of_size": [
                    "ratio_p50": Format.json(ratio, places: 1_000), "size_ratio": growth, "claim_uses_due_index": usesDueIndex,
                    "threshold": "p50 ratio ≤ 1.5 and the claim an index scan on subscriptions_due_idx under a Limit at every size",
                    "met": met,
                ]
            ]
            table.notes.append(
                "p50(\(sizeLabel(largest.size)))/p50(\(sizeLabel(smallest.size))) = \(String(format: "%.2f", ratio)) for \(Format.rate(growth))× "
                    + "the rows; claim on subscriptions_due_idx at every size: \(usesDueIndex ? "yes" : "NO") "
                    + "(target: ratio ≤ 1.5 and the index scan: \(met ? "met" : "not met"))")
        }
        print(table.render())
        if options.detail {
            for plan in plans { print("\n" + plan) }
        } else {
            print("  (--detail prints the load, the sizes and the EXPLAIN (ANALYZE, BUFFERS) of the claim and the advance)")
        }
        return result
    }

    static func sizeLabel(_ size: Int) -> String {
        if size % 1_000_000 == 0 { return "\(size / 1_000_000)m" }
        if size % 1_000 == 0 { return "\(size / 1_000)k" }
        return "\(size)"
    }

    static func serverSettings(_ connection: PostgresConnection) throws -> [String: Any] {
        var settings: [String: Any] = [:]
        for name in ["server_version", "fsync", "synchronous_commit", "shared_buffers", "max_wal_size", "wal_level"] {
            settings[name] = try connection.query(PostgresQuery(unsafeSQL: "SHOW \(name)")).rows.first?[0] ?? "?"
        }
        return settings
    }

    // MARK: - One size

    static func measureSize(
        _ size: Int, settings: Settings, configuration: AppConfiguration, admin: PostgresConnection, redis: RedisConnection
    ) throws -> [String: Any] {
        let database = "\(settings.database)_\(sizeLabel(size))"
        try admin.execute("DROP DATABASE IF EXISTS \(database) WITH (FORCE)")
        try admin.execute("CREATE DATABASE \(database)")
        defer {
            if settings.keep {
                FileHandle.standardError.write(Data("scheduler: kept database \(database) (--keep)\n".utf8))
            } else {
                do { try admin.execute("DROP DATABASE IF EXISTS \(database) WITH (FORCE)") } catch {
                    FileHandle.standardError.write(Data("scheduler: warning: could not drop \(database): \(error)\n".utf8))
                }
            }
        }
        var postgresConfiguration = configuration.postgres
        postgresConfiguration.database = database
        postgresConfiguration.applicationName = "receiptq-bench-scheduler"

        var result: [String: Any] = ["subscriptions": size, "database": database]
        do {
            let loader = try PostgresConnection(configuration: postgresConfiguration, label: "bench-load")
            defer { loader.close() }
            try Migrator.migrate(loader)
            let load = try loadData(size, settings: settings, connection: loader)
            result.merge(load) { _, new in new }
            let needed = (settings.warmup + settings.iterations + 1) * settings.batch
            if let due = load["due"] as? Int, due < needed {
                throw BenchFailure(description: "only \(due) subscriptions are due, \(needed) are needed: raise --due")
            }
        }

        // The scheduler's own session, as `receiptq schedule` has; its notices carry auto_explain's plans.
        let notices = NoticeStore()
        let logger = Logger(label: "bench.scheduler.postgres") { _ in NoticeCollector(store: notices) }
        let connection = try PostgresConnection(configuration: postgresConfiguration, label: "bench-scheduler", logger: logger)
        defer { connection.close() }
        let backend = try connection.query("SELECT pg_backend_pid() AS pid").rows.first?.int("pid").map { Int32($0) }

        let prefix = "{rqs-\(String(UInt32.random(in: 0...UInt32.max), radix: 16))}"
        let keys = RedisKeys(prefix: prefix)
        defer { _ = try? RedisCleanup.deleteKeys(prefix: prefix, redis) }
        let queue = TimedRepollQueue(
            RedisRepollQueue(
                connection: try RedisConnection(configuration: configuration.redis, label: "bench-scheduler"), keys: keys,
                ratePerSecond: 1_000_000_000))
        let repoller = Repoller(
            schedule: PostgresSubscriptionSchedule(connection: connection), queue: queue, batchSize: settings.batch, lease: lease,
            safetyNet: RepollSafetyNet())
        var generator = SystemRandomNumberGenerator()
        let repollQueue = keys.queue(JobKind.repoll.rawValue)

        /// After a batch (untimed): the queue must hold the whole batch; then Redis is emptied.
        func check(_ queued: Int) throws {
            let length = try redis.send(["LLEN", repollQueue]).int ?? -1
            guard queued == settings.batch, length == settings.batch else {
                throw BenchFailure(description: "a batch queued \(queued) re-polls (\(length) in Redis), not \(settings.batch): too few due rows?")
            }
            try RedisCleanup.deleteKeys(prefix: prefix, redis)
        }

        FileHandle.standardError.write(Data("scheduler: \(sizeLabel(size)): \(settings.warmup) warm-up batches…\n".utf8))
        for _ in 0..<settings.warmup {
            try check(try repoller.runBatch(now: Date(), using: &generator).queued.count)
        }
        FileHandle.standardError.write(Data("scheduler: \(sizeLabel(size)): \(settings.iterations) samples…\n".utf8))
        var wall: [UInt64] = []
        var redisPart: [UInt64] = []
        var benchCPU = 0.0
        var backendCPU = 0.0
        var redisCPU = 0.0
        let machine0 = MachineCPU.sample()
        let statistics0 = try databaseCounters(connection)
        for _ in 0..<settings.iterations {
            // After a checkpoint the first change to a page logs the whole page: with this, every sample
            // pays that for every page it touches, at any table size.
            if settings.checkpointEach { try connection.execute("CHECKPOINT") }
            let redis0 = try redisCPUSeconds(redis)
            let backend0 = backend.flatMap(ProcessStats.cpuMicros(pid:)) ?? .nan
            queue.nanoseconds = 0
            let cpu0 = ProcessStats.selfCPUMicros()
            let wall0 = BenchClock.wall()
            let queued = try repoller.runBatch(now: Date(), using: &generator).queued.count
            let wall1 = BenchClock.wall()
            let cpu1 = ProcessStats.selfCPUMicros()
            try check(queued)
            wall.append(wall1 &- wall0)
            redisPart.append(queue.nanoseconds)
            benchCPU += cpu1 - cpu0
            backendCPU += (backend.flatMap(ProcessStats.cpuMicros(pid:)) ?? .nan) - backend0
            redisCPU += (try redisCPUSeconds(redis) - redis0) * 1_000_000
        }
        let machine = MachineCPU.shares(machine0, MachineCPU.sample())
        let statistics = try databaseCounters(connection).merging(statistics0) { after, before in after - before }

        // One more batch, explained: auto_explain in this session sends each plan back as a NOTICE.
        FileHandle.standardError.write(Data("scheduler: \(sizeLabel(size)): the explained batch…\n".utf8))
        var explain: [String: Any]
        do {
            // LOAD needs a superuser (scripts/services makes the receiptq role one).
            try connection.execute(
                """
                LOAD 'auto_explain';
                SET auto_explain.log_analyze = on; SET auto_explain.log_buffers = on; SET auto_explain.log_timing = on;
                SET auto_explain.log_level = notice; SET auto_explain.log_min_duration = 0
                """)
            notices.removeAll()
            let explainWall0 = BenchClock.wall()
            let queued = try repoller.runBatch(now: Date(), using: &generator).queued.count
            let explainWall = Double(BenchClock.wall() &- explainWall0) / 1_000_000
            try connection.execute("SET auto_explain.log_min_duration = -1")
            try check(queued)
            explain = explainSummary(notices.all(), wallMs: explainWall)
        } catch let error as PostgresError {
            FileHandle.standardError.write(Data("scheduler: warning: no plan (auto_explain): \(error)\n".utf8))
            explain = ["error": "\(error)", "claim_uses_due_index": false]
        }

        let samples = Distribution(nanoseconds: wall)
        let pgPart = Distribution(nanoseconds: zip(wall, redisPart).map { $0 &- $1 })
        let redisDistribution = Distribution(nanoseconds: redisPart)
        let batches = Double(settings.iterations)
        result.merge([
            "p50_ms": Format.json(samples.p50 / 1_000, places: 100), "p90_ms": Format.json(samples.p90 / 1_000, places: 100),
            "p10_ms": Format.json(samples.p10 / 1_000, places: 100), "min_ms": Format.json(samples.min / 1_000, places: 100),
            "max_ms": Format.json(samples.max / 1_000, places: 100), "mean_ms": Format.json(samples.mean / 1_000, places: 100),
            "rows_per_s": Format.json(Double(settings.batch) / (samples.p50 / 1_000_000), places: 1),
            "pg_part_ms_p50": Format.json(pgPart.p50 / 1_000, places: 100),
            "pg_part_ms_min": Format.json(pgPart.min / 1_000, places: 100),
            "redis_part_ms_p50": Format.json(redisDistribution.p50 / 1_000, places: 100),
            "redis_part_ms_min": Format.json(redisDistribution.min / 1_000, places: 100),
            "bench_cpu_ms_per_batch": Format.json(benchCPU / batches / 1_000, places: 100),
            "pg_backend_cpu_ms_per_batch": Format.json(backendCPU / batches / 1_000, places: 100),
            "redis_cpu_ms_per_batch": Format.json(redisCPU / batches / 1_000, places: 100),
            "machine_busy_pct": Format.json(machine.busy), "machine_iowait_pct": Format.json(machine.iowait),
            "samples_ms": wall.map { Format.json(Double($0) / 1_000_000, places: 100) },
            "postgres_per_batch": statistics.mapValues { Format.json($0 / batches, places: 10) },
            "explain": explain,
            "load_average": Machine.loadAverage(),
        ]) { _, new in new }
        return result
    }
}
