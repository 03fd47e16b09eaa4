import Foundation
import Libpq
import PostgresStore
import ReceiptQueueApp

/// `pipeline_history`: does a validation cost Postgres more once the tables hold years of them?
/// The `pipeline` row's level (c100 by default; its options apply) on two databases in known
/// states, alternating, `--iterations` (3) times:
/// - **fresh**: `receiptq_bench_fresh`, dropped, created and migrated before each run;
/// - **history**: `receiptq_bench_history` (`--history-database`), holding `--receipts` (10 M)
///   receipts of one app, 3 purchases each (30 M; a subscription's renewals, or three one-time
///   products) and `--subscriptions` (5 M) subscriptions, made once inside Postgres with
///   `generate_series` (keys and indexes dropped for the load and rebuilt, then VACUUM (FREEZE,
///   ANALYZE) and a CHECKPOINT) and kept for later runs (`--reload` makes it again). Its rows are
///   `production`, the bench's jobs `sandbox`: the level's validations never touch them, only share
///   the tables and indexes with them, as a new customer's purchases share them with everybody's.
///   Each receipt's text is `--receipt-chars` (200) of fake base64, stored in line: real ones
///   (~5.6 KB) live out of line in TOAST, which no validation reads for another receipt, and 10 M
///   of them would need ~56 GB of disk.
///
/// Each run is a whole `pipeline` run (its table printed) with `POSTGRES_DB` set for the bench and
/// the worker; the bench's apps are deleted after it, as always. The summary compares the medians:
/// validations/s and Postgres CPU per validation, history ÷ fresh (target: within 1.2×).
enum PipelineHistoryRow: BenchRow {
    static let name = "pipeline_history"
    static let summary =
        "pipeline at c100 on a fresh database and on one holding 10 M receipts / 30 M purchases / 5 M subscriptions: validations/s, Postgres µs/job"
    static let services = PipelineRow.services
    static let products = PipelineRow.products
    static let defaultIterations = 3
    static let options =
        PipelineRow.options.filter { !["--no-peer", "--profile-at", "--server-api-concurrency", "--server-api-apps"].contains($0.name) } + [
            OptionSpec(name: "--receipts", takesValue: true, help: "receipts in the history database (default 10000000; 3 purchases each)"),
            OptionSpec(name: "--subscriptions", takesValue: true, help: "subscriptions in it (default 5000000, at most half the receipts)"),
            OptionSpec(name: "--receipt-chars", takesValue: true, help: "length of each history receipt's text (default 200)"),
            OptionSpec(name: "--history-database", takesValue: true, help: "the history database (default receiptq_bench_history)"),
            OptionSpec(name: "--reload", takesValue: false, help: "make the history database again even if it holds these sizes"),
        ]

    static let freshDatabase = "receiptq_bench_fresh"

    struct History {
        var receipts: Int
        var subscriptions: Int
        var receiptChars: Int
        var database: String
    }

    static func run(_ options: BenchOptions) throws -> [String: Any] {
        let history = History(
            receipts: try options.positive("--receipts", default: 10_000_000),
            subscriptions: try options.positive("--subscriptions", default: 5_000_000),
            receiptChars: try options.positive("--receipt-chars", default: 200),
            database: options.extra["--history-database"] ?? "receiptq_bench_history")
        guard history.subscriptions * 2 <= history.receipts else {
            throw BenchFailure(description: "--subscriptions must be at most half of --receipts")
        }
        guard history.database.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_") }) else {
            throw BenchFailure(description: "--history-database: letters, digits and _ only")
        }
        let configuration = try AppConfiguration()
        let admin = try PostgresConnection(configuration: configuration.postgres, label: "bench-history-admin")
        defer { admin.close() }
        let load = try prepareHistory(history, configuration: configuration, admin: admin, reload: options.has("--reload"))

        // The pipeline's level, on each database in turn; everything else as the pipeline row does it.
        var level = options
        level.iterations = 1
        level.extra["--concurrency"] = options.extra["--concurrency"] ?? "100"
        level.extra["--no-peer"] = ""
        level.extra["--server-api-concurrency"] = "0"
        level.extra["--profile-at"] = "0"
        let original = ProcessInfo.processInfo.environment["POSTGRES_DB"]
        defer { original.map { setenv("POSTGRES_DB", $0, 1) } ?? unsetenv("POSTGRES_DB") }
        var runs: [String: [[String: Any]]] = [:]
        let count = options.iterations(default: defaultIterations)
        for run in 1...count {
            for (state, database) in [("fresh", freshDatabase), ("history", history.database)] {
                if state == "fresh" { try recreate(freshDatabase, configuration: configuration, admin: admin) }
                FileHandle.standardError.write(Data("pipeline_history: \(state) (\(database)), run \(run) of \(count)…\n".utf8))
                setenv("POSTGRES_DB", database, 1)
                let defaults = PipelineRow.Defaults(
                    row: "pipeline_history (\(state))", concurrencies: "100", processes: "1", iterations: 1, quietLoad: 0, profileAt: 0,
                    alwaysNameProcesses: false)
                var outcome = try PipelineRow.run(level, defaults: defaults)
                outcome["run"] = run
                runs[state, default: []].append(outcome)
            }
        }
        try? admin.execute("DROP DATABASE IF EXISTS \(freshDatabase) WITH (FORCE)")
        let key = "c\(try options.positiveList("--concurrency", default: "100")[0])"
        return summarize(runs: runs, key: key, history: history, load: load)
    }

    // MARK: - The databases

    static func recreate(_ database: String, configuration: AppConfiguration, admin: PostgresConnection) throws {
        try admin.execute("DROP DATABASE IF EXISTS \(database) WITH (FORCE)")
        try admin.execute("CREATE DATABASE \(database)")
        var postgres = configuration.postgres
        postgres.database = database
        let connection = try PostgresConnection(configuration: postgres, label: "bench-history-migrate")
        defer { connection.close() }
        try Migrator.migrate(connection)
    }

    /// The history database as `history` asks, made unless it already is (its `bench_history`
    /// table records what was loaded, written last).
    static func prepareHistory(
        _ history: History, configuration: AppConfiguration, admin: PostgresConnection, reload: Bool
    ) throws -> [String: Any] {
        var postgres = configuration.postgres
        postgres.database = history.database
        let exists = try admin.query("SELECT 1 AS found FROM pg_database WHERE datname = \(history.database)").rows.first != nil
        if exists, !reload, let connection = try? PostgresConnection(configuration: postgres, label: "bench-history-check") {
            defer { connection.close() }
            try Migrator.migrate(connection)
            let loaded = try? connection.query(
                "SELECT receipts, subscriptions, receipt_chars, seconds FROM bench_history"
            ).rows.first
            if let loaded, loaded.int("receipts") == history.receipts, loaded.int("subscriptions") == history.subscriptions,
                loaded.int("receipt_chars") == history.receiptChars
            {
                FileHandle.standardError.write(Data("pipeline_history: \(history.database) already holds the history: reused\n".utf8))
                return ["reused": true, "load_s": loaded.double("seconds") ?? -1]
            }
        }
        try recreate(history.database, configuration: configuration, admin: admin)
        let connection = try PostgresConnection(configuration: postgres, label: "bench-history-load")
        defer { connection.close() }
        let start = BenchClock.wall()
        try load(history, on: connection)
        let seconds = Double(BenchClock.wall() &- start) / 1e9
        try connection.execute("CREATE TABLE bench_history (receipts bigint, subscriptions bigint, receipt_chars int, seconds float8)")
        _ = try connection.query(
            """
            INSERT INTO bench_history VALUES (\(history.receipts), \(history.subscriptions), \(history.receiptChars), \(seconds))
            """)
        return ["reused": false, "load_s": Format.json(seconds)]
    }

    /// Receipt i: `md5('history-' || i)` as its id; purchases 3i, 3i+1, 3i+2. The first
    /// `subscriptions` even receipts hold a monthly subscription (its three renewals, original
    /// transaction 4e14 + i), the others three one-time products.
    static func load(_ history: History, on connection: PostgresConnection) throws {
        let app = UUID()
        let now = Date()
        let label = "pipeline_history: \(history.database)"
        try connection.execute("SET maintenance_work_mem = '1GB'")
        try connection.execute("SET synchronous_commit = off")
        _ = try connection.query(
            "INSERT INTO apps (id, name, bundle_id) VALUES (\(app), \("bench-history"), \("com.example.receiptq.history"))")
        let rebuild = try BenchLoad.withoutKeys(["receipts", "in_app_purchases", "subscriptions"], on: connection) {
            try BenchLoad.chunked(history.receipts, label: "\(label): receipts", on: connection) { first, last in
                """
                INSERT INTO receipts (id, app_id, style, bundle_id, environment, status, apple_status, receipt_data, transaction_ids,
                                      user_identifier, created_at, updated_at, validated_at, validated_by)
                SELECT md5('history-' || i)::uuid, \(app), 'unified', 'com.example.receiptq.history', 'production', 'valid', 0,
                       left(repeat(replace(encode(sha512(('history-' || i)::bytea), 'base64'), E'\\n', ''), \(history.receiptChars / 88 + 1)::int),
                            \(history.receiptChars)::int),
                       ARRAY[(300000000000000 + 3 * i)::text, (300000000000001 + 3 * i)::text, (300000000000002 + 3 * i)::text],
                       'history-user-' || (i % 3000000), t0, t0, t0, 'verify_receipt'
                FROM generate_series(\(first)::bigint, \(last)::bigint) i,
                     LATERAL (SELECT \(now)::timestamptz - (i % 1000) * interval '1 day' - (i % 86400) * interval '1 second' AS t0) t
                """
            }
            try BenchLoad.chunked(history.receipts, label: "\(label): purchases (3 per receipt)", on: connection) { first, last in
                """
                INSERT INTO in_app_purchases (app_id, receipt_id, environment, transaction_id, original_transaction_id, product_id, quantity,
                                              purchase_date, original_purchase_date, expires_date, user_identifier, created_at, updated_at)
                SELECT \(app), md5('history-' || i)::uuid, 'production', (300000000000000 + 3 * i + k)::text,
                       CASE WHEN s THEN (400000000000000 + i)::text ELSE (300000000000000 + 3 * i + k)::text END,
                       CASE WHEN s THEN 'com.example.receiptq.history.monthly' ELSE 'com.example.receiptq.history.item' || k END, 1,
                       t0 + k * interval '30 days', t0, CASE WHEN s THEN t0 + (k + 1) * interval '30 days' END,
                       'history-user-' || (i % 3000000), t0, t0
                FROM generate_series(\(first)::bigint, \(last)::bigint) i, generate_series(0, 2) k,
                     LATERAL (SELECT i % 2 = 0 AND i / 2 < \(history.subscriptions) AS s,
                                     \(now)::timestamptz - (i % 1000) * interval '1 day' - (i % 86400) * interval '1 second' AS t0) t
                """
            }
            try BenchLoad.chunked(history.subscriptions, label: "\(label): subscriptions", on: connection) { first, last in
                """
                INSERT INTO subscriptions (app_id, environment, original_transaction_id, product_id, state, expires_at, purchased_at,
                                           original_purchase_date, auto_renew_status, auto_renew_product_id, latest_transaction_id,
                                           receipt_id, observed_at, next_poll_at, user_identifier, created_at, updated_at)
                SELECT \(app), 'production', (400000000000000 + i)::text, 'com.example.receiptq.history.monthly',
                       CASE WHEN e > \(now)::timestamptz THEN 'active' ELSE 'expired' END, e, e - interval '30 days', t0,
                       e > \(now)::timestamptz, 'com.example.receiptq.history.monthly', (300000000000002 + 3 * i)::text,
                       md5('history-' || i)::uuid, t0, CASE WHEN e > \(now)::timestamptz THEN e - interval '1 day' END,
                       'history-user-' || (i % 3000000), t0, t0
                FROM generate_series(\(first * 2)::bigint, \(last * 2)::bigint, 2) i,
                     LATERAL (SELECT \(now)::timestamptz - (i % 1000) * interval '1 day' - (i % 86400) * interval '1 second' AS t0) t,
                     LATERAL (SELECT t0 + interval '90 days' AS e) x
                """
            }
        }
        FileHandle.standardError.write(
            Data("\(label): keys and indexes rebuilt (\(String(format: "%.0f", rebuild)) s); VACUUM (FREEZE, ANALYZE)…\n".utf8))
        for table in ["apps", "receipts", "in_app_purchases", "subscriptions"] { try connection.execute("VACUUM (FREEZE, ANALYZE) \(table)") }
        try connection.execute("CHECKPOINT")
    }

    // MARK: - Results

    static func summarize(runs: [String: [[String: Any]]], key: String, history: History, load: [String: Any]) -> [String: Any] {
        func levels(_ state: String) -> [[String: Any]] { (runs[state] ?? []).compactMap { $0[key] as? [String: Any] } }
        func numbers(_ state: String, _ read: ([String: Any]) -> Double?) -> [Double] { levels(state).compactMap(read) }
        let rps = { (level: [String: Any]) in PipelineRow.number(level["rps"]) }
        let postgres = { (level: [String: Any]) in PipelineRow.number((level["cpu_us_per_job_by_process"] as? [String: Any])?["postgres"]) }
        var result: [String: Any] = [
            "history": [
                "receipts": history.receipts, "purchases": 3 * history.receipts,
                "subscriptions": history.subscriptions, "receipt_chars": history.receiptChars, "database": history.database,
            ].merging(load) { a, _ in a }
        ]
        var table = TextTable(
            title: "pipeline_history: the pipeline's level on a fresh database and on \(history.receipts) receipts / \(3 * history.receipts) "
                + "purchases / \(history.subscriptions) subscriptions (runs alternate)",
            headers: ["database", "rps (runs)", "median rps", "pg µs/job (runs)", "median pg µs/job"])
        var medians: [String: (rps: Double, postgres: Double)] = [:]
        for state in ["fresh", "history"] {
            let rates = numbers(state, rps)
            let costs = numbers(state, postgres)
            medians[state] = (median(rates), median(costs))
            result[state] = [
                "rps": rates.map { Format.json($0) }, "postgres_cpu_us_per_job": costs.map { Format.json($0) },
                "median_rps": Format.json(median(rates)), "median_postgres_cpu_us_per_job": Format.json(median(costs)), "runs": runs[state] ?? [],
            ]
            table.add([
                state, rates.map(Format.rate).joined(separator: " · "), Format.rate(median(rates)),
                costs.map(Format.micros).joined(separator: " · "), Format.micros(median(costs)),
            ])
        }
        if let fresh = medians["fresh"], let old = medians["history"] {
            let cost = old.postgres / fresh.postgres
            let rate = fresh.rps / old.rps
            result["history_over_fresh"] = [
                "postgres_cpu_us_per_job": Format.json(cost, places: 100), "rps_slowdown": Format.json(rate, places: 100),
            ]
            result["targets"] = ["history_within_1.2x_of_fresh": ["value": Format.json(max(cost, rate), places: 100), "met": max(cost, rate) <= 1.2]]
            table.notes.append(
                "history ÷ fresh: Postgres CPU per validation \(Format.json(cost, places: 100))×, validations/s \(Format.json(1 / rate, places: 100))×; "
                    + "target within 1.2×: \(max(cost, rate) <= 1.2 ? "met" : "not met")")
        }
        table.notes.append("history loaded in \(load["load_s"] ?? "?") s\((load["reused"] as? Bool) == true ? " (an earlier run; reused)" : "")")
        print(table.render())
        return result
    }
}
