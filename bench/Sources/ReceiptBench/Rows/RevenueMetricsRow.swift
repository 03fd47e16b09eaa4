import Curl
import DevTools
import Foundation
import Libpq
import Logging
import OpenSSL
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptScheduler
import ReceiptTesting

/// `revenue_metrics`: how long `GET /admin/api/apps/{app_id}/metrics` takes to answer a year of an
/// app with a million purchases (issue 43: ≤ 50 ms).
///
/// The endpoint reads only the rollup (`revenue_daily`), never the ledger, so what decides its time
/// is how many rollup rows the year holds, not how the purchases got there. The row writes the rows
/// the worker's rollup would hold for `--purchases` purchases in the year (and as many in the year
/// before, whose sums are the opening levels): each purchase on a day of its year, in one of
/// `--currencies` currencies, written by one of the 16 shards — every shard of every currency of
/// every day present, the most rows such an app can have — and folds the past days' shards as the
/// schedule role's `RevenueFolding` does (the open days keep theirs). Then `receiptq serve` answers the year
/// over HTTP with the admin's credentials, `--iterations` times after a warm-up, and the row reports
/// the wall time per answer (median, p90, p99) and the server's CPU per answer.
enum RevenueMetricsRow: BenchRow {
    static let name = "revenue_metrics"
    static let summary = "The admin API's revenue figures for a year of a 1 M-purchase app: wall time per answer (target ≤ 50 ms)"
    static let services = ["redis", "postgres"]
    static let products = ["receiptq"]
    static let defaultIterations = 200
    static let options = [
        OptionSpec(name: "--purchases", takesValue: true, help: "purchases in the year asked for, and again in the year before (default 1000000)"),
        OptionSpec(name: "--currencies", takesValue: true, help: "currencies the purchases are spread over (default 12, at most 40)"),
        OptionSpec(name: "--receiptq", takesValue: true, help: "the receiptq binary (default: next to receiptq-bench)"),
    ]
    static let targetMilliseconds = 50.0
    /// Storefront currencies an app sells in, the most common first.
    static let currencyCodes = [
        "USD", "EUR", "GBP", "JPY", "CAD", "AUD", "CHF", "SEK", "NOK", "DKK", "PLN", "BRL", "MXN", "INR", "CNY", "KRW", "TRY", "ZAR",
        "SGD", "HKD", "NZD", "CZK", "HUF", "ILS", "SAR", "AED", "TWD", "THB", "IDR", "MYR", "PHP", "VND", "CLP", "COP", "PEN", "EGP",
        "NGN", "PKR", "KZT", "QAR",
    ]

    static func run(_ options: BenchOptions) throws -> [String: Any] {
        let purchases = try options.positive("--purchases", default: 1_000_000)
        let currencies = min(40, try options.positive("--currencies", default: 12))
        let iterations = options.iterations(default: defaultIterations)
        let warmup = options.warmup(forIterations: iterations)
        let receiptq = try PipelineRow.locateReceiptq(options.extra["--receiptq"])

        let configuration = try AppConfiguration()
        try ReceiptQueueApp.migrate(configuration)
        let postgres = try PostgresConnection(configuration: configuration.postgres, label: "bench")
        defer { postgres.close() }
        let (app, _) = try AppAdmin(connection: postgres).addApp(
            name: "bench-revenue-\(UUID().uuidString.prefix(8).lowercased())", bundleID: "com.example.receiptq.bench.revenue", sharedSecret: nil)
        defer { BenchApps.delete([app.id], on: postgres, row: name) }

        // The year asked for ends yesterday (UTC); the year before it holds the opening levels.
        let to = RevenueCalendar.text(Date().addingTimeInterval(-86_400))
        let from = RevenueCalendar.text(Date().addingTimeInterval(-365 * 86_400))
        FileHandle.standardError.write(Data("revenue_metrics: writing the rollup of 2 × \(purchases) purchases…\n".utf8))
        let seeded = Date()
        let rows = try seed(app: app.id, purchases: purchases, currencies: currencies, lastDay: to, on: postgres)
        let seedSeconds = Date().timeIntervalSince(seeded)
        // What the schedule role's folding leaves: past days in one row per currency, the open
        // days (today and the two before) still in their shards.
        let folding = Date()
        let groups = try RevenueFolding(
            configuration: .init(batchPause: .zero), make: { throw BenchFailure(description: "run here, not as a service") },
            logger: Logger(label: "bench-revenue-folding")
        ).fold(PostgresRevenueFolding(connection: postgres, apps: [app.id]))
        let foldSeconds = Date().timeIntervalSince(folding)
        let kept = try postgres.query("SELECT count(*) AS n FROM revenue_daily WHERE app_id = \(app.id)").rows.first?.int("n") ?? 0

        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("receiptq-bench-revenue-\(getpid())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        // serve checks Apple's signatures at its doors and will not start without a trust root; a
        // mock chain's root is one (no request of this row is signed).
        let trust = directory.appendingPathComponent("trust")
        try FileManager.default.createDirectory(at: trust, withIntermediateDirectories: true)
        try MockAppleJWSAuthority.generate().root.pem.write(to: trust.appendingPathComponent("root.pem"), atomically: true, encoding: .utf8)
        let port = try freeLoopbackPort()
        var environment = ProcessInfo.processInfo.environment
        environment.merge([
            "REDIS_KEY_PREFIX": "{rqr-\(String(UInt32.random(in: 0...UInt32.max), radix: 16))}", "HTTP_HOST": "127.0.0.1",
            "HTTP_PORT": String(port), "RECEIPTQ_TRUST_ROOTS_DIR": trust.path, "LOG_LEVEL": "warning", "RECEIPTQ_ENV": "development",
        ]) { _, new in new }
        let server = try ChildProcess(executable: receiptq, arguments: ["serve"], environment: environment, label: "serve", logDirectory: directory)
        defer { server.stop(grace: 10) }
        guard Network.waitForListener(port: port, timeout: 30) else {
            throw BenchFailure(description: "receiptq serve did not listen on \(port):\n\(server.logTail())")
        }

        let easy = try CurlEasy(options: CurlOptions())
        let password = environment["DASHBOARD_PASSWORD"].flatMap { $0.isEmpty ? nil : $0 } ?? "receiptq-dev"
        let request = HTTPRequest(
            method: "GET", url: "http://127.0.0.1:\(port)/admin/api/apps/\(app.id.uuidString.lowercased())/metrics?from=\(from)&to=\(to)",
            headers: [("Authorization", "Basic " + Data("admin:\(password)".utf8).base64EncodedString())])
        var days = 0
        for _ in 0..<warmup {
            let response = try easy.perform(request)
            guard response.status == 200 else {
                throw BenchFailure(
                    description:
                        "revenue_metrics: the endpoint answered \(response.status): \(String(decoding: response.body.prefix(300), as: UTF8.self))")
            }
            days = (try? JSONDecoder().decode(JSONValue.self, from: Data(response.body)))?["days"]?.arrayValue?.count ?? 0
        }
        var samples = Samples(capacity: iterations)
        let cpuBefore = ProcessStats.cpuMicros(pid: server.pid) ?? 0
        for _ in 0..<iterations {
            let start = DispatchTime.now().uptimeNanoseconds
            let response = try easy.perform(request)
            samples.wall.append(DispatchTime.now().uptimeNanoseconds - start)
            guard response.status == 200 else { throw BenchFailure(description: "revenue_metrics: the endpoint answered \(response.status)") }
        }
        let serverMicros = max(0, (ProcessStats.cpuMicros(pid: server.pid) ?? 0) - cpuBefore) / Double(iterations)
        let wall = Distribution(nanoseconds: samples.wall)

        var table = TextTable(
            title: "revenue_metrics: GET /admin/api/apps/{app_id}/metrics?from=\(from)&to=\(to), \(iterations) answers after \(warmup)",
            headers: [
                "purchases/year", "currencies", "rows written", "rows folded to", "day×currency figures", "p50 ms", "p90 ms", "p99 ms",
                "serve µs/answer",
            ])
        table.add([
            String(purchases), String(currencies), String(rows), String(kept), String(days), String(format: "%.2f", wall.p50 / 1_000),
            String(format: "%.2f", wall.p90 / 1_000), String(format: "%.2f", wall.p99 / 1_000), Format.micros(serverMicros),
        ])
        table.notes = [
            "the rollup of 2 × \(purchases) purchases (this year and the year before) written in \(String(format: "%.1f", seedSeconds)) s: every shard of every currency of every day; "
                + "then folded as the schedule role does (\(groups) day × currency groups, \(String(format: "%.1f", foldSeconds)) s in batches of 500)",
            "wall time: one connection, request to whole body, HTTP/1.1 keep-alive on loopback; target p50 ≤ \(Int(targetMilliseconds)) ms: "
                + (wall.p50 / 1_000 <= targetMilliseconds ? "met" : "not met"),
        ]
        print(table.render())
        return [
            "unit": "ms per answer (wall)", "purchases_per_year": purchases, "currencies": currencies, "rollup_rows_written": rows,
            "rollup_rows_after_folding": kept, "fold_seconds": Format.json(foldSeconds, places: 100),
            "figures": days, "iterations": iterations, "p50_ms": Format.json(wall.p50 / 1_000, places: 100),
            "p90_ms": Format.json(wall.p90 / 1_000, places: 100), "p99_ms": Format.json(wall.p99 / 1_000, places: 100),
            "serve_us_per_answer": Format.json(serverMicros), "target_ms": targetMilliseconds,
            "target_met": wall.p50 / 1_000 <= targetMilliseconds,
        ]
    }

    /// Writes the rollup's rows for `purchases` purchases in each of the two years ending on
    /// `lastDay`, inside Postgres: purchase `i` falls on day `i mod 730` back from `lastDay`, in
    /// currency `(i / 730) mod currencies`, by shard `(i / (730 × currencies)) mod 16` (so a
    /// million a year reaches every shard of every currency of every day); four in ten are a subscription's
    /// first period (one more active, its price a month's MRR), four in ten a renewal, one a
    /// one-time purchase and one in ten refunds its price and ends its subscription. Returns the
    /// rows written.
    static func seed(app: UUID, purchases: Int, currencies: Int, lastDay: String, on postgres: PostgresConnection) throws -> Int {
        let codes = Array(currencyCodes.prefix(currencies))
        let literal = "{" + codes.joined(separator: ",") + "}"
        let total = 2 * purchases
        let written = try postgres.query(
            """
            WITH p AS (
                SELECT \(app)::uuid AS app_id, \(lastDay)::date - (i % 730)::int AS day,
                       (\(literal)::text[])[1 + (i / 730) % \(codes.count)] AS currency,
                       ((i / (730 * \(codes.count))) % 16)::smallint AS shard,
                       i % 10 AS kind, 990 + (i % 7) * 1000 AS price
                FROM generate_series(0, \(total) - 1) AS i
            ), rows AS (
                INSERT INTO revenue_daily (app_id, day, currency, shard, gross_milli, purchases, refunds_milli, refunds,
                                           new_subscriptions, renewals, churned, active_delta, mrr_delta_milli)
                SELECT app_id, day, currency, shard, sum(price), count(*), COALESCE(sum(price) FILTER (WHERE kind = 9), 0),
                       count(*) FILTER (WHERE kind = 9), count(*) FILTER (WHERE kind < 4),
                       count(*) FILTER (WHERE kind BETWEEN 4 AND 7), count(*) FILTER (WHERE kind = 9),
                       count(*) FILTER (WHERE kind < 4) - count(*) FILTER (WHERE kind = 9),
                       COALESCE(sum(price) FILTER (WHERE kind < 4), 0) - COALESCE(sum(price) FILTER (WHERE kind = 9), 0)
                FROM p GROUP BY app_id, day, currency, shard
                RETURNING 1
            )
            SELECT count(*) AS n FROM rows
            """
        ).rows.first?.int("n")
        try postgres.execute("ANALYZE revenue_daily")
        return written ?? 0
    }
}
