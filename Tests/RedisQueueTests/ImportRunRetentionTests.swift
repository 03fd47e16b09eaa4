import Foundation
import Hiredis
import Logging
import ReceiptCore
import ReceiptTesting
import RedisJobQueue
import SystemTesting
import Testing

/// An import's progress in Redis is kept `RETENTION_IMPORT_RUNS_DAYS` after its last batch
/// (``RedisKeys/importRunRetention``), and forever when that is 0, against a real Redis.
@Suite("Import runs' retention", .enabled(if: TestEnvironment.integrationEnabled))
struct ImportRunRetentionTests {
    static let configuration = RedisConfiguration(host: TestEnvironment.redisHost, port: TestEnvironment.redisPort)

    /// Records one batch of import `id` at `at` with `keys`' retention, as the batch endpoint does.
    func record(_ id: UUID, keys: RedisKeys, at: Date) async {
        let pool = RedisConnectionPool(configuration: Self.configuration, size: 1)
        defer { pool.close() }
        let intake = RedisIntake(configuration: Self.configuration, pool: pool, keys: keys, logger: Logger(label: "import-run-test"))
        await intake.recordImport(id, appID: UUID(), tally: ImportBatchTally(queued: 2), at: at)
        intake.shutdown()
    }

    @Test("Kept for its days: the progress expires and older runs leave the index; 0 keeps both and lifts an expiry")
    func keptForItsDays() async throws {
        let prefix = "{rqt-\(UUID().uuidString.prefix(8).lowercased())}"
        let redis = try RedisConnection(configuration: Self.configuration)
        defer {
            _ = try? RedisCleanup.deleteKeys(prefix: prefix, redis)
            redis.close()
        }
        let hour = RedisKeys(prefix: prefix, importRunRetention: 3600)
        let old = UUID()
        let recent = UUID()
        await record(old, keys: hour, at: Date().addingTimeInterval(-7200))
        await record(recent, keys: hour, at: Date())
        let ttl = try #require(try redis.send(["TTL", hour.importRun(recent.canonical)]).int)
        #expect((1...3600).contains(ttl))
        #expect(try redis.send(["ZRANGE", hour.importRuns, "0", "-1"]).array?.compactMap(\.string) == [recent.canonical], "two hours old: gone")

        let forever = RedisKeys(prefix: prefix, importRunRetention: 0)
        let ancient = UUID()
        await record(ancient, keys: forever, at: Date().addingTimeInterval(-400 * 86_400))
        await record(recent, keys: forever, at: Date())
        #expect(try redis.send(["TTL", forever.importRun(recent.canonical)]).int == -1, "the hour's expiry lifted")
        #expect(try redis.send(["TTL", forever.importRun(ancient.canonical)]).int == -1)
        #expect(try redis.send(["ZCARD", forever.importRuns]).int == 2)
    }
}
