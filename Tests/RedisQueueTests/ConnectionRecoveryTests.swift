import Foundation
import Hiredis
import ReceiptCore
import ReceiptTesting
import Synchronization
import SystemTesting
import Testing

@testable import RedisJobQueue

/// What a worker and the API do after Redis broke a connection under them: the processing list
/// reconciled with what the worker holds, a connection the server closed replaced before it is
/// used, and work that is safe to repeat run once more on a fresh one.
@Suite("Redis: reconcile after a lost settle, stale connections, retry once", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled))
struct ConnectionRecoveryTests {
    /// A connection, and a prefix of its own whose keys `close()` deletes.
    final class Fixture {
        let keys = RedisKeys(prefix: "{rqt-\(UUID().uuidString.prefix(8).lowercased())}")
        let configuration = RedisConfiguration(host: TestEnvironment.redisHost, port: TestEnvironment.redisPort)
        let redis: RedisConnection

        init() throws {
            redis = try RedisConnection(configuration: configuration, label: "recovery-test")
        }

        func close() {
            _ = try? RedisCleanup.deleteKeys(prefix: keys.prefix, redis)
            redis.close()
        }

        /// Queues `count` validations, each with its pending key, as the intake does.
        func enqueue(_ count: Int) throws -> [JobEnvelope] {
            let envelopes = (0..<count).map { _ in
                JobEnvelope(id: JobID.make(), appID: UUID(), enqueuedAt: Date(), origin: .api, payload: .sample(.validate))
            }
            for envelope in envelopes {
                _ = try redis.send(["SET", keys.pending(envelope.id.uuidString.lowercased()), "{}"])
                _ = try redis.send(bytes: [Array("LPUSH".utf8), Array(keys.queue(JobKind.validate.rawValue).utf8), envelope.encoded()])
            }
            return envelopes
        }

        func hasPending(_ envelope: JobEnvelope) throws -> Bool {
            try redis.send(["EXISTS", keys.pending(envelope.id.uuidString.lowercased())]).int == 1
        }

        func list(_ key: String) throws -> [[UInt8]] {
            guard case .array(let items) = try redis.send(["LRANGE", key, "0", "-1"]) else { return [] }
            return items.compactMap { if case .bulk(let raw) = $0 { raw } else { nil } }
        }

        /// The id the server gives the connection `body` runs on.
        static func clientID(_ connection: RedisConnection) throws -> String {
            guard let id = try connection.send(["CLIENT", "ID"]).int else { throw RedisQueueError.unexpectedReply("CLIENT ID") }
            return String(id)
        }
    }

    @Test(
        "Reconcile: a stray the worker settled is settled again (acknowledged, pending key gone), one it never held goes back to its queue, one in flight stays; a second reconcile finds nothing"
    )
    func reconcile() throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        let worker = "reconcile-\(UUID().uuidString.prefix(8))"
        let queue = RedisWorkQueue(connection: fixture.redis, keys: fixture.keys, workerID: worker, kinds: [.validate])
        let envelopes = try fixture.enqueue(3)
        let jobs = try queue.reserve(max: 3, timeout: .zero)
        try #require(jobs.count == 3)
        let byID = Dictionary(uniqueKeysWithValues: jobs.compactMap { job in job.envelope.map { ($0.id, job) } })
        let (running, settled, lost) = (try #require(byID[envelopes[0].id]), try #require(byID[envelopes[1].id]), try #require(byID[envelopes[2].id]))

        // `settled` is what a primary lost in a failover leaves: the worker settled it (its result
        // is stored) but the processing list and the pending key say otherwise.
        let done = try queue.reconcile(keeping: [running.raw]) { job in
            job.raw == settled.raw ? .acknowledge(job, result: Array(#"{"status":"valid"}"#.utf8)) : nil
        }
        #expect(done == Reconciliation(resettled: 1, requeued: 1))
        #expect(try fixture.list(fixture.keys.processing(worker)) == [running.raw], "only the job in flight stays in processing")
        #expect(try !fixture.hasPending(envelopes[1]), "the settled job's pending key is gone")
        #expect(try fixture.hasPending(envelopes[2]), "the requeued job is still pending")
        #expect(try fixture.list(fixture.keys.queue(JobKind.validate.rawValue)) == [lost.raw], "the job never held is queued again")
        #expect(try fixture.hasPending(envelopes[0]))

        #expect(try queue.reconcile(keeping: [running.raw]) { _ in nil } == Reconciliation(), "nothing left to put right")
    }

    @Test("A pooled connection the server closed (CLIENT KILL) is replaced before the next command: it answers, no error, nothing retried")
    func staleConnectionReplaced() async throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        let pool = RedisConnectionPool(configuration: fixture.configuration, size: 1)
        defer { pool.close() }
        let first = try await pool.withConnection { try Fixture.clientID($0) }
        #expect(try fixture.redis.send(["CLIENT", "KILL", "ID", first]).int == 1)
        // No retry here: the plain command must not meet the dead socket at all.
        #expect(try await pool.command(["PING"]) == .status("PONG"))
        let second = try await pool.withConnection { try Fixture.clientID($0) }
        #expect(second != first, "a new connection")
    }

    @Test(
        "Retry once: work that breaks its connection mid-command (the server closes it after a reply) runs again on a reconnected one; plain withConnection throws"
    )
    func retryOnce() async throws {
        let fixture = try Fixture()
        defer { fixture.close() }
        let key = fixture.keys.pending("retry-once")
        _ = try fixture.redis.send(["SET", key, "here"])
        let pool = RedisConnectionPool(configuration: fixture.configuration, size: 1)
        defer { pool.close() }
        let runs = Atomic<Int>(0)
        // The first run has the server close the connection after the kill's reply, so the GET
        // pipelined behind it meets end-of-file: an I/O error in the middle of the work.
        let body: @Sendable (RedisConnection) throws -> String? = { connection in
            if runs.add(1, ordering: .relaxed).newValue == 1 {
                let id = try Fixture.clientID(connection)
                _ = try connection.pipeline([["CLIENT", "KILL", "ID", id, "SKIPME", "no"], ["GET", key]])
            }
            return try connection.send(["GET", key]).string
        }
        #expect(try await pool.withConnectionRetryingOnce(body) == "here")
        #expect(runs.load(ordering: .relaxed) == 2, "run twice")

        runs.store(0, ordering: .relaxed)
        let error = await #expect(throws: RedisError.self) { try await pool.withConnection(body) }
        #expect(error?.code == .io, "\(String(describing: error))")
        #expect(error?.isBrokenConnection == true)
        // A timeout is no broken connection: it is not retried.
        #expect(RedisError.timeout.isBrokenConnection == false)
    }
}
