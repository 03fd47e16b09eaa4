import Foundation
import Libpq
import Logging
import PostgresStore
import ReceiptCore
import ReceiptScheduler
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// The schedule role's revenue folding step on its clock: a run folds every past day's shards,
/// a batch at a time until a batch comes back short, and leaves today and the open days before it.
@Suite("Revenue folding step", .enabled(if: TestEnvironment.integrationEnabled))
struct RevenueFoldingStepTests {
    @Test("A run folds every due group across batches and keeps the open days sharded")
    func run() throws {
        let (_, connection, app) = try TestSystem.newApp(named: "revenue-fold-step", bundleID: "com.example.revenue.fold.step")
        defer { connection.close() }
        // 2027-01-15 12:00 UTC: with two open days, the 13th, 14th and 15th stay sharded.
        let now = Date(timeIntervalSince1970: 1_800_000_000 - 1_800_000_000.truncatingRemainder(dividingBy: 86_400) + 43_200)
        let days = (1...5).map { RevenueCalendar.text(now.addingTimeInterval(-Double($0) * 86_400)) }
        for day in days {
            for shard in [1, 2] {
                _ = try connection.query(
                    "INSERT INTO revenue_daily (app_id, day, currency, shard, purchases) VALUES (\(app.id), \(day)::date, 'USD', \(shard)::smallint, 1)"
                )
            }
        }
        let step = RevenueFolding(
            configuration: .init(batchSize: 1, batchPause: .zero, openDays: 2), make: { fatalError("not run as a service here") },
            now: { now }, logger: Logger(label: "revenue-folding-test"))
        #expect(try step.fold(PostgresRevenueFolding(connection: connection, apps: [app.id])) == 3)
        let shards = try connection.query(
            "SELECT day::text AS day, count(*)::int AS n, sum(purchases)::int AS p FROM revenue_daily WHERE app_id = \(app.id) GROUP BY day"
        ).rows.reduce(into: [String: [Int]]()) { $0[$1.string("day") ?? ""] = [$1.int("n") ?? 0, $1.int("p") ?? 0] }
        #expect(shards == [days[0]: [2, 2], days[1]: [2, 2], days[2]: [1, 2], days[3]: [1, 2], days[4]: [1, 2]])
    }
}
