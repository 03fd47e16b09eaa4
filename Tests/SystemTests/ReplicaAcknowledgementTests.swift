import Foundation
import Hiredis
import Libpq
import ReceiptCore
import ReceiptQueueApp
import ReceiptTesting
import RedisJobQueue
import ServerTesting
import SystemTesting
import Telemetry
import Testing

/// `REDIS_MIN_REPLICAS_ACK`: the API answers 2xx only once a replica holds the job, against a
/// throwaway primary and a replica of it (real `redis-server` processes on loopback).
@Suite("Redis: acknowledged replication before a 2xx", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled), .serialized)
struct ReplicaAcknowledgementTests {
    /// Waits until the replica follows `primary` with its link up.
    func waitForReplication(primary: ThrowawayRedis, replica: ThrowawayRedis) async throws -> Bool {
        try await eventually(timeout: .seconds(60)) {
            let connection = try RedisConnection(
                configuration: RedisConfiguration(host: "127.0.0.1", port: replica.port), label: "replica-info")
            defer { connection.close() }
            return (try connection.send(["INFO", "replication"]).string ?? "").contains("master_link_status:up")
        }
    }

    @Test(
        "With a replica following, receipts are answered once it holds them; cut off (SIGSTOP), 503 with Retry-After; back, the retry is the same receipt, stored once"
    )
    func acknowledgedOrRefused() async throws {
        let primary = try ThrowawayRedis()
        defer { primary.destroy() }
        let replica = try ThrowawayRedis(extraArguments: ["--replicaof", "127.0.0.1", String(primary.port)])
        defer { replica.destroy() }
        #expect(try await waitForReplication(primary: primary, replica: replica), "the replica follows the primary")
        // Two seconds: a following replica acknowledges within milliseconds, but on a loaded machine
        // (two cores, every suite running) 300 ms once passed before it did, and the first receipt
        // got a 503. The cut-off replica below costs the test this long once.
        let system = try await TestSystem.start(
            environment: ["REDIS_PORT": String(primary.port), "REDIS_MIN_REPLICAS_ACK": "1", "REDIS_REPLICA_ACK_TIMEOUT_MS": "2000"])
        defer { Task { await system.stop() } }

        // Followed: validated and answered as without replication.
        let (first, _) = try system.forgeReceipt()
        let (status, resource) = try await system.post(#"{"receipt":"\#(first)"}"#)
        #expect(status == 200)
        let id = try #require(resource?["id"]?.stringValue)
        // The replica has what the 2xx promised: the receipt's idempotency key names its id.
        let replicaConnection = try RedisConnection(configuration: RedisConfiguration(host: "127.0.0.1", port: replica.port), label: "replica")
        defer { replicaConnection.close() }
        let prefix = system.configuration.keys.prefix
        let keys = try replicaConnection.send(["KEYS", "\(prefix):idem:*"]).array?.compactMap(\.string) ?? []
        #expect(keys.count == 1)
        #expect(try replicaConnection.send(["GET", keys.first ?? "-"]).string == id)

        // The replica cut off: the primary takes the job but no replica acknowledges it, so the API
        // does not promise it (503, Retry-After), and says so in its metric.
        replica.signal(SIGSTOP)
        let (second, _) = try system.forgeReceipt()
        let (refused, answer) = try await system.post(#"{"receipt":"\#(second)","user_identifier":"during-partition"}"#)
        replica.signal(SIGCONT)
        #expect(refused == 503, "\(String(describing: answer))")
        let metrics = String(decoding: system.metrics.exposition(), as: UTF8.self)
        let timeouts = metrics.split(separator: "\n").first { $0.hasPrefix("receiptq_redis_replication_timeouts_total ") }
        #expect((timeouts?.split(separator: " ").last.flatMap { Double($0) } ?? 0) >= 1, "\(timeouts ?? "no metric")")

        // Back: the client's retry of the same receipt is answered (with the id the first try may
        // have queued), and Postgres ends with it once.
        #expect(try await waitForReplication(primary: primary, replica: replica))
        let (retried, again) = try await system.post(#"{"receipt":"\#(second)","user_identifier":"during-partition"}"#)
        #expect(retried == 200 || retried == 206, "\(String(describing: again))")
        let pg = try system.postgres()
        defer { pg.close() }
        let stored = try await eventually {
            try await pg.query("SELECT count(*) AS n FROM receipts WHERE app_id = \(system.app.id) AND status = 'valid'").rows.first?.int("n") == 2
        }
        #expect(stored)
        #expect(
            try await pg.query("SELECT count(*) AS n FROM receipts WHERE app_id = \(system.app.id) AND user_identifier = 'during-partition'")
                .rows.first?.int("n") == 1)
    }

    @Test("Without any replica, REDIS_MIN_REPLICAS_ACK=1 refuses every receipt with 503: it never answers 2xx on the primary alone")
    func noReplica() async throws {
        let primary = try ThrowawayRedis()
        defer { primary.destroy() }
        let system = try await TestSystem.start(
            environment: ["REDIS_PORT": String(primary.port), "REDIS_MIN_REPLICAS_ACK": "1", "REDIS_REPLICA_ACK_TIMEOUT_MS": "100"])
        defer { Task { await system.stop() } }
        let (receipt, _) = try system.forgeReceipt()
        let (status, _) = try await system.post(#"{"receipt":"\#(receipt)"}"#)
        #expect(status == 503)
        // The batch endpoint makes the same promise item by item.
        let (batchStatus, answer) = try await system.post(#"[{"receipt":"\#(receipt)"}]"#, path: BulkImportTests.batchPath)
        #expect(batchStatus == 503)
        #expect(answer?["items"]?.arrayValue?.first?["status"]?.intValue == 503)
    }

    @Test("A replica's READONLY is a failover error, for one command and for a pipeline (after reading every reply); the connection then works again")
    func readOnlyReplicaIsAFailover() async throws {
        let primary = try ThrowawayRedis()
        defer { primary.destroy() }
        let replica = try ThrowawayRedis(extraArguments: ["--replicaof", "127.0.0.1", String(primary.port)])
        defer { replica.destroy() }
        #expect(try await waitForReplication(primary: primary, replica: replica))
        let connection = try RedisConnection(configuration: RedisConfiguration(host: "127.0.0.1", port: replica.port), label: "it-readonly")
        defer { connection.close() }
        let single = #expect(throws: RedisError.self) { try connection.send(["SET", "it-readonly-key", "s3cret-value"]) }
        #expect(single?.code == .failover)
        #expect(single.map { !"\($0)".contains("s3cret") } == true)
        // Reads in the same pipeline ran, but it fails whole: its writes did not.
        let pipelined = #expect(throws: RedisError.self) {
            try connection.pipeline([["GET", "it-readonly-key"], ["LPUSH", "it-readonly-list", "x"], ["PING"]])
        }
        #expect(pipelined?.code == .failover)
        // The context was dropped and is made again: the next command is answered.
        #expect(try connection.send(["PING"]).string == "PONG")
        // A server error that is no failover stays one.
        let wrongType = #expect(throws: RedisError.self) { try connection.send(["INCR", "it-no-such-command-x", "extra"]) }
        #expect(wrongType?.code == .server)
    }
}
