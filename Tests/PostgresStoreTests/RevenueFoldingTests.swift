import BaseSupport
import Foundation
import Libpq
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import ServerTesting
import Synchronization
import SystemTesting
import Testing

/// The revenue rollup's shards of past days folded into one row (migration 0040,
/// `PostgresRevenueFolding`): every sum kept, the open days left alone, a late write folded by the
/// next run, and a fold that meets a worker's uncommitted write waits for it and folds its value.
@Suite("Postgres revenue folding", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct RevenueFoldingTests {
    let configuration: AppConfiguration
    let connection: PostgresConnection
    let pool: PostgresConnectionPool
    let app: AppRecord
    let folding: PostgresRevenueFolding
    /// 2027-01-15 00:00 UTC.
    static let today = Date(timeIntervalSince1970: 1_800_000_000 - 1_800_000_000.truncatingRemainder(dividingBy: 86_400))

    init() throws {
        (configuration, connection, app) = try TestSystem.newApp(named: "revenue-fold", bundleID: "com.example.revenue.fold")
        pool = PostgresConnectionPool(configuration: configuration.postgres, size: 1)
        folding = PostgresRevenueFolding(connection: connection, apps: [app.id])
    }

    func day(_ offset: Int) -> String { RevenueCalendar.text(Self.today.addingTimeInterval(Double(offset) * 86_400)) }

    /// Adds to one shard's row as the rollup does (gross, purchases, one active and its MRR).
    func add(_ gross: Int64, day: String, currency: String, shard: Int, on connection: PostgresConnection) throws {
        _ = try connection.query(
            """
            INSERT INTO revenue_daily AS r (app_id, day, currency, shard, gross_milli, purchases, active_delta, mrr_delta_milli)
            VALUES (\(app.id), \(day)::date, \(currency), \(shard)::smallint, \(gross), 1, 1, \(gross))
            ON CONFLICT (app_id, day, currency, shard) DO UPDATE SET gross_milli = r.gross_milli + EXCLUDED.gross_milli,
                purchases = r.purchases + EXCLUDED.purchases, active_delta = r.active_delta + EXCLUDED.active_delta,
                mrr_delta_milli = r.mrr_delta_milli + EXCLUDED.mrr_delta_milli
            """)
    }

    /// The shards each (day, currency) of the app holds.
    func shards() throws -> [String: [Int]] {
        try connection.query(
            "SELECT day::text || ' ' || currency AS g, array_agg(shard ORDER BY shard)::text AS s FROM revenue_daily WHERE app_id = \(app.id) GROUP BY 1"
        ).rows.reduce(into: [:]) { result, row in
            result[row.string("g") ?? ""] = (row.string("s") ?? "{}").dropFirst().dropLast().split(separator: ",").compactMap { Int($0) }
        }
    }

    func figures() async throws -> [RevenueDay] {
        try #require(try await PostgresRevenueFigures(pool: pool).revenue(appID: app.id, from: day(-12), to: day(0)))
    }

    @Test("Past days' shards fold into shard 0 batch by batch, sums unchanged; open days stay sharded; a late write folds next run")
    func folds() async throws {
        defer {
            pool.close()
            connection.close()
        }
        for (offset, currency, shard, gross) in [
            (-10, "USD", 0, 990), (-10, "USD", 3, 1_990), (-10, "USD", 7, 2_990), (-10, "EUR", 5, 4_990), (-9, "USD", 15, 990),
            (-1, "USD", 2, 990), (-1, "USD", 5, 990), (0, "USD", 11, 990),
        ] {
            try add(Int64(gross), day: day(offset), currency: currency, shard: shard, on: connection)
        }
        let before = try await figures()
        let cutoff = day(-2)
        #expect(try folding.foldShards(before: cutoff, limit: 2) == 2)
        #expect(try folding.foldShards(before: cutoff, limit: 2) == 1)
        #expect(try folding.foldShards(before: cutoff, limit: 2) == 0)
        let folded = try shards()
        #expect(folded["\(day(-10)) USD"] == [0] && folded["\(day(-10)) EUR"] == [0] && folded["\(day(-9)) USD"] == [0])
        #expect(folded["\(day(-1)) USD"] == [2, 5] && folded["\(day(0)) USD"] == [11])
        #expect(try await figures() == before)
        let usd = try #require(before.first { $0.day == day(-10) && $0.currency == "USD" })
        #expect(usd.grossMilli == 5_970 && usd.purchases == 3)

        // A late write to a folded day lands in a shard again; the next run folds it.
        try add(10, day: day(-10), currency: "USD", shard: 9, on: connection)
        #expect(try folding.foldShards(before: cutoff, limit: 100) == 1)
        #expect(try shards()["\(day(-10)) USD"] == [0])
        #expect(try await figures().first { $0.day == day(-10) && $0.currency == "USD" }?.grossMilli == 5_980)
    }

    @Test("A fold meeting a worker's uncommitted write to a shard waits for it and folds what it committed")
    func waitsForWriter() async throws {
        let writer = try PostgresConnection(configuration: configuration.postgres, label: "writer")
        defer {
            writer.close()
            pool.close()
            connection.close()
        }
        try add(100, day: day(-20), currency: "USD", shard: 4, on: connection)
        try add(200, day: day(-20), currency: "USD", shard: 6, on: connection)
        try writer.execute("BEGIN")
        try add(5, day: day(-20), currency: "USD", shard: 4, on: writer)
        let (postgres, apps, cutoff) = (configuration.postgres, [app.id], day(-2))
        // The fold blocks on its row lock: a thread of its own, not one of the test pool's.
        let folded = Mutex<Result<Int, any Error>?>(nil)
        NamedThread.start("revenue-folder") {
            let result = Result {
                let folder = try PostgresConnection(configuration: postgres, label: "folder")
                defer { folder.close() }
                return try PostgresRevenueFolding(connection: folder, apps: apps).foldShards(before: cutoff, limit: 10)
            }
            folded.withLock { $0 = result }
        }
        // Asked on another connection than the writer's: inside a transaction, pg_stat_activity
        // is the snapshot of its first read.
        let waiting = try await eventually(timeout: .seconds(10)) {
            try await !connection.query(
                """
                SELECT 1 FROM pg_stat_activity
                WHERE wait_event_type = 'Lock' AND query LIKE '%picked AS%' AND query NOT LIKE '%pg_stat_activity%'
                """
            ).rows.isEmpty
        }
        #expect(waiting, "the fold waits for the writer's row")
        try writer.execute("COMMIT")
        #expect(try await eventually(timeout: .seconds(10)) { folded.withLock { $0 != nil } })
        #expect(try folded.withLock { $0 }?.get() == 1)
        #expect(try shards()["\(day(-20)) USD"] == [0])
        let sum = try await connection.query(
            "SELECT gross_milli FROM revenue_daily WHERE app_id = \(app.id) AND day = \(day(-20))::date AND shard = 0"
        ).rows.first?.int("gross_milli")
        #expect(sum == 305)
    }
}
