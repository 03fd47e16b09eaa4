import Curl
import Foundation
import Libpq
import Logging
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import Synchronization

/// `retention` (issue 44's soak): 30 simulated days of constant traffic with short retention
/// windows, days compressed to `--day-seconds` (20) by `RETENTION_DAY_SECONDS`, every
/// `RETENTION_<KIND>_DAYS` set to `--keep-days` (2) so every kind expires within the run.
///
/// The traffic is a steady app: a fixed population of `--population` (3,000) customers whose
/// devices re-validate their receipts (the same purchases, a new receipt row each time) and whose
/// monthly subscriptions renew (a thirtieth of them each day, a renewal the mock App Store then
/// reports). `--no-renewals` keeps every receipt as it was: each renewal adds a transaction the
/// customer's receipt carries for ever, so with renewals a validation upserts more ledger rows at
/// the end than after the first week (work retention has no say in); without them the work per
/// validation is the same throughout, and a rise is the tables'.
/// `--population 0` makes every job a new customer, the first version's traffic: then
/// the receipts, purchases and subscriptions retention never drops grow with the traffic.
///
/// On a fresh database (`receiptq_bench_retention`), with the time partitions narrowed to the
/// compressed week (so partitions are created ahead and dropped within the run, as the scheduler
/// does on a real clock), it runs the pipeline's level (c25, mock App Store, real worker) one
/// "day" at a time, while the scheduler's own ``RetentionSweep`` runs on a thread of this process
/// throughout, every `--sweep-every` (2) seconds, each of its steps timed. After the first week
/// and at the end it records pg_database_size, the biggest tables with their live and dead rows,
/// and the day's Postgres CPU per validation (day 30 ÷ day 7: target within 1.1×); over the run,
/// the sampled validations' latency (enqueue → result after the commit) during a retention step,
/// during a partition drop and outside both, and the longest lock wait the sweep caused (target:
/// no stall over 100 ms).
enum RetentionRow: BenchRow {
    static let name = "retention"
    static let summary =
        "30 compressed days of a steady app's traffic with short retention, swept under traffic: size and pg µs/job day 30 ÷ day 7, stalls"
    static let services = PipelineRow.services
    static let products = PipelineRow.products
    static let defaultIterations = 1
    static let options = [
        OptionSpec(name: "--day-seconds", takesValue: true, help: "RETENTION_DAY_SECONDS: a simulated day's seconds (default 20)"),
        OptionSpec(name: "--days", takesValue: true, help: "simulated days (default 30)"),
        OptionSpec(name: "--keep-days", takesValue: true, help: "every RETENTION_<KIND>_DAYS (default 2)"),
        OptionSpec(name: "--concurrency", takesValue: true, help: "WORKER_CONCURRENCY (default 25)"),
        OptionSpec(name: "--population", takesValue: true, help: "the steady app's customers (default 3000; 0 = a new customer per job)"),
        OptionSpec(name: "--sweep-every", takesValue: true, help: "seconds between the end of a sweep and the next (default 2)"),
        OptionSpec(
            name: "--no-renewals", takesValue: false, help: "no renewals: every receipt keeps its transactions (the same work per validation)"),
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
        let population = Int(try PipelineRow.optionNumber(options, "--population", 3_000))
        let every = try PipelineRow.optionNumber(options, "--sweep-every", 2)
        let renews = population > 0 && !options.has("--no-renewals")
        setenv("RETENTION_DAY_SECONDS", "\(daySeconds)", 1)
        for kind in kinds { setenv("RETENTION_\(kind)_DAYS", "\(keep)", 1) }
        let original = ProcessInfo.processInfo.environment["POSTGRES_DB"]
        defer { original.map { setenv("POSTGRES_DB", $0, 1) } ?? unsetenv("POSTGRES_DB") }
        let base = try AppConfiguration()
        let admin = try PostgresConnection(configuration: base.postgres, label: "bench-retention-admin")
        defer { admin.close() }
        try PipelineHistoryRow.recreate(database, configuration: base, admin: admin)
        setenv("POSTGRES_DB", database, 1)

        // A day is as much traffic as fits in its seconds once the level's start-up is paid.
        var level = options
        level.extra = ["--warmup-seconds": "1", "--seconds": "\(max(daySeconds / 2, 4))"]
        let defaults = PipelineRow.Defaults(
            row: "retention", concurrencies: "\(concurrency)", processes: "1", iterations: 1, quietLoad: 0, profileAt: 0,
            alwaysNameProcesses: false)
        let (context, _) = try PipelineRow.openContext(level, defaults: defaults, latencyMs: 50, serverAPI: false)
        defer { context.close() }
        try narrowPartitions(context.postgres)
        context.fixedApp = try context.makeApp("retention")
        context.population = population > 0 ? population : nil
        context.observations = []

        let configuration = try AppConfiguration()
        let start = Date()
        let clock = { @Sendable in Int(Date().timeIntervalSince(start)) / daySeconds }
        let sweeper = try Sweeper(
            sweep: ReceiptQueueApp.makeRetentionSweep(configuration, logger: Logger(label: "bench-retention")), configuration: configuration,
            every: every, day: clock)
        var snapshots: [String: [String: Any]] = [:]
        var levels: [Level] = []
        var renewals = 0
        var renewedThrough = -1
        sweeper.start()
        do {
            var day = 0
            while day < days {
                if renews, day > renewedThrough {
                    renewals += try renew(context, population: population, days: (renewedThrough + 1)...day)
                    renewedThrough = day
                }
                let outcome = try PipelineRow.runLevel(
                    PipelineRow.Level(processes: 1, concurrency: concurrency, key: "c\(concurrency)"), context: context, profile: false)
                day = clock()
                let postgres = PipelineRow.number((outcome["cpu_us_per_job_by_process"] as? [String: Any])?["postgres"])
                levels.append(
                    Level(
                        day: day, postgres: postgres ?? .nan, rps: PipelineRow.number(outcome["rps"]) ?? .nan,
                        load: Machine.loadAverage().first ?? .nan))
                FileHandle.standardError.write(Data("retention: day \(day) of \(days), \(outcome["rps"] ?? "?") validations/s\n".utf8))
                if (day >= 7 && snapshots["week"] == nil) || day >= days {
                    snapshots[day >= days ? "end" : "week"] = try snapshot(context.postgres, day: day, postgres: postgres)
                }
            }
        } catch {
            sweeper.stop()
            throw error
        }
        sweeper.stop()
        var result = summarize(
            snapshots: snapshots, levels: levels, days: days, sweeper: sweeper, observations: context.observations ?? [])
        result.merge([
            "day_seconds": daySeconds, "keep_days": keep, "population": population, "renewals": renewals, "sweep_every_s": every,
            "concurrency": concurrency,
        ]) { _, new in new }
        return result
    }

    /// One day's level: its Postgres CPU per validation, its rate, the machine's load after it.
    struct Level {
        var day: Int
        var postgres: Double
        var rps: Double
        var load: Double
    }

    /// Replaces the migrations' partitions of the (still empty) partitioned tables, a legacy one
    /// up to a real week ahead and real weeks after it, by none: the sweep then creates them
    /// ahead at the compressed week's width, and drops each within the run once expired.
    static func narrowPartitions(_ postgres: PostgresConnection) throws {
        for table in ["validation_attempts", "audit_log"] {
            let names = try postgres.query("SELECT name FROM receiptq_partitions(\(table)::regclass)").rows.compactMap { $0.string("name") }
            for name in names { try postgres.execute("DROP TABLE \(name)") }
        }
    }

    /// Tells the mock App Store of the renewals of `days`: each day a thirtieth of the customers'
    /// monthly subscriptions renews (a new transaction the next verifyReceipt reports).
    static func renew(_ context: PipelineRow.Context, population: Int, days: ClosedRange<Int>) throws -> Int {
        guard let tag = context.receipt?.tag else { return 0 }
        let curl = try CurlEasy(options: CurlOptions())
        let now = Date().timeIntervalSince1970 * 1000
        var renewed = 0
        for day in days {
            for customer in stride(from: day % 30, to: population, by: 30) {
                let original = "\(tag)\(JobFactory.serial(customer))02"
                let body: [String: String] = [
                    "original_transaction_id": original, "transaction_id": "\(original)\(1_000 + day)",
                    "product_id": "\(PipelineRow.Context.bundleID).pro.monthly", "purchase_date_ms": String(Int64(now)),
                    "expires_date_ms": String(Int64(now + 30 * 86_400_000)),
                ]
                let response = try curl.perform(
                    HTTPRequest(
                        method: "POST", url: "\(context.mockBase)/mock/renewals", headers: [(name: "Content-Type", value: "application/json")],
                        body: [UInt8](try JSONEncoder().encode(body))))
                guard response.status == 201 else { throw BenchFailure(description: "mock /mock/renewals answered \(response.status)") }
                renewed += 1
            }
        }
        return renewed
    }

    static func snapshot(_ connection: PostgresConnection, day: Int, postgres: Double?) throws -> [String: Any] {
        let size = try connection.query("SELECT pg_database_size(current_database()) AS bytes").rows.first?.int("bytes") ?? -1
        let tables = try connection.query(
            """
            SELECT c.relname AS name, pg_total_relation_size(c.oid) AS bytes, s.n_live_tup AS live, s.n_dead_tup AS dead
            FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
            WHERE n.nspname = 'public' AND c.relkind = 'r' ORDER BY 2 DESC LIMIT 12
            """
        ).rows.map {
            ["table": $0.string("name") ?? "?", "bytes": $0.int("bytes") ?? -1, "live_rows": $0.int("live") ?? -1, "dead_rows": $0.int("dead") ?? -1]
                as [String: Any]
        }
        // The work a re-validation does grows with its receipt's transactions (each upserted).
        let ledger = try connection.query("SELECT count(*) AS n FROM in_app_purchases").rows.first?.int("n") ?? -1
        return [
            "day": day, "database_bytes": size, "biggest_tables": tables, "postgres_cpu_us_per_job": Format.json(postgres ?? -1),
            "ledger_rows": ledger,
        ]
    }
}
