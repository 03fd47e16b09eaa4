import DevTools
import Foundation
import Hiredis
import Libpq
import Logging
import MockAppStore
import OpenSSL
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import RedisJobQueue
import ServerTesting
import ServiceLifecycle
import SystemTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A worker process killed with SIGKILL while deliveries are in flight to a slow receiver: the
/// janitor gives its jobs back, and every event is delivered; a repeat is only ever the same event
/// id again (the receiver may have answered before the worker died).
/// In the crash-recovery suite, so that two worker processes under test never share the cores.
extension CrashRecoveryTests {
    @Test("1,000 events, a worker killed mid-delivery, a janitor pass: every event delivered, repeats only with the same id, nothing dead")
    func killNineMidDelivery() async throws {
        let jobs = 1000
        let fixture = try await WorkerProcessFixture(
            jobs: jobs, appleDelay: .zero,
            worker: ["WORKER_CONCURRENCY": "64", "WORKER_HEARTBEAT_TTL_SECONDS": "2", "WORKER_SHUTDOWN_TIMEOUT_SECONDS": "10"])
        defer { Task { await fixture.close() } }
        var quiet = Logger(label: "crash-webhooks")
        quiet.logLevel = .critical
        let receiver = WebhookReceiver(secret: "pending")
        let (url, receiverTask) = try await receiver.start(logger: quiet)
        defer { receiverTask.cancel() }
        receiver.behave(.init(delay: .milliseconds(30)))
        let configuration = try AppConfiguration(environment: fixture.environment)
        let secrets = try SecretBox(key: try #require(configuration.secretsKey))
        let (_, secret) = try WebhookAdmin(connection: fixture.pg, secrets: secrets).add(
            appID: fixture.app.id, url: url, allowPrivate: true, audit: .test("webhook.add"))
        receiver.setSecret(secret)
        let dispatcher = ServiceGroup(
            services: [ReceiptQueueApp.makeWebhookDispatcher(configuration, onlyApps: [fixture.app.id], logger: quiet)],
            gracefulShutdownSignals: [], logger: quiet)
        let dispatching = Task { try await dispatcher.run() }
        defer {
            Task {
                await dispatcher.triggerGracefulShutdown()
                _ = try? await dispatching.value
            }
        }
        func events() throws -> Set<String> {
            Set(
                try fixture.pg.query("SELECT id FROM events WHERE app_id = \(fixture.app.id)").rows.compactMap { $0.uuid("id")?.canonical })
        }
        func delivered() -> Set<String> { Set(receiver.deliveries.filter { $0.status == 200 }.map(\.eventID)) }

        let first = try fixture.startWorker()
        try await Self.killWorker(first) { receiver.deliveries.filter { $0.status == 200 }.count >= jobs / 5 }
        let deliveredAtKill = delivered().count
        #expect(deliveredAtKill >= jobs / 5 && deliveredAtKill < jobs, "killed mid-run (\(deliveredAtKill) delivered)")

        let second = try fixture.startWorker()
        let maintenance = RedisMaintenance(connection: try RedisConnection(configuration: configuration.redis), keys: fixture.keys)
        var expected = try events()
        _ = try await eventually(timeout: .seconds(120), interval: .milliseconds(200)) {
            _ = try maintenance.requeueOrphans()
            expected = try events()
            return delivered() == expected && expected.count >= jobs
        }
        #expect(expected.count >= jobs, "an event per validation (\(expected.count))")
        #expect(delivered() == expected, "every event delivered: \(delivered().count) of \(expected.count)")
        #expect(receiver.deliveries.allSatisfy { $0.signatureValid })
        // A repeat is a delivery the receiver answered before the kill whose outcome was not yet
        // settled: calling (at most the concurrency, 64) or answered and waiting for its batch's
        // commit (at most another 64, the engine's in-hand bound). 67 were seen in CI.
        let repeats = receiver.deliveries.filter { $0.status == 200 }.count - delivered().count
        #expect(repeats <= 2 * 64, "repeats are the deliveries in hand at the kill (\(repeats))")
        // The receiver's 2xx comes before the worker commits the outcome (its batch lingers a few
        // milliseconds): wait, bounded, for the last rows.
        func rows() async throws -> PostgresRow? {
            try await fixture.pg.query(
                """
                SELECT count(*) AS n, count(*) FILTER (WHERE status = 'delivered') AS delivered
                FROM webhook_deliveries WHERE app_id = \(fixture.app.id)
                """
            ).rows.first
        }
        _ = try await eventually(timeout: .seconds(10)) { try await rows()?.int("delivered") == expected.count }
        let counts = try #require(try await rows())
        #expect(counts.int("n") == expected.count && counts.int("delivered") == expected.count)
        #expect(try fixture.redis.send(["ZCARD", fixture.keys.dead]).int == 0)
        #expect(try fixture.redis.send(["LLEN", fixture.keys.queue("webhook")]).int == 0)
        kill(second.processIdentifier, SIGTERM)
        second.waitUntilExit()
        #expect(second.terminationReason == .exit && second.terminationStatus == 0)
    }
}
