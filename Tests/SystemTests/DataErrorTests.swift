import Foundation
import Hiredis
import IngestAPI
import Libpq
import MockAppStore
import PostgresStore
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import RedisJobQueue
import ServerTesting
import SystemTesting
import Testing

/// A value Postgres refuses is refused for good: a worker buries the job after one attempt (one
/// Apple call, not five in 28 s), and a read answers 422 or 404 (or 401 for a credential), never
/// "temporarily unavailable". Real Redis, Postgres, workers and mock App Store; the jobs are pushed
/// past the API's gate, as an older ingestion node or a job written by hand would.
@Suite(
    "Data errors are permanent: a dead letter after one attempt, a 422/404 on reads", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled))
struct DataErrorTests {
    /// A job of `system`'s app that the API would have refused: `submission` holds what Postgres cannot store.
    func push(_ system: TestSystem, submission: Submission) throws -> JobEnvelope {
        let (receipt, _) = try system.forgeReceipt()
        let decoded = try DecodedReceipt.decode(receipt).get()
        let envelope = JobEnvelope(
            id: JobID.make(), appID: system.app.id, enqueuedAt: Date(), origin: .api,
            payload: .receipt(
                ReceiptJob(
                    receipt: decoded.base64, style: decoded.receipt.style, bundleID: decoded.receipt.bundleID,
                    environment: decoded.receipt.environment.apiName, submission: submission)))
        let redis = try system.redis()
        defer { redis.close() }
        _ = try redis.send(["LPUSH", system.configuration.keys.queue("validate"), String(decoding: envelope.encoded(), as: UTF8.self)])
        return envelope
    }

    func deadLetters(_ system: TestSystem) throws -> [JobEnvelope] {
        let redis = try system.redis()
        defer { redis.close() }
        return try redis.send(["ZRANGE", system.configuration.keys.dead, "0", "-1"]).array?.compactMap {
            if case .bulk(let bytes) = $0 { try JobEnvelope.decode(bytes) } else { nil }
        } ?? []
    }

    @Test(
        "A NUL Postgres refuses (libpq side in text, server side 22P05 in jsonb): a dead letter after one attempt and one Apple call",
        arguments: [
            Submission(userIdentifier: "nul\u{0}user"),
            Submission(metadata: .object(["campaign": .string("a\u{0}b")])),
        ])
    func refusedWriteIsBuriedAtOnce(submission: Submission) async throws {
        let system = try await TestSystem.start(environment: ["RETRY_BASE_MS": "50"])
        defer { Task { await system.stop() } }
        let envelope = try push(system, submission: submission)
        #expect(try await eventually { try deadLetters(system).count == 1 })
        let dead = try #require(try deadLetters(system).first)
        #expect(dead.id == envelope.id)
        #expect(dead.attempt == 1, "buried on its first failure, not retried")
        #expect(dead.errorCode == .storeRefused)
        #expect(dead.errorMessage?.contains("SQLSTATE 22") == true, "\(dead.errorMessage ?? "")")
        #expect(dead.errorMessage?.contains("nul") == false && dead.errorMessage?.contains("campaign") == false, "no value echoed")
        // Not retried as well: a retry is settled (and counted) in the same step as a burial, and the
        // only way to a second attempt. Counted dead, never retried, nothing left to run.
        #expect(try await eventually { system.metric("receiptq_jobs_processed_total", ["outcome": "dead"]) == 1 })
        #expect(
            system.jobsSettled == 1, "settled once, buried: \(system.metric("receiptq_jobs_processed_total", ["outcome": "retried"]) ?? -1) retries")
        #expect(try await eventually { try system.queuesIdle([.validate]) })
        #expect(system.mock.state.requestCount(.production) + system.mock.state.requestCount(.sandbox) <= 2, "one attempt: production, maybe sandbox")
        let redis = try system.redis()
        defer { redis.close() }
        #expect(try redis.send(["ZCARD", system.configuration.keys.retry]).int == 0)
        #expect(try deadLetters(system).count == 1)
    }

    @Test("The store reports a refused value as permanent, and a lost connection as transient")
    func storeClassifies() throws {
        let configuration = try TestSystem.migratedDatabase()
        let connection = try PostgresConnection(configuration: configuration.postgres)
        defer { connection.close() }
        let (app, _) = try AppAdmin(connection: connection).addApp(
            name: "dataerror-\(UUID().uuidString)", bundleID: "com.example.de.\(UUID().uuidString.prefix(8).lowercased())",
            sharedSecret: "s")
        let store = PostgresReceiptStore(connection: connection)
        func record(_ submission: Submission) -> ValidationRecord {
            ValidationRecord(
                envelope: JobEnvelope(
                    id: JobID.make(), appID: app.id, enqueuedAt: Date(), origin: .api,
                    payload: .receipt(ReceiptJob(receipt: "MII", environment: "sandbox", submission: submission))),
                status: .invalid, environment: "sandbox", appleStatus: 21003, purchases: [], latestReceipt: nil, calls: [], validatedAt: Date())
        }
        // One bad record in a batch fails alone, permanently; the good one is stored.
        let results = try store.save([record(Submission(userIdentifier: "ok")), record(Submission(metadata: .object(["k": .string("\u{0}")])))])
        #expect((try? results[0].get()) != nil)
        guard case .failure(let failure) = results[1] else {
            Issue.record("the NUL record was stored")
            return
        }
        #expect(failure.isPermanent)
        #expect(failure.code == .sqlState("22P05"))

        // A connection-level failure is not permanent.
        let pid = try #require(try connection.query("SELECT pg_backend_pid() AS pid").rows.first?.int("pid"))
        let killer = try PostgresConnection(configuration: configuration.postgres)
        defer { killer.close() }
        _ = try killer.query("SELECT pg_terminate_backend(\(pid))")
        do {
            let afterKill = try store.save([record(Submission(userIdentifier: "after"))])
            // The façade may reconnect transparently; then the record is simply stored.
            #expect((try? afterKill[0].get()) != nil)
        } catch let error as PostgresError {
            #expect(!error.isDataError && error.isTransient)
        }
    }

    @Test("Reads: a value Postgres refuses matches nothing: the catalog says so permanently, and credentials are unknown, not unavailable")
    func catalogReads() async throws {
        let configuration = try TestSystem.migratedDatabase()
        let pool = PostgresConnectionPool(configuration: configuration.postgres, size: 1)
        defer { pool.close() }
        let catalog = PostgresCatalog(pool: pool)
        do {
            _ = try await catalog.entitlements(appID: UUID(), userIdentifier: "a\u{0}b")
            Issue.record("a NUL user identifier was looked up")
        } catch let failure as StoreFailure {
            #expect(failure.isPermanent && failure.code == .sqlState("22021"))
        }
        do {
            _ = try await catalog.subscription(appID: UUID(), originalTransactionID: "1\u{0}", environment: nil)
            Issue.record("a NUL transaction id was looked up")
        } catch let failure as StoreFailure {
            #expect(failure.isPermanent)
        }
        #expect(try await catalog.authenticate(token: "rq_abc\u{0}def") == nil)
        #expect(try await catalog.softphoneCredentials(username: "us\u{0}er") == nil)
        // The pool's connection is still good after the refusals.
        #expect(try await catalog.entitlements(appID: UUID(), userIdentifier: "nobody").subscriptions.isEmpty)
    }
}
