import DevTools
import Foundation
import Hiredis
import Libpq
import MockAppStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import RedisJobQueue
import SystemTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A worker process killed with SIGKILL while it applies notifications: the janitor gives its jobs
/// back, and every notification ends applied exactly once.
/// In the crash-recovery suite, so that two worker processes under test never share the cores.
extension CrashRecoveryTests {
    @Test("2,000 notifications, the worker killed mid-batch, a janitor pass: each stored and applied once, nothing dead")
    func killNineMidBatchNotifications() async throws {
        let jobs = 2000
        let fixture = try await WorkerProcessFixture(
            jobs: 0, appleDelay: .zero,
            worker: ["WORKER_CONCURRENCY": "16", "WORKER_HEARTBEAT_TTL_SECONDS": "2", "WORKER_SHUTDOWN_TIMEOUT_SECONDS": "10"])
        defer { Task { await fixture.close() } }
        let authority = try MockAppleJWSAuthority.generate()
        let now = (Date().timeIntervalSince1970 * 1000).rounded()
        let ids = Int.random(in: 1...9_000_000) * 1_000_000
        for batch in stride(from: 0, to: jobs, by: 250) {
            let commands = try (batch..<min(batch + 250, jobs)).map { index -> [[UInt8]] in
                let transaction = try authority.sign(
                    .object([
                        "transactionId": .string(String(ids + index)), "originalTransactionId": .string(String(ids + index)),
                        "bundleId": .string(fixture.app.bundleID), "productId": .string("com.example.lifetime"), "purchaseDate": .number(now - 1000),
                        "type": .string("Non-Consumable"), "environment": .string("Production"), "revocationDate": .number(now),
                        "revocationReason": .number(1),
                    ]))
                let envelope = JobEnvelope(
                    id: JobID.make(), appID: fixture.app.id, enqueuedAt: Date(), origin: .apple,
                    payload: .notification(
                        NotificationJob(
                            notificationID: "crash-\(index)",
                            body: try authority.sign(
                                .object([
                                    "notificationType": .string("REFUND"), "notificationUUID": .string(UUID().uuidString.lowercased()),
                                    "signedDate": .number(now),
                                    "data": .object(["signedTransactionInfo": .string(transaction), "environment": .string("Production")]),
                                ])), bundleID: fixture.app.bundleID, environment: "production")))
                return [Array("LPUSH".utf8), Array(fixture.keys.queue("notification").utf8), envelope.encoded()]
            }
            _ = try fixture.redis.pipeline(bytes: commands)
        }
        func stored() throws -> Int {
            try fixture.pg.query("SELECT count(*) AS n FROM notifications WHERE app_id = \(fixture.app.id)").rows.first?.int("n") ?? -1
        }

        let first = try fixture.startWorker()
        let (pg, app) = (fixture.pg, fixture.app.id)
        try await Self.killWorker(first) {
            try pg.query("SELECT count(*) AS n FROM notifications WHERE app_id = \(app)").rows.first?.int("n") ?? -1 >= jobs / 10
        }
        let storedAtKill = try stored()
        #expect(storedAtKill >= jobs / 10 && storedAtKill < jobs, "killed mid-run (\(storedAtKill) stored)")
        #expect(try fixture.inProcessing() > 0, "jobs were in hand when the worker died")

        let second = try fixture.startWorker()
        let maintenance = RedisMaintenance(
            connection: try RedisConnection(configuration: try AppConfiguration(environment: fixture.environment).redis), keys: fixture.keys)
        // Until every job is stored and none is left anywhere (queued, held, retrying): only then can
        // no duplicate still come.
        let settled = try await eventually(timeout: .seconds(120), interval: .milliseconds(200)) {
            _ = try maintenance.requeueOrphans()
            return try stored() >= jobs && fixture.redis.send(["LLEN", fixture.keys.queue("notification")]).int == 0
                && fixture.inProcessing() == 0 && fixture.redis.send(["ZCARD", fixture.keys.retry]).int == 0
        }
        #expect(settled, "\((try? stored()) ?? -1) of \(jobs) stored; \((try? fixture.whereabouts()) ?? "?")")
        #expect(try stored() == jobs, "each notification stored once")
        let ledger = try #require(
            try await fixture.pg.query(
                """
                SELECT count(*) AS n, count(cancellation_date) AS refunded, count(DISTINCT receipt_id) AS receipts
                FROM in_app_purchases WHERE app_id = \(fixture.app.id)
                """
            ).rows.first)
        #expect(ledger.int("n") == jobs && ledger.int("refunded") == jobs, "each refund applied")
        #expect(ledger.int("receipts") == jobs, "one receipt row per purchase no receipt had brought")
        #expect(try fixture.redis.send(["ZCARD", fixture.keys.dead]).int == 0)
        #expect(try fixture.redis.send(["LLEN", fixture.keys.queue("notification")]).int == 0)
        #expect(try fixture.inProcessing() == 0)
        kill(second.processIdentifier, SIGTERM)
        second.waitUntilExit()
        #expect(second.terminationReason == .exit && second.terminationStatus == 0)
    }
}
