import Foundation
import Libpq
import PostgresStore
import ReceiptCore
import ReceiptTesting
import ServerTesting
import SystemTesting
import Testing

/// A Postgres restart under a running API (issue 41, item 5): the first requests after it are
/// answered, and `/health/ready` says when Postgres is down.
///
/// The API runs on a throwaway Postgres cluster of its own (the shared one is never restarted),
/// and the restart is `pg_ctl -m immediate stop` then `start -w` (what `pg_ctl restart` and
/// `pg_isready` amount to): every session the API's pool held is gone, unknown to the pool.
@Suite("Postgres restarted: the first request after is answered", .blockingWork, .enabled(if: TestEnvironment.integrationEnabled))
struct PostgresRecoveryTests {
    static let subscriptions = "/client/subscriptions?user_identifier=recovery-user"

    func readiness(_ system: TestSystem) async throws -> (Int, String?) {
        let (status, body) = try await system.get(path: "/health/ready")
        return (status, body?["status"]?.stringValue)
    }

    @Test("After an immediate restart the first GET /client/subscriptions and POST are 2xx; /health/ready is 503 only while down")
    func firstRequestsAfterAnImmediateRestart() async throws {
        let server = try await offload { try ThrowawayPostgres() }
        defer { server.destroy() }
        try await offload { try server.createDatabase(user: "receiptq", database: "receiptq_recovery") }
        // No wait for the worker: a POST's answer is the door's own (token, then Redis): 206.
        let system = try await TestSystem.start(environment: [
            "POSTGRES_HOSTNAME": "127.0.0.1", "POSTGRES_PORT": String(server.port), "POSTGRES_USER": "receiptq",
            "POSTGRES_DB": "receiptq_recovery", "API_SYNC_WAIT_MS": "0",
        ])
        do {
            try await scenario(system, server)
        } catch {
            await system.stop()
            throw error
        }
        await system.stop()
    }

    private func scenario(_ system: TestSystem, _ server: ThrowawayPostgres) async throws {
        // The pool's connection is made (and the token cached) before the restart.
        #expect(try await system.get(path: Self.subscriptions).0 == 200)
        #expect(try await readiness(system).0 == 200)

        // A read first after the restart. Between the stop and the start the readiness probes
        // use a connection of their own: the pooled one stays as the restart left it.
        try await offload { try server.stop(mode: "immediate") }
        let down = try await eventually(timeout: .seconds(10)) { try await readiness(system).0 == 503 }
        #expect(down, "/health/ready says not ready while Postgres is down")
        #expect(try await readiness(system) == (503, "postgres unreachable"))
        try await offload { try server.start() }
        #expect(try await system.get(path: Self.subscriptions).0 == 200, "the first read after the restart")
        let ready = try await eventually(timeout: .seconds(10)) { try await readiness(system).0 == 200 }
        #expect(ready, "/health/ready says ready again once Postgres answers")

        // A POST first after the next restart, with a token no cache holds: its look-up is the
        // request's first Postgres call ("Token lookup failed" in the issue, after the 30 s cache).
        // The pooled connection live again before the next restart.
        #expect(try await system.get(path: Self.subscriptions).0 == 200)
        let pg = try system.postgres()
        let fresh = try AppAdmin(connection: pg).rotateToken(appID: system.app.id, revokingOthers: false)
        pg.close()
        try await offload {
            try server.stop(mode: "immediate")
            try server.start()
        }
        let (receipt, _) = try system.forgeReceipt()
        let (status, _) = try await system.post(#"{"receipt":"\#(receipt)"}"#, token: fresh)
        #expect(status == 206, "the first POST after the restart is queued")
        #expect(try await system.get(path: Self.subscriptions, token: fresh).0 == 200)
    }
}
